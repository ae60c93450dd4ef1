/** Merging a LoRA term into a weight: W += scale · B · A (browser-safe; the runtime and targets share it). */
import { LlmcError } from '../errors.js';

export interface LowRankTerm {
  rank: number;
  scale: number;
  /** [rank, cols] row-major. */
  a: Float32Array;
  /** [rows, rank] row-major. */
  b: Float32Array;
}

/** w ([rows, cols] row-major) += scale · B · A, in place; each element's sum in doubles. */
export function mergeLowRank(w: Float32Array, rows: number, cols: number, t: LowRankTerm, what = 'adapter'): Float32Array {
  const r = t.rank;
  if (t.a.length !== r * cols || t.b.length !== rows * r || w.length !== rows * cols) {
    throw new LlmcError(`${what}: [${t.b.length / r}, ${r}]·[${r}, ${t.a.length / r}] does not fit a [${rows}, ${cols}] weight`);
  }
  const { a, b, scale } = t;
  for (let i = 0; i < rows; i++) {
    for (let j = 0; j < cols; j++) {
      let s = 0;
      for (let k = 0; k < r; k++) s += b[i * r + k] * a[k * cols + j];
      w[i * cols + j] += scale * s;
    }
  }
  return w;
}
