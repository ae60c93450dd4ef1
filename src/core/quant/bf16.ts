/**
 * Quantizing straight from bfloat16 bits (a bf16 checkpoint's raw bytes) to F16 / Q8_0 / BF16 / F32,
 * with integer fast paths that give exactly the bytes of decoding to f32 and calling quantize()
 * (test/gguf-encode.test.ts: F16 over all 65536 bf16 values, Q8_0 over random and edge-case blocks).
 * Each also reports whether every input was finite, checked in the same loop.
 */
import { bf16Table, bf16ToF16Table, decodeBf16, decodeF16, f32ToF16 } from '../util/half.js';
import type { QuantType } from './types.js';
import { instantiateSimdKernels } from './simd.js';

/** Output bytes per bf16 value of the types with a direct bf16 path. */
export const BF16_DIRECT: Partial<Record<QuantType, number>> = { F16: 2, BF16: 2, F32: 4, Q8_0: 34 / 32 };

/** Whether `type` is encoded straight from bf16 bits (so the stream may hand over raw bf16 chunks). */
export function encodesBf16(type: QuantType, rowLength: number): boolean {
  return type in BF16_DIRECT && (type !== 'Q8_0' || rowLength % 32 === 0);
}

/** bf16 bits → f16 bits as u32 (a u32 table read is cheaper than a u16 one). */
let F16_OF_BF16: Uint32Array | null = null;

/**
 * Whether a 32-bit word of two bf16 values holds an Inf or NaN, as a flag bit: adding 0x80 to an
 * exponent field (sign cleared) carries into the sign position exactly when the field is all ones.
 */
const nonFiniteBits = (w: number) => ((w & 0x7f807f80) + 0x00800080) & 0x80008000;

/** Both typed arrays can be read as 32-bit words (how the loops below take two values at a time). */
const wordAligned = (a: Uint16Array, b: { byteOffset: number }) => ((a.byteOffset | b.byteOffset) & 3) === 0;

/** Whether every bf16 value is finite. */
export function allFiniteBf16(src: Uint16Array): boolean {
  let bad = 0;
  let i = 0;
  if (wordAligned(src, src)) {
    const words = src.length >>> 1;
    const s32 = new Uint32Array(src.buffer, src.byteOffset, words);
    for (let k = 0; k < words; k++) bad |= nonFiniteBits(s32[k]);
    i = words * 2;
  }
  for (; i < src.length; i++) bad |= nonFiniteBits(src[i]);
  return bad === 0;
}

/** The WebAssembly SIMD kernels, or null where WebAssembly SIMD is missing. */
export const simdKernels = () => instantiateSimdKernels(q8Scales);

/**
 * bf16 bits → F16 bits; whether every input was finite. WebAssembly SIMD where available
 * (simd.ts), else the JS below: same bytes.
 */
export function bf16ToF16Into(src: Uint16Array, dst: Uint16Array): boolean {
  const k = simdKernels();
  return k ? k.toF16(src, dst) : bf16ToF16IntoJs(src, dst);
}

/** bf16 bits → Q8_0 blocks; whether every input was finite. WebAssembly SIMD where available. */
export function bf16ToQ8_0Into(src: Uint16Array, y: Uint8Array): boolean {
  const k = simdKernels();
  return k ? k.toQ8_0(src, y) : bf16ToQ8_0IntoJs(src, y);
}

/** bf16 bits → f32 values (exact); whether every input was finite. WebAssembly SIMD where available. */
export function bf16ToF32Into(src: Uint16Array, dst: Float32Array): boolean {
  const k = simdKernels();
  if (k) return k.toF32(src, dst);
  decodeBf16(src, dst as Float32Array<ArrayBuffer>);
  return allFiniteBf16(src);
}

/** f16 bits → f32 values (exact); whether every input was finite. WebAssembly SIMD where available. */
export function f16ToF32Into(src: Uint16Array, dst: Float32Array): boolean {
  const k = simdKernels();
  if (k) return k.f16ToF32(src, dst);
  decodeF16(src, dst as Float32Array<ArrayBuffer>);
  return src.every((h) => (h & 0x7c00) !== 0x7c00);
}

/** f16 bits copied; whether every value was finite. WebAssembly SIMD where available. */
export function copyF16Into(src: Uint16Array, dst: Uint16Array): boolean {
  const k = simdKernels();
  if (k) return k.copyF16(src, dst);
  dst.set(src);
  for (let i = 0; i < src.length; i++) if ((src[i] & 0x7c00) === 0x7c00) return false;
  return true;
}

/**
 * bf16 bits → F16 bits in JS, one table read per value, two values per 32-bit word where aligned.
 * Returns whether every input was finite (the check rides along in the same loop).
 */
export function bf16ToF16IntoJs(src: Uint16Array, dst: Uint16Array): boolean {
  const t = (F16_OF_BF16 ??= Uint32Array.from(bf16ToF16Table()));
  let bad = 0;
  let i = 0;
  if (wordAligned(src, dst)) {
    const words = src.length >>> 1;
    const s32 = new Uint32Array(src.buffer, src.byteOffset, words);
    const d32 = new Uint32Array(dst.buffer, dst.byteOffset, words);
    for (let k = 0; k < words; k++) {
      const w = s32[k];
      bad |= nonFiniteBits(w);
      // Both values f16 normals (bf16 exponent 113..142, where weights live): rebias the exponents in
      // place (no borrow between the halves; each result fits its half after << 3). Else the table,
      // whose random reads are what this avoids.
      if (((w >>> 7) & 0xff) - 113 >>> 0 < 30 && ((w >>> 23) & 0xff) - 113 >>> 0 < 30) {
        d32[k] = (w & 0x80008000) | (((w & 0x7fff7fff) - 0x38003800) << 3);
      } else {
        d32[k] = t[w & 0xffff] | (t[w >>> 16] << 16);
      }
    }
    i = words * 2;
  }
  for (; i < src.length; i++) {
    bad |= nonFiniteBits(src[i]);
    dst[i] = t[src[i]];
  }
  return bad === 0;
}

/**
 * A Q8_0 block's scale depends only on its amax, here a bf16 magnitude (15 bits): per amax, the
 * stored f16 scale and the float32 inverse, as quantize_row_q8_0_ref computes them
 * (d = amax / 127, id = d ? 1 / d : 0, both rounded to float32).
 */
let Q8_SCALES: { d: Uint16Array; id: Float32Array } | null = null;
function q8Scales(): { d: Uint16Array; id: Float32Array } {
  if (!Q8_SCALES) {
    const t = bf16Table();
    const d = new Uint16Array(0x8000);
    const id = new Float32Array(0x8000);
    for (let m = 0; m < 0x8000; m++) {
      const dm = Math.fround(t[m] / 127);
      d[m] = f32ToF16(dm);
      id[m] = dm !== 0 ? 1 / dm : 0; // the Float32Array store rounds, as fround would
    }
    Q8_SCALES = { d, id };
  }
  return Q8_SCALES;
}

/**
 * bf16 bits → Q8_0 blocks in JS, the arithmetic of src/core/quant's quantizeQ8_0 (ggml's quantize_row_q8_0_ref)
 * on the decoded values, arranged to avoid unpredictable branches (random signs are the slow part):
 *  - for finite values |x| orders like the bits without the sign, so amax is an integer max; a
 *    block with an Inf or NaN has amax bits >= 0x7f80, which is how the finite check rides along;
 *  - roundf(v) then (int8_t) of v = x * id is trunc(|v| + 0.5) with x's sign applied in integers
 *    (|v| = fround(|x| * id): rounding is symmetric; v = ±0 gives 0 either way; an infinite or NaN v,
 *    when d is a tiny subnormal, gives 0 either way as `| 0` does).
 * Returns whether every input was finite (if not, the output is garbage).
 */
export function bf16ToQ8_0IntoJs(src: Uint16Array, y: Uint8Array): boolean {
  const t = bf16Table();
  const { d: D, id: ID } = q8Scales();
  const fr = Math.fround;
  let bad = 0;
  for (let xo = 0, yo = 0; xo < src.length; xo += 32, yo += 34) {
    let m = 0;
    for (let j = 0; j < 32; j++) {
      const diff = m - (src[xo + j] & 0x7fff);
      m -= diff & (diff >> 31); // max(m, |x|)
    }
    bad |= (m + 0x80) & 0x8000;
    const id = ID[m];
    const h = D[m];
    y[yo] = h & 0xff;
    y[yo + 1] = h >>> 8;
    for (let j = 0; j < 32; j++) {
      const x = src[xo + j];
      const q = (fr(t[x & 0x7fff] * id) + 0.5) | 0;
      const neg = (x << 16) >> 31; // 0 or -1
      y[yo + 2 + j] = (q ^ neg) - neg;
    }
  }
  return bad === 0;
}

