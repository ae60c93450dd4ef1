/**
 * A fused Hadamard rotation (QuaRot-style, SPEC-outliers §6) that flattens activation outliers before
 * static per-tensor quantization, as a transform of the compile unit:
 *  1. fold each RMSNorm's γ into the linears reading it (W·diag(γ)), norm weights → 1;
 *  2. rotate the residual stream by Q = diag(±1)·H (a seeded-sign, block-diagonal normalized
 *     Hadamard): embeddings E·Q, readers W·diag(γ)·Q, writers (o_proj, down_proj) Qᵀ·W. RMSNorm is
 *     invariant (‖hQ‖ = ‖h‖), so the model computes the same function;
 *  3. an online rotation P (same construction, size of the MLP) before down_proj: a linear op
 *     `<mlp>.h_rot` with weight Pᵀ inserted in the IR, and down_proj's weight W_d·P.
 * Blocks are the largest power of two dividing the size (a full Hadamard for 64, 512, 1024…; 43
 * blocks of 32 for 1376). Its entries ±1/√b quantize exactly to int8 (±127 at s_w = 1/(127·√b)).
 * A tied model gets its own lm_head (E·diag(γ_final)·Q ≠ E·Q).
 */
import { createHash } from 'node:crypto';
import { EMBED, FINAL_NORM, LM_HEAD, layerNames } from '../../src/core/arch/names.js';
import { mlpsOf } from '../../src/core/arch/units.js';
import type { ModelSource, TensorMeta } from '../../src/core/checkpoint/source.js';
import { buildModel } from '../../src/core/ir/build.js';
import type { ModelGraph, Op } from '../../src/core/ir/ir.js';
import { evolve, type CompileUnit } from '../../src/core/pipeline/unit.js';
import { Rng } from '../../src/core/util/rng.js';

/** The largest power of two dividing n. */
export const blockOf = (n: number): number => n & -n;

/** An orthogonal rotation x ↦ x·R of size n, R = diag(signs)·blockdiag(H_b/√b). */
export class BlockHadamard {
  readonly block: number;
  readonly signs: Float64Array;
  constructor(
    readonly n: number,
    seed: number,
  ) {
    this.block = blockOf(n);
    const rng = new Rng(seed);
    this.signs = Float64Array.from({ length: n }, () => (rng.next() < 0.5 ? -1 : 1));
  }

  /** x·R for one row of n values (float64). */
  apply(x: ArrayLike<number>, out = new Float64Array(this.n)): Float64Array {
    const b = this.block;
    for (let i = 0; i < this.n; i++) out[i] = x[i] * this.signs[i];
    // Fast Walsh–Hadamard transform within each block (Sylvester order), then 1/√b.
    for (let s = 0; s < this.n; s += b) {
      for (let h = 1; h < b; h *= 2) {
        for (let i = s; i < s + b; i += 2 * h) {
          for (let j = i; j < i + h; j++) {
            const a = out[j];
            const c = out[j + h];
            out[j] = a + c;
            out[j + h] = a - c;
          }
        }
      }
    }
    const norm = 1 / Math.sqrt(b);
    for (let i = 0; i < this.n; i++) out[i] *= norm;
    return out;
  }

  /** The matrix R [n, n] (row i = e_i·R). */
  matrix(): Float64Array {
    const m = new Float64Array(this.n * this.n);
    const e = new Float64Array(this.n);
    for (let i = 0; i < this.n; i++) {
      e.fill(0);
      e[i] = 1;
      m.set(this.apply(e), i * this.n);
    }
    return m;
  }
}

/** Each row of a [rows, n] matrix times R, with the row first scaled by `gamma`. */
function rotateRows(w: Float32Array, n: number, R: BlockHadamard, gamma?: Float32Array): Float32Array {
  const out = new Float32Array(w.length);
  const row = new Float64Array(n);
  const tmp = new Float64Array(n);
  for (let r = 0; r < w.length / n; r++) {
    for (let i = 0; i < n; i++) row[i] = w[r * n + i] * (gamma ? gamma[i] : 1);
    out.set(R.apply(row, tmp), r * n);
  }
  return out;
}

/** Each column of a [n, cols] matrix as a row vector times R (Rᵀ·W). */
function rotateCols(w: Float32Array, n: number, R: BlockHadamard): Float32Array {
  const cols = w.length / n;
  const out = new Float32Array(w.length);
  const col = new Float64Array(n);
  const tmp = new Float64Array(n);
  for (let c = 0; c < cols; c++) {
    for (let i = 0; i < n; i++) col[i] = w[i * cols + c];
    R.apply(col, tmp);
    for (let i = 0; i < n; i++) out[i * cols + c] = tmp[i];
  }
  return out;
}

export const hadamardWeight = (down: string): string => down.replace(/\.weight$/, '.hadamard.weight');

/** The unit with the rotation folded into its weights and the online rotations in its IR. */
export function rotateUnit(unit: CompileUnit, seed = 0): CompileUnit {
  const base = unit.source;
  const spec = base.spec;
  const D = spec.hiddenSize;
  const Q = new BlockHadamard(D, seed);
  const L = spec.numLayers;
  const readers = new Map<string, string>(); // linear weight → the norm it reads
  const writers = new Set<string>(); // o_proj, down_proj (and their biases)
  const downs = new Map<string, BlockHadamard>(); // down_proj weight → P
  const online = new Map<string, { R: BlockHadamard; width: number }>(); // hadamard weight → P
  const norms = new Set<string>([FINAL_NORM]);
  for (let l = 0; l < L; l++) {
    const n = layerNames(l);
    norms.add(n.inputNorm).add(n.postNorm);
    for (const w of [n.q, n.k, n.v]) readers.set(w, n.inputNorm);
    writers.add(n.o).add(n.oBias);
    for (const m of mlpsOf(spec, l)) {
      readers.set(m.gate, n.postNorm).set(m.up, n.postNorm);
      writers.add(m.down).add(m.down.replace(/\.weight$/, '.bias'));
      const P = new BlockHadamard(m.width, seed + 1 + l);
      downs.set(m.down, P);
      online.set(hadamardWeight(m.down), { R: P, width: m.width });
    }
  }
  readers.set(LM_HEAD, FINAL_NORM);
  const tied = spec.tieEmbeddings;
  const newSpec = tied ? { ...spec, tieEmbeddings: false } : spec;
  const metas: TensorMeta[] = [...base.tensors];
  if (tied) metas.push({ name: LM_HEAD, shape: [spec.vocabSize, D], dtype: 'F32' });
  for (const [name, { width }] of online) metas.push({ name, shape: [width, width], dtype: 'F32' });
  const byName = new Map(metas.map((m) => [m.name, m]));

  const read = async (name: string): Promise<Float32Array> => {
    const o = online.get(name);
    if (o) {
      // Weight of y = x·P in HF [out, in] layout: Pᵀ.
      const m = o.R.matrix();
      const w = new Float32Array(o.width * o.width);
      for (let i = 0; i < o.width; i++) for (let j = 0; j < o.width; j++) w[j * o.width + i] = m[i * o.width + j];
      return w;
    }
    if (norms.has(name)) return new Float32Array(D).fill(1);
    if (name === EMBED) return rotateRows(await base.readF32(EMBED), D, Q);
    const norm = readers.get(name);
    if (norm) return rotateRows(await base.readF32(tied && name === LM_HEAD ? EMBED : name), D, Q, await base.readF32(norm));
    if (writers.has(name)) {
      const w = await base.readF32(name);
      const P = downs.get(name);
      // Biases [D] rotate as rows; weights [D, in]: columns by Q, then (down_proj) rows by P.
      if (w.length === D) return rotateRows(w, D, Q);
      const cols = rotateCols(w, D, Q);
      return P ? rotateRows(cols, P.n, P) : cols;
    }
    return base.readF32(name);
  };
  const source: ModelSource = {
    spec: newSpec,
    assets: tied ? { ...base.assets, config: { ...base.assets.config, tie_word_embeddings: false } } : base.assets,
    tensors: metas,
    description: `${base.description} | hadamard rotation`,
    dir: base.dir,
    allowNonFinite: base.allowNonFinite,
    meta: (name) => byName.get(name),
    readF32: read,
    layout: (name) => (online.has(name) || norms.has(name) || name === EMBED || readers.has(name) || writers.has(name) ? null : base.layout(name)),
    identity: async () => createHash('sha256').update(await base.identity()).update(`hadamard-rotation:${seed}`).digest('hex'),
  };
  return evolve(unit, { source, graph: rotatedGraph(buildModel(newSpec), online) });
}

/** The IR with `<mlp>.h_rot = h · P` before every down_proj (whose input becomes it). */
function rotatedGraph(graph: ModelGraph, online: ReadonlyMap<string, { width: number }>): ModelGraph {
  const ops: Op[] = [];
  for (const op of graph.ops) {
    const hw = op.op === 'linear' ? hadamardWeight(op.weight) : null;
    if (op.op === 'linear' && hw && online.has(hw)) {
      const rot = `${op.x}_rot`;
      ops.push({ op: 'linear', out: rot, x: op.x, weight: hw, bias: null, inFeatures: op.inFeatures, outFeatures: op.inFeatures });
      ops.push({ ...op, x: rot });
    } else ops.push(op);
  }
  const taps = graph.taps.flatMap((t) => {
    if (t.kind === 'linear-input' && online.has(hadamardWeight(t.key))) {
      const hw = hadamardWeight(t.key);
      return [
        { ...t, key: hw },
        { ...t, kind: 'linear-output' as const, key: hw, value: `${t.value}_rot` },
        { ...t, value: `${t.value}_rot` },
      ];
    }
    return [t];
  });
  return { ...graph, ops, taps };
}
