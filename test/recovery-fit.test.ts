/**
 * reorder.recoverInit=fit: the rank-r least-squares start (passes/reorder/fit-init.ts) against
 * independent references — the full-rank solution by Gaussian elimination, and the rank-r optimum
 * found by alternating least squares from random starts.
 */
import { describe, expect, it } from 'vitest';
import { reducedRankFit, topEigenvectors } from '../passes/reorder/fit-init.js';
import { Rng } from '../src/core/util/rng.js';

const N = 200;
const k = 12;
const n = 6;

/** Correlated inputs X [N, k] and targets R = X·M + noise [N, n]. */
function problem(seed: number) {
  const rng = new Rng(seed);
  const g = () => rng.next() * 2 - 1;
  const mix = Array.from({ length: k * k }, g);
  const X = Array.from({ length: N }, () => {
    const z = Array.from({ length: k }, g);
    return Array.from({ length: k }, (_, j) => z.reduce((s, zi, i) => s + zi * mix[i * k + j], 0));
  });
  const M = Array.from({ length: k * n }, g);
  const R = X.map((x) => Array.from({ length: n }, (_, c) => x.reduce((s, xi, i) => s + xi * M[i * n + c], 0) + 0.3 * g()));
  const xx = new Float64Array(k * k);
  const xr = new Float64Array(k * n);
  for (let t = 0; t < N; t++) {
    for (let i = 0; i < k; i++) {
      for (let j = 0; j < k; j++) xx[i * k + j] += X[t][i] * X[t][j];
      for (let c = 0; c < n; c++) xr[i * n + c] += X[t][i] * R[t][c];
    }
  }
  return { X, R, xx, xr };
}

/** ‖X·D − R‖² for D [k, n]. */
function objective(X: number[][], R: number[][], D: ArrayLike<number>): number {
  let s = 0;
  for (let t = 0; t < N; t++) for (let c = 0; c < n; c++) s += (X[t].reduce((a, xi, i) => a + xi * D[i * n + c], 0) - R[t][c]) ** 2;
  return s;
}

/** Solve A·x = b by Gaussian elimination with partial pivoting (A [m, m], b [m, cols]). */
function gauss(A: number[][], b: number[][]): number[][] {
  const m = A.length;
  const a = A.map((row, i) => [...row, ...b[i]]);
  for (let c = 0; c < m; c++) {
    const p = a.reduce((best, row, i) => (i >= c && Math.abs(row[c]) > Math.abs(a[best][c]) ? i : best), c);
    [a[c], a[p]] = [a[p], a[c]];
    for (let i = 0; i < m; i++) {
      if (i === c) continue;
      const f = a[i][c] / a[c][c];
      for (let j = c; j < a[i].length; j++) a[i][j] -= f * a[c][j];
    }
  }
  return a.map((row, i) => row.slice(m).map((v) => v / a[i][i]));
}

const transpose = (m: number[][]) => m[0].map((_, j) => m.map((row) => row[j]));

const product = (at: Float32Array, bt: Float32Array, rank: number, scale: number) =>
  Float64Array.from({ length: k * n }, (_, q) => {
    const i = Math.floor(q / n);
    const c = q % n;
    let s = 0;
    for (let j = 0; j < rank; j++) s += at[i * rank + j] * bt[j * n + c];
    return s * scale;
  });

describe('recoverInit=fit: rank-r least squares', () => {
  it('at full rank, A·B·scale is the ridge least-squares solution', () => {
    const { xx, xr } = problem(1);
    const { at, bt } = reducedRankFit(xx, xr, k, n, n, 2);
    let diag = 0;
    for (let i = 0; i < k; i++) diag += xx[i * k + i];
    const lambda = (1e-3 * diag) / k;
    const A = Array.from({ length: k }, (_, i) => Array.from({ length: k }, (_, j) => xx[i * k + j] + (i === j ? lambda : 0)));
    const ref = gauss(A, Array.from({ length: k }, (_, i) => Array.from(xr.subarray(i * n, (i + 1) * n))));
    const got = product(at, bt, n, 2);
    for (let i = 0; i < k; i++) for (let c = 0; c < n; c++) expect(got[i * n + c]).toBeCloseTo(ref[i][c], 3);
  });

  it('at rank 2, nothing of rank 2 fits better (alternating least squares from random starts)', () => {
    const { X, R, xx, xr } = problem(2);
    const r = 2;
    const { at, bt } = reducedRankFit(xx, xr, k, n, r, 2);
    const ours = objective(X, R, product(at, bt, r, 2));
    const rng = new Rng(3);
    let bestAls = Infinity;
    for (let start = 0; start < 3; start++) {
      // D = U·Vᵀ, U [k, r], V [n, r]: alternately the least-squares U given V and V given U.
      let V = Array.from({ length: n }, () => Array.from({ length: r }, () => rng.next() - 0.5));
      let U: number[][] = [];
      for (let it = 0; it < 100; it++) {
        // U = argmin ‖X U Vᵀ − R‖ = (XᵀX)⁻¹ XᵀR V (VᵀV)⁻¹
        const vtv = Array.from({ length: r }, (_, a) => Array.from({ length: r }, (_, b) => V.reduce((acc, v) => acc + v[a] * v[b], 0)));
        const xrv = Array.from({ length: k }, (_, i) => Array.from({ length: r }, (_, a) => V.reduce((acc, v, c) => acc + xr[i * n + c] * v[a], 0)));
        const y = gauss(Array.from({ length: k }, (_, i) => Array.from(xx.subarray(i * k, (i + 1) * k))), xrv);
        U = transpose(gauss(vtv, transpose(y)));
        // V = argmin = RᵀXU (UᵀXᵀXU)⁻¹
        const utxxu = Array.from({ length: r }, (_, a) =>
          Array.from({ length: r }, (_, b) => {
            let acc = 0;
            for (let i = 0; i < k; i++) for (let j = 0; j < k; j++) acc += U[i][a] * xx[i * k + j] * U[j][b];
            return acc;
          }),
        );
        const rxu = Array.from({ length: n }, (_, c) =>
          Array.from({ length: r }, (_, a) => {
            let acc = 0;
            for (let i = 0; i < k; i++) acc += xr[i * n + c] * U[i][a];
            return acc;
          }),
        );
        V = transpose(gauss(utxxu, transpose(rxu)));
      }
      const D = Float64Array.from({ length: k * n }, (_, q) => U[Math.floor(q / n)].reduce((s, u, a) => s + u * V[q % n][a], 0));
      bestAls = Math.min(bestAls, objective(X, R, D));
    }
    // Ours carries a tiny ridge; the optimum is the same to well under a percent.
    expect(ours).toBeLessThanOrEqual(bestAls * 1.005);
    expect(ours).toBeGreaterThan(bestAls * 0.99);
    // And rank 2 is a real restriction here: the full-rank fit is better.
    const full = reducedRankFit(xx, xr, k, n, n, 2);
    expect(objective(X, R, product(full.at, full.bt, n, 2))).toBeLessThan(ours * 0.95);
  });

  it('topEigenvectors: the leading eigenvectors of a matrix with known spectrum', () => {
    // G = Q·diag(5, 3, 1, 0.5)·Qᵀ with Q a rotation: the top two are Q's first two columns (up to sign).
    const c = Math.cos(0.7);
    const s = Math.sin(0.7);
    const Q = [
      [c, -s, 0, 0],
      [s, c, 0, 0],
      [0, 0, c, s],
      [0, 0, -s, c],
    ];
    const d = [0.5, 3, 5, 1];
    const g = Float64Array.from({ length: 16 }, (_, q) => Q[Math.floor(q / 4)].reduce((acc, qi, j) => acc + qi * d[j] * Q[q % 4][j], 0));
    const v = topEigenvectors(g, 4, 2);
    const col = (j: number) => [0, 1, 2, 3].map((i) => v[i * 2 + j]);
    const dot = (a: number[], b: number[]) => a.reduce((acc, x, i) => acc + x * b[i], 0);
    expect(Math.abs(dot(col(0), Q.map((row) => row[2])))).toBeCloseTo(1, 9);
    expect(Math.abs(dot(col(1), Q.map((row) => row[1])))).toBeCloseTo(1, 9);
  });
});
