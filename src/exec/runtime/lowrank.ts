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
import { matmul, type Weight } from './kernels.js';

/** One linear's adapter at one level: A [rank, inKept] and B [outKept, rank], F32 weights (in place in weights.bin). */
export interface LowRank {
  rank: number;
  scale: number;
  a: Weight;
  b: Weight;
}

/** A level's adapters, by weight name. */
export type LevelAdapters = ReadonlyMap<string, LowRank>;

/** The adapter as plain arrays (for merging: src/core/util/lowrank.ts). */
export const lowRankTerm = (lr: LowRank): LowRankTerm => ({ rank: lr.rank, scale: lr.scale, a: lr.a.f32, b: lr.b.f32 });

/** Kept channels of an axis: `count` ranges of `len` channels, one every `stride` (a prefix: count 1). */
export interface Extent {
  count: number;
  stride: number;
  len: number;
}

let uBuf = new Float32Array(0);
let tBuf = new Float32Array(0);

/**
 * y[t, rows] += scale · B · (A · x[t, cols]) for t < n; x rows have `xStride` values, y rows `yStride`.
 * Prefix extents (every planned level) run as two small matmuls on the weights' kernels (wasm SIMD
 * when the adapters live in the kernels' memory); extents with gaps run a plain loop.
 */
export function addLowRank(lr: LowRank, x: Float32Array, n: number, xStride: number, cols: Extent, y: Float32Array, yStride: number, rows: Extent, weight: string): void {
  const r = lr.rank;
  const inKept = cols.count * cols.len;
  const outKept = rows.count * rows.len;
  if (lr.a.rows !== r || lr.a.cols !== inKept || lr.b.rows !== outKept || lr.b.cols !== r) {
    throw new LlmcError(`adapter of ${weight} is [${lr.b.rows}, ${lr.b.cols}]·[${lr.a.rows}, ${lr.a.cols}]; this level keeps ${outKept} rows and ${inKept} columns (rank ${r})`);
  }
  if (uBuf.length < n * r) uBuf = new Float32Array(n * r);
  if (cols.count === 1 && rows.count === 1) {
    if (tBuf.length < n * outKept) tBuf = new Float32Array(n * outKept);
    matmul(lr.a, x, n, xStride, uBuf, r);
    matmul(lr.b, uBuf, n, r, tBuf, outKept);
    const s = lr.scale;
    for (let t = 0; t < n; t++) {
      const yo = t * yStride;
      const to = t * outKept;
      for (let c = 0; c < outKept; c++) y[yo + c] += s * tBuf[to + c];
    }
    return;
  }
  const a = lr.a.f32;
  const b = lr.b.f32;
  for (let t = 0; t < n; t++) {
    const xo = t * xStride;
    for (let j = 0; j < r; j++) {
      let s = 0;
      let k = j * inKept;
      for (let g = 0; g < cols.count; g++) {
        const c0 = xo + g * cols.stride;
        for (let c = 0; c < cols.len; c++) s += a[k++] * x[c0 + c];
      }
      uBuf[t * r + j] = s;
    }
    const yo = t * yStride;
    let i = 0;
    for (let g = 0; g < rows.count; g++) {
      const r0 = yo + g * rows.stride;
      for (let c = 0; c < rows.len; c++, i++) {
        let s = 0;
        for (let j = 0; j < r; j++) s += b[i * r + j] * uBuf[t * r + j];
        y[r0 + c] += lr.scale * s;
      }
    }
  }
}
