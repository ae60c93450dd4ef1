/**
 * The 32-element block types: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1. Transcriptions of ggml-quants.c's
 * quantize_row_*_ref (what ggml_quantize_chunk runs without an imatrix) and dequantize_row_*.
 * Each function handles `nb` consecutive blocks: input floats from x[xo], block bytes at y[yo].
 */
import { f16Table } from '../util/half.js';
import { FLT_MAX, fr, getF16, putF16, putU32LE, signedAbsMax, truncI8 } from './common.js';
import { simdKernels } from './bf16.js';
import type { LegacyType } from './simd.js';

/** Q8_0: the WebAssembly SIMD kernel where available and every input is finite, else the JS below. */
export function quantizeQ8_0(x: Float32Array, xo: number, nb: number, y: Uint8Array, yo: number): void {
  const k = simdKernels();
  if (k && k.f32ToQ8_0(x.subarray(xo, xo + nb * 32), y.subarray(yo, yo + nb * 34))) return;
  quantizeQ8_0Js(x, xo, nb, y, yo);
}

type Quantizer = (x: Float32Array, xo: number, nb: number, y: Uint8Array, yo: number) => void;

/** The kernel for `type` where available and every input is finite, else the JS transcription. */
function viaKernel(type: LegacyType, bytes: number, js: Quantizer): Quantizer {
  return (x, xo, nb, y, yo) => {
    const k = simdKernels();
    if (k && k.f32ToLegacy(type, x.subarray(xo, xo + nb * 32), y.subarray(yo, yo + nb * bytes))) return;
    js(x, xo, nb, y, yo);
  };
}

export function quantizeQ8_0Js(x: Float32Array, xo: number, nb: number, y: Uint8Array, yo: number): void {
  for (let i = 0; i < nb; i++, xo += 32, yo += 34) {
    let amax = 0;
    for (let j = 0; j < 32; j++) {
      const a = Math.abs(x[xo + j]);
      amax = amax > a ? amax : a; // MAX(amax, fabsf(v))
    }
    const d = fr(amax / 127);
    const id = d !== 0 ? fr(1 / d) : 0;
    putF16(y, yo, d);
    for (let j = 0; j < 32; j++) {
      // roundf then (int8_t): |v| <= 127.5 (adding +-0.5 is exact in double, so trunc rounds half away from zero),
      // or +-inf/NaN when d is a tiny subnormal, which `| 0` maps to 0 as x86's float->int conversion does
      const v = fr(x[xo + j] * id);
      y[yo + 2 + j] = (v >= 0 ? v + 0.5 : v - 0.5) | 0;
    }
  }
}


export function quantizeQ4_0Js(x: Float32Array, xo: number, nb: number, y: Uint8Array, yo: number): void {
  for (let i = 0; i < nb; i++, xo += 32, yo += 18) {
    const max = signedAbsMax(32, x, xo);
    const d = fr(max / -8); // the signed max maps to code 0 (-8), so its sign matters
    const id = d !== 0 ? fr(1 / d) : 0;
    putF16(y, yo, d);
    for (let j = 0; j < 16; j++) {
      const xi0 = Math.min(15, truncI8(fr(fr(x[xo + j] * id) + 8.5)));
      const xi1 = Math.min(15, truncI8(fr(fr(x[xo + 16 + j] * id) + 8.5)));
      y[yo + 2 + j] = (xi0 | (xi1 << 4)) & 0xff;
    }
  }
}

export function quantizeQ4_1Js(x: Float32Array, xo: number, nb: number, y: Uint8Array, yo: number): void {
  for (let i = 0; i < nb; i++, xo += 32, yo += 20) {
    let min = FLT_MAX;
    let max = -FLT_MAX;
    for (let j = 0; j < 32; j++) {
      const v = x[xo + j];
      if (v < min) min = v;
      if (v > max) max = v;
    }
    const d = fr(fr(max - min) / 15);
    const id = d !== 0 ? fr(1 / d) : 0;
    putF16(y, yo, d);
    putF16(y, yo + 2, min);
    for (let j = 0; j < 16; j++) {
      const xi0 = Math.min(15, truncI8(fr(fr(fr(x[xo + j] - min) * id) + 0.5)));
      const xi1 = Math.min(15, truncI8(fr(fr(fr(x[xo + 16 + j] - min) * id) + 0.5)));
      y[yo + 4 + j] = (xi0 | (xi1 << 4)) & 0xff;
    }
  }
}

export function quantizeQ5_0Js(x: Float32Array, xo: number, nb: number, y: Uint8Array, yo: number): void {
  for (let i = 0; i < nb; i++, xo += 32, yo += 22) {
    const max = signedAbsMax(32, x, xo);
    const d = fr(max / -16);
    const id = d !== 0 ? fr(1 / d) : 0;
    putF16(y, yo, d);
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      const xi0 = Math.min(31, truncI8(fr(fr(x[xo + j] * id) + 16.5))) & 0xff;
      const xi1 = Math.min(31, truncI8(fr(fr(x[xo + 16 + j] * id) + 16.5))) & 0xff;
      y[yo + 6 + j] = (xi0 & 0x0f) | ((xi1 & 0x0f) << 4);
      qh |= ((xi0 & 0x10) >>> 4) << j;
      qh |= ((xi1 & 0x10) >>> 4) << (j + 16);
    }
    putU32LE(y, yo + 2, qh);
  }
}

export function quantizeQ5_1Js(x: Float32Array, xo: number, nb: number, y: Uint8Array, yo: number): void {
  for (let i = 0; i < nb; i++, xo += 32, yo += 24) {
    let min = FLT_MAX;
    let max = -FLT_MAX;
    for (let j = 0; j < 32; j++) {
      const v = x[xo + j];
      if (v < min) min = v;
      if (v > max) max = v;
    }
    const d = fr(fr(max - min) / 31);
    const id = d !== 0 ? fr(1 / d) : 0;
    putF16(y, yo, d);
    putF16(y, yo + 2, min);
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      // (uint8_t)(x0 + 0.5f): no clamp in ggml
      const xi0 = truncI8(fr(fr(fr(x[xo + j] - min) * id) + 0.5)) & 0xff;
      const xi1 = truncI8(fr(fr(fr(x[xo + 16 + j] - min) * id) + 0.5)) & 0xff;
      y[yo + 8 + j] = (xi0 & 0x0f) | ((xi1 & 0x0f) << 4);
      qh |= ((xi0 & 0x10) >>> 4) << j;
      qh |= ((xi1 & 0x10) >>> 4) << (j + 16);
    }
    putU32LE(y, yo + 4, qh);
  }
}

// ---- dequantizers (dequantize_row_*): the Float32Array store is the one float rounding of x*d.

export function dequantizeQ8_0(y: Uint8Array, yo: number, nb: number, out: Float32Array, oo: number): void {
  const t = f16Table();
  for (let i = 0; i < nb; i++, yo += 34, oo += 32) {
    const d = getF16(t, y, yo);
    for (let j = 0; j < 32; j++) out[oo + j] = ((y[yo + 2 + j] << 24) >> 24) * d;
  }
}

export function dequantizeQ4_0(y: Uint8Array, yo: number, nb: number, out: Float32Array, oo: number): void {
  const t = f16Table();
  for (let i = 0; i < nb; i++, yo += 18, oo += 32) {
    const d = getF16(t, y, yo);
    for (let j = 0; j < 16; j++) {
      const q = y[yo + 2 + j];
      out[oo + j] = ((q & 0x0f) - 8) * d;
      out[oo + 16 + j] = ((q >>> 4) - 8) * d;
    }
  }
}

export function dequantizeQ4_1(y: Uint8Array, yo: number, nb: number, out: Float32Array, oo: number): void {
  const t = f16Table();
  for (let i = 0; i < nb; i++, yo += 20, oo += 32) {
    const d = getF16(t, y, yo);
    const m = getF16(t, y, yo + 2);
    for (let j = 0; j < 16; j++) {
      const q = y[yo + 4 + j];
      out[oo + j] = fr((q & 0x0f) * d) + m;
      out[oo + 16 + j] = fr((q >>> 4) * d) + m;
    }
  }
}

export function dequantizeQ5_0(y: Uint8Array, yo: number, nb: number, out: Float32Array, oo: number): void {
  const t = f16Table();
  for (let i = 0; i < nb; i++, yo += 22, oo += 32) {
    const d = getF16(t, y, yo);
    const qh = (y[yo + 2] | (y[yo + 3] << 8) | (y[yo + 4] << 16) | (y[yo + 5] << 24)) >>> 0;
    for (let j = 0; j < 16; j++) {
      const q = y[yo + 6 + j];
      const h0 = ((qh >>> j) << 4) & 0x10;
      const h1 = (qh >>> (j + 12)) & 0x10;
      out[oo + j] = (((q & 0x0f) | h0) - 16) * d;
      out[oo + 16 + j] = (((q >>> 4) | h1) - 16) * d;
    }
  }
}

export function dequantizeQ5_1(y: Uint8Array, yo: number, nb: number, out: Float32Array, oo: number): void {
  const t = f16Table();
  for (let i = 0; i < nb; i++, yo += 24, oo += 32) {
    const d = getF16(t, y, yo);
    const m = getF16(t, y, yo + 2);
    const qh = (y[yo + 4] | (y[yo + 5] << 8) | (y[yo + 6] << 16) | (y[yo + 7] << 24)) >>> 0;
    for (let j = 0; j < 16; j++) {
      const q = y[yo + 8 + j];
      const h0 = ((qh >>> j) << 4) & 0x10;
      const h1 = (qh >>> (j + 12)) & 0x10;
      out[oo + j] = fr(((q & 0x0f) | h0) * d) + m;
      out[oo + 16 + j] = fr(((q >>> 4) | h1) * d) + m;
    }
  }
}

export const quantizeQ4_0 = viaKernel('Q4_0', 18, quantizeQ4_0Js);
export const quantizeQ5_0 = viaKernel('Q5_0', 22, quantizeQ5_0Js);
export const quantizeQ4_1 = viaKernel('Q4_1', 20, quantizeQ4_1Js);
export const quantizeQ5_1 = viaKernel('Q5_1', 24, quantizeQ5_1Js);
