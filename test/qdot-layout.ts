/**
 * The runtime's quantized-x layout (src/exec/runtime/qdot.ts) written in scalar JS, the oracle of the
 * runtime's WebAssembly quantizers (src/exec/runtime/qact.ts) byte for byte, Inf / NaN / subnormal
 * inputs included (JS typed-array semantics); test/ggml-vecdot.ts's refQ8_0 / refQ8_K check it.
 */
import { fr, nearestInt } from '../src/core/quant/common.js';
import { f16ToF32, f32ToF16 } from '../src/core/util/half.js';
import { Q8_0_BYTES, Q8_K_BYTES } from '../src/exec/runtime/qdot.js';

/** C's roundf: halves away from zero. */
const roundf = (v: number) => (v < 0 ? -Math.round(-v) : Math.round(v));

/**
 * ggml's quantize_row_q8_0_ref of x[xo, xo + 32·nBlocks) into q8_0 blocks at byte `o` of the views
 * (`f32` and `i8` over the same buffer; `o` a multiple of 4).
 */
export function quantizeQ8_0(x: Float32Array, xo: number, nBlocks: number, f32: Float32Array, i8: Int8Array, o: number): void {
  for (let b = 0; b < nBlocks; b++, xo += 32, o += Q8_0_BYTES) {
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[xo + j]));
    const d = fr(amax / 127);
    const id = d ? fr(1 / d) : 0;
    f32[o >> 2] = f16ToF32(f32ToF16(d));
    for (let j = 0; j < 32; j++) i8[o + 4 + j] = roundf(fr(x[xo + j] * id));
  }
}

/** ggml's quantize_row_q8_K_ref (and its bsums), plus sums of 32, into q8_K blocks at byte `o`. */
export function quantizeQ8_K(x: Float32Array, xo: number, nBlocks: number, f32: Float32Array, i16: Int16Array, i8: Int8Array, o: number): void {
  for (let b = 0; b < nBlocks; b++, xo += 256, o += Q8_K_BYTES) {
    let amax = 0;
    let max = 0;
    for (let j = 0; j < 256; j++) {
      const ax = Math.abs(x[xo + j]);
      if (ax > amax) {
        amax = ax;
        max = x[xo + j];
      }
    }
    const q = o + 52;
    if (!amax) {
      f32[o >> 2] = 0;
      i8.fill(0, o + 4, o + Q8_K_BYTES);
      continue;
    }
    const iscale = fr(-127 / max);
    for (let j = 0; j < 256; j++) i8[q + j] = Math.min(127, nearestInt(fr(iscale * x[xo + j])));
    for (let s = 0; s < 16; s++) {
      let sum = 0;
      for (let j = 0; j < 16; j++) sum += i8[q + 16 * s + j];
      i16[(o + 4 + 2 * s) >> 1] = sum;
    }
    for (let s = 0; s < 8; s++) i16[(o + 36 + 2 * s) >> 1] = i16[(o + 4 + 4 * s) >> 1] + i16[(o + 6 + 4 * s) >> 1];
    f32[o >> 2] = fr(1 / iscale);
  }
}
