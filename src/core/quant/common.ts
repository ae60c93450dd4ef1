/**
 * Float32 helpers shared by the quantizers. ggml computes in float32 (SSE, no FMA contraction, no
 * reassociation), so every C float operation is mirrored by one Math.fround of the double result:
 * a single +, -, *, / or sqrt of float32 operands rounded to double and then to float32 equals the
 * float32-rounded exact result (53 >= 2*24 + 2), so this reproduces C bit for bit.
 */
import { f32ToF16 } from '../util/half.js';

export const fr = Math.fround;

/** GROUP_MAX_EPS = 1e-15f. */
export const GROUP_MAX_EPS = Math.fround(1e-15);
/** FLT_MAX. */
export const FLT_MAX = 3.4028234663852886e38;

const NI_F = new Float32Array(1);
const NI_I = new Int32Array(NI_F.buffer);

/**
 * ggml's nearest_int: add 1.5*2^23 in float32 and read the low mantissa bits. For |f| < 2^22 that is
 * round-half-to-even; outside that range (ggml only asserts in debug builds) the same bit trick is
 * applied so even garbage matches.
 */
export function nearestInt(f: number): number {
  const v = fr(f + 12582912);
  if (v >= 8388608 && v < 16777216) return v - 12582912;
  NI_F[0] = v;
  return (NI_I[0] & 0x007fffff) - 0x00400000;
}

/** C's (int8_t)(float): truncate toward zero (cvttss2si), keep the low 8 bits, signed. NaN -> 0 as on x86. */
export function truncI8(f: number): number {
  return f > -2147483649 && f < 2147483648 ? ((f | 0) << 24) >> 24 : 0;
}

/** C's (int8_t)(int): low 8 bits, signed. */
export function i8(n: number): number {
  return (n << 24) >> 24;
}

/** Store GGML_FP32_TO_FP16(v) little-endian at y[o]. */
export function putF16(y: Uint8Array, o: number, v: number): void {
  const h = f32ToF16(v);
  y[o] = h & 0xff;
  y[o + 1] = h >>> 8;
}

/** Read a little-endian f16 as a float (via the 65536-entry table). */
export function getF16(table: Float32Array, y: Uint8Array, o: number): number {
  return table[y[o] | (y[o + 1] << 8)];
}

/** The value of largest magnitude in x[xo .. xo+n), the first of equals (ggml's `max` beside `amax`). */
export function signedAbsMax(n: number, x: Float32Array, xo: number): number {
  let max = 0;
  let amax = 0;
  for (let i = 0; i < n; i++) {
    const ax = Math.abs(x[xo + i]);
    if (ax > amax) { amax = ax; max = x[xo + i]; }
  }
  return max;
}

/** Four bytes little-endian at y[o] (a block's 32 high bits, qh). */
export function putU32LE(y: Uint8Array, o: number, v: number): void {
  y[o] = v & 0xff;
  y[o + 1] = (v >>> 8) & 0xff;
  y[o + 2] = (v >>> 16) & 0xff;
  y[o + 3] = v >>> 24;
}
