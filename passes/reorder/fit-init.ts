/**
 * A starting point for a level's recovery adapters (reorder.recoverInit=fit): instead of B = 0, each
 * adapter starts as the rank-r least-squares correction of its linear's output toward the full
 * model's. For o_proj / down_proj of a sliced layer that correction is mostly what the dropped heads
 * and neurons contributed, regressed onto the kept ones' activations.
 *
 * Fitted in forward order, one linear at a time, on the level's own activations with the adapters
 * fitted so far applied (so a layer also corrects the drift its inputs carry from earlier layers):
 *   residual  R = Y_full[:, :out] − X·Wᵀ      (the full model's output of this linear − the level's)
 *   Δ*ᵀ = (XᵀX + λI)⁻¹ XᵀR                       (least squares, ridge λ = 1e-3 · mean diag)
 *   Δᵀ  = Δ*ᵀ·V_r·V_rᵀ, V_r the top-r eigenvectors of Δ*·XᵀX·Δ*ᵀ
 * — the best rank-r approximation in the data's metric (‖X·Δᵀ − X·Δ*ᵀ‖, reduced-rank regression).
 * The factors are split evenly between A and B. Training then starts near the answer.
 */
import { tf } from '../../src/exec/autodiff/tf.js';
import type { LowRankTerm, TfModel } from '../../src/exec/autodiff/lower.js';

export interface FitTarget {
  weight: string;
  inFeatures: number;
  outFeatures: number;
}

/** The full model's output of every target linear on each fit batch ([rows, fullOut] per batch). */
export type TeacherOutputs = Map<string, { out: number; batches: Float32Array[] }>;

/** Run the full model over `batches` and keep the outputs of the linears named in `weights`. */
export async function teacherOutputs(teacher: TfModel, batches: number[][][], weights: ReadonlySet<string>): Promise<TeacherOutputs> {
  const out: TeacherOutputs = new Map();
  for (const ids of batches) {
    tf.tidy(() => {
      teacher.logits(ids, {
        observeLinear: (w, _x, y) => {
          if (!weights.has(w)) return;
          const e = out.get(w) ?? { out: y.shape[1], batches: [] };
          e.batches.push(y.dataSync() as Float32Array);
          out.set(w, e);
        },
      });
    });
  }
  return out;
}

/**
 * Fit the adapters of `targets` (in forward order) on `student` against `full`; returns trainLevel's
 * parameters (at = Aᵀ [in, r], bt = Bᵀ [r, out] per target, row-major).
 */
export async function fitAdapters(student: TfModel, batches: number[][][], full: TeacherOutputs, targets: readonly FitTarget[], rank: number, scale: number): Promise<Float32Array[]> {
  const params: Float32Array[] = targets.flatMap((t) => [new Float32Array(t.inFeatures * rank), new Float32Array(rank * t.outFeatures)]);
  const terms = new Map<string, LowRankTerm>();
  try {
    for (let i = 0; i < targets.length; i++) {
      const t = targets[i];
      const y = full.get(t.weight);
      if (!y) continue;
      const k = t.inFeatures;
      const n = t.outFeatures;
      const xx = new Float64Array(k * k);
      const xr = new Float64Array(k * n);
      for (let b = 0; b < batches.length; b++) {
        tf.tidy(() => {
          student.logits(batches[b], {
            lowRank: terms,
            observeLinear: (w, x, yl) => {
              if (w !== t.weight) return;
              const yf = tf.tensor2d(y.batches[b], [x.shape[0], y.out]);
              const r = n === y.out ? tf.sub(yf, yl) : tf.sub(tf.slice(yf, [0, 0], [x.shape[0], n]), yl);
              const xt = tf.transpose(x);
              addInto(xx, tf.matMul(xt, x).dataSync());
              addInto(xr, tf.matMul(xt, r).dataSync());
            },
          });
        });
      }
      const { at, bt } = reducedRankFit(xx, xr, k, n, rank, scale);
      params[2 * i] = at;
      params[2 * i + 1] = bt;
      terms.set(t.weight, { at: tf.tensor2d(at, [k, rank]), bt: tf.tensor2d(bt, [rank, n]), scale });
    }
  } finally {
    for (const term of terms.values()) tf.dispose([term.at, term.bt]);
  }
  return params;
}

function addInto(acc: Float64Array, x: ArrayLike<number>): void {
  for (let i = 0; i < acc.length; i++) acc[i] += x[i];
}

/**
 * Rank-r least squares: Δᵀ minimising ‖X·Δᵀ − R‖ with rank ≤ r, from XᵀX [k, k] and XᵀR [k, n];
 * as at [k, r] and bt [r, n] with at·bt·scale = Δᵀ.
 */
export function reducedRankFit(xx: Float64Array, xr: Float64Array, k: number, n: number, rank: number, scale: number): { at: Float32Array; bt: Float32Array } {
  let diag = 0;
  for (let i = 0; i < k; i++) diag += xx[i * k + i];
  const lambda = (1e-3 * diag) / k + 1e-12;
  const c = Float64Array.from(xx);
  for (let i = 0; i < k; i++) c[i * k + i] += lambda;
  const full = solveSpd(c, xr, k, n); // Δ*ᵀ [k, n]
  // G = Δ*·XᵀX·Δ*ᵀ [n, n]
  const g = matmul(transpose(full, k, n), matmul(xx, full, k, k, n), n, k, n);
  const r = Math.min(rank, n, k);
  const v = topEigenvectors(g, n, r); // [n, r] columns
  const p = matmul(full, v, k, n, r); // Δ*ᵀ·V_r [k, r]
  const at = new Float32Array(k * rank);
  const bt = new Float32Array(rank * n);
  for (let j = 0; j < r; j++) {
    let norm = 0;
    for (let a = 0; a < k; a++) norm += p[a * r + j] ** 2;
    // Even split of P_j·V_jᵀ between the factors: |A_j| = |B_j| (neither starts tiny, so both train).
    const sigma = Math.sqrt(norm);
    if (!sigma) continue;
    const alpha = 1 / Math.sqrt(sigma * scale);
    const beta = Math.sqrt(sigma / scale);
    for (let a = 0; a < k; a++) at[a * rank + j] = p[a * r + j] * alpha;
    for (let i = 0; i < n; i++) bt[j * n + i] = v[i * r + j] * beta;
  }
  return { at, bt };
}

/** aᵀ for a [m, n] (row-major). */
function transpose(a: Float64Array, m: number, n: number): Float64Array {
  const out = new Float64Array(n * m);
  for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) out[j * m + i] = a[i * n + j];
  return out;
}

/** a [m, k] · b [k, n] (row-major, float64). */
function matmul(a: Float64Array, b: Float64Array, m: number, k: number, n: number): Float64Array {
  const out = new Float64Array(m * n);
  for (let i = 0; i < m; i++) {
    for (let p = 0; p < k; p++) {
      const x = a[i * k + p];
      if (x === 0) continue;
      for (let j = 0; j < n; j++) out[i * n + j] += x * b[p * n + j];
    }
  }
  return out;
}

/** Solve C·X = B for symmetric positive definite C [k, k] and B [k, n] (Cholesky). */
export function solveSpd(c: Float64Array, b: Float64Array, k: number, n: number): Float64Array {
  const l = new Float64Array(k * k);
  for (let i = 0; i < k; i++) {
    for (let j = 0; j <= i; j++) {
      let s = c[i * k + j];
      for (let p = 0; p < j; p++) s -= l[i * k + p] * l[j * k + p];
      l[i * k + j] = i === j ? Math.sqrt(Math.max(s, 1e-300)) : s / l[j * k + j];
    }
  }
  const x = Float64Array.from(b);
  for (let col = 0; col < n; col++) {
    for (let i = 0; i < k; i++) {
      let s = x[i * n + col];
      for (let p = 0; p < i; p++) s -= l[i * k + p] * x[p * n + col];
      x[i * n + col] = s / l[i * k + i];
    }
    for (let i = k - 1; i >= 0; i--) {
      let s = x[i * n + col];
      for (let p = i + 1; p < k; p++) s -= l[p * k + i] * x[p * n + col];
      x[i * n + col] = s / l[i * k + i];
    }
  }
  return x;
}

/**
 * The top-r eigenvectors of symmetric positive semidefinite G [n, n] as columns of [n, r]: cyclic
 * Jacobi for small n, deterministic (no random start).
 */
export function topEigenvectors(g: Float64Array, n: number, r: number): Float64Array {
  const a = Float64Array.from(g);
  const v = new Float64Array(n * n);
  for (let i = 0; i < n; i++) v[i * n + i] = 1;
  for (let sweep = 0; sweep < 50; sweep++) {
    let off = 0;
    let total = 0;
    for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) (i === j ? (total += a[i * n + j] ** 2) : (off += a[i * n + j] ** 2));
    if (off <= 1e-22 * (total + off)) break;
    for (let p = 0; p < n - 1; p++) {
      for (let q = p + 1; q < n; q++) {
        const apq = a[p * n + q];
        if (Math.abs(apq) < 1e-300) continue;
        const theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
        const t = Math.sign(theta || 1) / (Math.abs(theta) + Math.sqrt(theta * theta + 1));
        const cs = 1 / Math.sqrt(t * t + 1);
        const sn = t * cs;
        for (let m = 0; m < n; m++) {
          const amp = a[m * n + p];
          const amq = a[m * n + q];
          a[m * n + p] = cs * amp - sn * amq;
          a[m * n + q] = sn * amp + cs * amq;
        }
        for (let m = 0; m < n; m++) {
          const apm = a[p * n + m];
          const aqm = a[q * n + m];
          a[p * n + m] = cs * apm - sn * aqm;
          a[q * n + m] = sn * apm + cs * aqm;
        }
        for (let m = 0; m < n; m++) {
          const vmp = v[m * n + p];
          const vmq = v[m * n + q];
          v[m * n + p] = cs * vmp - sn * vmq;
          v[m * n + q] = sn * vmp + cs * vmq;
        }
      }
    }
  }
  const order = Array.from({ length: n }, (_, i) => i).sort((x, y) => a[y * n + y] - a[x * n + x] || x - y);
  const out = new Float64Array(n * r);
  for (let j = 0; j < r; j++) for (let i = 0; i < n; i++) out[i * r + j] = v[i * n + order[j]];
  return out;
}
