/**
 * IEEE half and bfloat16 conversions. Pure, browser-safe: the runtime core imports this too.
 * Rounding is round-to-nearest-even, as numpy / torch / ggml's GGML_FP32_TO_FP16 do.
 */
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function f16ToF32(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** Lookup table for the 65536 half values: decoding is a table read on hot paths. */
let F16_TABLE: Float32Array | null = null;
export function f16Table(): Float32Array {
  if (!F16_TABLE) {
    // Normal halves by their bits (rebias the exponent, widen the mantissa): fast enough for start-up.
    const t = new Float32Array(65536);
    const bits = new Uint32Array(t.buffer);
    for (let i = 0; i < 65536; i++) {
      const e = (i >> 10) & 0x1f;
      if (e === 0 || e === 31) t[i] = f16ToF32(i);
      else bits[i] = ((i & 0x8000) << 16) | ((e + 112) << 23) | ((i & 0x3ff) << 13);
    }
    F16_TABLE = t;
  }
  return F16_TABLE;
}

export function f32ToF16(x: number): number {
  f32[0] = x;
  const b = u32[0];
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  let mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0); // inf / nan
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow -> inf
  if (e <= 0) {
    if (e < -10) return sign; // underflow -> signed zero
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    let r = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    if (rem > half || (rem === half && r & 1)) r++;
    return sign | r;
  }
  let r = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && r & 1)) r++; // may carry into the exponent, which is right
  return sign | r;
}

export function bf16ToF32(h: number): number {
  u32[0] = h << 16;
  return f32[0];
}

export function f32ToBf16(x: number): number {
  f32[0] = x;
  const b = u32[0];
  if ((b & 0x7fffffff) > 0x7f800000) return ((b >>> 16) | 0x40) & 0xffff; // quiet NaN
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}

/**
 * bfloat16 bits → the nearest half's bits, in integer arithmetic (no f32 detour): equal to
 * f32ToF16(bf16ToF32(h)) for every h. bf16's 7 mantissa bits fit f16's 10, so only values below
 * f16's normal range (subnormals, round to nearest even) and above it (→ inf) need care.
 */
export function bf16ToF16Bits(h: number): number {
  const sign = h & 0x8000;
  const exp = (h >>> 7) & 0xff;
  const mant = h & 0x7f;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0); // inf / nan
  const e = exp - 112; // rebias 127 → 15
  if (e >= 0x1f) return sign | 0x7c00;
  if (e > 0) return sign | (e << 10) | (mant << 3);
  if (exp === 0) return sign; // zero or a bf16 subnormal (< 2^-126): far below half an f16 ulp
  // f16 subnormal: value / 2^-24 = (128 + mant) * 2^(exp - 110)
  const n = 0x80 | mant;
  const shift = 110 - exp;
  if (shift <= 0) return sign | (n << -shift);
  if (shift > 9) return sign; // n < 2^8 is below half of 2^shift
  let r = n >>> shift;
  const rem = n & ((1 << shift) - 1);
  const half = 1 << (shift - 1);
  if (rem > half || (rem === half && r & 1)) r++;
  return sign | r;
}

/** bf16 bits → f16 bits for all 65536 inputs: converting a bf16 tensor to F16 is one table read per value. */
let BF16_TO_F16: Uint16Array | null = null;
export function bf16ToF16Table(): Uint16Array {
  if (!BF16_TO_F16) {
    BF16_TO_F16 = new Uint16Array(65536);
    for (let i = 0; i < 65536; i++) BF16_TO_F16[i] = bf16ToF16Bits(i);
  }
  return BF16_TO_F16;
}

/** bf16 bits → f32 value for all 65536 inputs. */
let BF16_TABLE: Float32Array | null = null;
export function bf16Table(): Float32Array {
  if (!BF16_TABLE) {
    BF16_TABLE = new Float32Array(65536);
    const u = new Uint32Array(BF16_TABLE.buffer);
    for (let i = 0; i < 65536; i++) u[i] = i << 16;
  }
  return BF16_TABLE;
}

export function decodeF16(src: Uint16Array, dst = new Float32Array(src.length)): Float32Array {
  const t = f16Table();
  for (let i = 0; i < src.length; i++) dst[i] = t[src[i]];
  return dst;
}

export function decodeBf16(src: Uint16Array, dst = new Float32Array(src.length)): Float32Array {
  const out = new Uint32Array(dst.buffer, dst.byteOffset, dst.length);
  for (let i = 0; i < src.length; i++) out[i] = src[i] << 16;
  return dst;
}

/**
 * f32ToF16 over an array, on raw bits: values whose half is a normal number (2^-14 <= |x| < 65520)
 * are rebiased and rounded to nearest-even in integer arithmetic; the rest (subnormal, overflow,
 * inf, NaN) go through f32ToF16.
 */
export function encodeF16(src: Float32Array, dst: Uint16Array = new Uint16Array(src.length)): Uint16Array {
  const bits = new Int32Array(src.buffer, src.byteOffset, src.length); // int32 keeps the JIT on small ints
  for (let i = 0; i < src.length; i++) {
    const b = bits[i];
    const a = b & 0x7fffffff;
    dst[i] = a >= 0x38800000 && a < 0x477ff000 ? ((a - 0x38000000 + 0xfff + ((a >>> 13) & 1)) >>> 13) | ((b >>> 16) & 0x8000) : f32ToF16(src[i]);
  }
  return dst;
}

/** f32ToBf16 over an array, on raw bits (round to nearest even; NaN keeps its top bits, quieted). */
export function encodeBf16(src: Float32Array, dst: Uint16Array = new Uint16Array(src.length)): Uint16Array {
  const bits = new Int32Array(src.buffer, src.byteOffset, src.length);
  for (let i = 0; i < src.length; i++) {
    const b = bits[i];
    dst[i] = (b & 0x7fffffff) > 0x7f800000 ? (b >>> 16) | 64 : (b + 0x7fff + ((b >>> 16) & 1)) >>> 16;
  }
  return dst;
}
