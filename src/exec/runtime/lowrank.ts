/**
 * Low-rank adapters (LoRA) in the TS runtime: y += scale · B · (A · x) over the kept rows and columns
 * of a linear at an elastic level. A is [rank, inKept] and B [outKept, rank]: the level's shapes, so
 * the adapter of a level only ever sees that level's units. Base weights are not touched (switching
 * level is choosing another adapter set). The alternative, a merged copy of a level's slice, is
 * load()'s `mergeLevel` (src/core/util/lowrank.ts does the merge).
 * Browser-safe: no Node imports.
 */
import { LlmcError } from '../../core/errors.js';
import type { LowRankTerm } from '../../core/util/lowrank.js';

/** One linear's adapter at one level: A [rank, inKept], B [outKept, rank]. */
export type LowRank = LowRankTerm;

/** A level's adapters, by weight name. */
export type LevelAdapters = ReadonlyMap<string, LowRank>;

/** Kept channels of an axis: `count` ranges of `len` channels, one every `stride` (a prefix: count 1). */
export interface Extent {
  count: number;
  stride: number;
  len: number;
}

let scratch = new Float64Array(0);

/**
 * y[t, rows] += scale · B · (A · x[t, cols]) for t < n; x rows have `xStride` values, y rows `yStride`.
 * Accumulates in doubles, as the matmul kernels do.
 */
export function addLowRank(lr: LowRank, x: Float32Array, n: number, xStride: number, cols: Extent, y: Float32Array, yStride: number, rows: Extent, weight: string): void {
  const r = lr.rank;
  const inKept = cols.count * cols.len;
  const outKept = rows.count * rows.len;
  if (lr.a.length !== r * inKept || lr.b.length !== outKept * r) {
    throw new LlmcError(`adapter of ${weight} is [${lr.b.length / r}, ${r}]·[${r}, ${lr.a.length / r}]; this level keeps ${outKept} rows and ${inKept} columns`);
  }
  if (scratch.length < r) scratch = new Float64Array(r);
  const u = scratch;
  const { a, b, scale } = lr;
  for (let t = 0; t < n; t++) {
    const xo = t * xStride;
    for (let j = 0; j < r; j++) {
      let s = 0;
      let k = j * inKept;
      for (let g = 0; g < cols.count; g++) {
        const c0 = xo + g * cols.stride;
        for (let c = 0; c < cols.len; c++) s += a[k++] * x[c0 + c];
      }
      u[j] = s * scale;
    }
    const yo = t * yStride;
    let i = 0;
    for (let g = 0; g < rows.count; g++) {
      const r0 = yo + g * rows.stride;
      for (let c = 0; c < rows.len; c++, i++) {
        let s = 0;
        const bo = i * r;
        for (let j = 0; j < r; j++) s += b[bo + j] * u[j];
        y[r0 + c] += s;
      }
    }
  }
}
