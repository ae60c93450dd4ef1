/**
 * The CPU half of shadow outlier execution (SPEC-outliers §1.2), run between NPU subgraphs on the
 * float values the NPU graph hands over:
 *   input side   u = round(x/s_x), r = u − clamp(u): y += s_x·s_w·(r[:, C]·W_q[C, :]), reading only
 *                the rows of the channels C that hold an outlier (hot rows resident, cold ones read)
 *   output side  an element whose code saturated (y/s_y at the end of the range) is recomputed whole:
 *                s_x·s_w·(a·W_q[:, o]) with a = u (input shadow) or clamp(u), from column o
 *   bias         a shadowed linear's bias is added here, after the correction (its graph leaves it out)
 * `rows` gives W_q[k, :] (input side) or W_q[:, o] (output side) as int8.
 */
import { clampCode, codeRange, roundHalfEven } from '../../src/core/quant/w8a8.js';
import type { QLinear } from './plan.js';

export interface ShadowWork {
  /** Activation elements beyond the int8 range (input side). */
  outliers: number;
  /** Output elements recomputed (output side). */
  recomputed: number;
}

/**
 * Correct `y` [T, O] (float, the NPU graph's dequantized output before bias) in place for the first
 * `real` tokens of `x` [T, K].
 */
export function applyShadow(
  lin: QLinear,
  x: Float32Array,
  y: Float32Array,
  real: number,
  rows: (side: 'input' | 'output', k: number) => Int8Array,
  bias: Float32Array | null,
): ShadowWork {
  const K = lin.inFeatures;
  const O = lin.outFeatures;
  const sxw = Math.fround(lin.sx * lin.sw);
  const work: ShadowWork = { outliers: 0, recomputed: 0 };
  const u = new Float64Array(K);
  const { min: ymin, max: ymax } = codeRange(lin.outBits);
  for (let t = 0; t < real; t++) {
    const xo = t * K;
    const yo = t * O;
    for (let k = 0; k < K; k++) {
      const v = roundHalfEven(Math.fround(x[xo + k] / lin.sx));
      u[k] = lin.inShadow ? v : clampCode(v, lin.inBits);
    }
    // Output side first, on the NPU's codes (before any correction changes y).
    const saturated: number[] = [];
    if (lin.outShadow) {
      for (let o = 0; o < O; o++) {
        const code = roundHalfEven(y[yo + o] / lin.sy);
        if (code <= ymin || code >= ymax) saturated.push(o);
      }
    }
    if (lin.inShadow) {
      for (let k = 0; k < K; k++) {
        const r = u[k] - clampCode(u[k], lin.inBits);
        if (r === 0) continue;
        work.outliers++;
        const row = rows('input', k);
        for (let o = 0; o < O; o++) y[yo + o] += sxw * r * row[o];
      }
    }
    for (const o of saturated) {
      const col = rows('output', o);
      let acc = 0;
      for (let k = 0; k < K; k++) acc += u[k] * col[k];
      y[yo + o] = sxw * acc;
      work.recomputed++;
    }
    if (bias) for (let o = 0; o < O; o++) y[yo + o] += bias[o];
  }
  return work;
}
