/**
 * Weight-only quantization as the ONNX ecosystem stores it (docs/cuda.md has the formulas):
 * - int8 per output channel, symmetric: scale[n] = max|W[n,:]| / 127, q = round(w / scale) in [−127, 127]
 *   (DequantizeLinear with `axis`, opset 13);
 * - int4 blockwise along the input axis, `block` values per scale:
 *     symmetric:   scale = m / −8 where m is the block's value of largest magnitude, q = round(w / scale)
 *                  clamped to [−8, 7] (so m maps to −8 exactly, as ggml's Q4_0 and onnxruntime's
 *                  MLAS blockwise quantizer do);
 *     zero points: lo = min(0, min w), hi = max(0, max w), scale = (hi − lo) / 15,
 *                  zp = clamp(round(−lo / scale), 0, 15), u = clamp(round(w / scale) + zp, 0, 15).
 *   Codes are kept unsigned (u = q + 8 when symmetric), w ≈ (u − zp) · scale, and packed two per
 *   byte, the first in the low nibble, in either encoding (nb = ceil(K/block) blocks per row):
 *     MatMulNBits (com.microsoft): B [N, nb, block/2] uint8 row by row of W [N, K], scales [N · nb],
 *       zero points [N · ceil(nb/2)] uint8 (two blocks per byte);
 *     DequantizeLinear (opset 21, block_size): an INT4 (symmetric, zero point 0) or UINT4 tensor
 *       in the stored orientation, scales and zero points [nb, N] or [N, nb].
 * A block that K does not fill (stories260K's FFN of 172 in blocks of 32) is the last one of a row:
 * quantized over its values alone, which is what onnxruntime's quantizer gets from padding the row
 * with zeros (matmul_4bits_quantizer.py, QOperator: np.pad to nb · block, then MLAS — a zero changes
 * neither the largest magnitude nor min(0, ·) / max(0, ·)). MatMulNBits stores those padded codes
 * (0 quantizes to the zero point: 8, or zp); DequantizeLinear's blocked form takes the partial last
 * block as is (scale dim ceil(Di / block_size); onnxruntime's QDQ quantizer writes [nb, N] scales
 * over the unpadded tensor).
 * Scales are rounded to their stored dtype first and the codes computed with the rounded scale, so
 * dequantizing the stored bytes gives exactly the values the codes were chosen for.
 */
import { LlmcError } from '../../core/errors.js';
import { encodeF16, f16ToF32, f32ToF16 } from '../../core/util/half.js';

export type ScaleDtype = 'fp32' | 'fp16';

const roundScale = (s: number, dtype: ScaleDtype) => (dtype === 'fp16' ? f16ToF32(f32ToF16(s)) : Math.fround(s));

/** Scales as stored (float32 or float16 little-endian bytes). */
export function scaleBytes(scales: Float32Array, dtype: ScaleDtype): Uint8Array {
  const a = dtype === 'fp16' ? encodeF16(scales) : scales;
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

export interface Int8Weights {
  /** [rows, cols] codes, row-major as W. */
  q: Int8Array;
  /** [rows], as stored (rounded to the scale dtype). */
  scales: Float32Array;
}

/** Symmetric int8 per row (a row of W [out, in] is one output channel). */
export function quantizeInt8Rows(w: Float32Array, rows: number, cols: number, scaleDtype: ScaleDtype): Int8Weights {
  const q = new Int8Array(rows * cols);
  const scales = new Float32Array(rows);
  for (let r = 0; r < rows; r++) {
    let max = 0;
    for (let c = 0; c < cols; c++) max = Math.max(max, Math.abs(w[r * cols + c]));
    const s = roundScale(max / 127, scaleDtype);
    scales[r] = s;
    if (s === 0) continue;
    for (let c = 0; c < cols; c++) q[r * cols + c] = Math.max(-127, Math.min(127, Math.round(w[r * cols + c] / s)));
  }
  return { q, scales };
}

export interface Int4Weights {
  rows: number;
  cols: number;
  block: number;
  /** [rows, cols] unsigned codes 0..15, row-major as W. */
  codes: Uint8Array;
  /** [rows, ceil(cols / block)], as stored. */
  scales: Float32Array;
  /** [rows, ceil(cols / block)] zero points, or null when symmetric (zero point 8 in unsigned codes). */
  zeroPoints: Uint8Array | null;
}

/** Blockwise int4 along rows of W [rows, cols]; a row's last block may be partial (see above). */
export function quantizeInt4Rows(w: Float32Array, rows: number, cols: number, block: number, zeroPoints: boolean, scaleDtype: ScaleDtype): Int4Weights {
  const nb = Math.ceil(cols / block);
  const codes = new Uint8Array(rows * cols);
  const scales = new Float32Array(rows * nb);
  const zps = zeroPoints ? new Uint8Array(rows * nb) : null;
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < nb; j++) {
      const o = r * cols + j * block;
      const n = Math.min(block, cols - j * block);
      if (!zps) {
        let m = 0;
        for (let i = 0; i < n; i++) if (Math.abs(w[o + i]) > Math.abs(m)) m = w[o + i];
        const s = roundScale(m / -8, scaleDtype);
        scales[r * nb + j] = s;
        for (let i = 0; i < n; i++) codes[o + i] = s === 0 ? 8 : Math.max(0, Math.min(15, Math.round(w[o + i] / s) + 8));
      } else {
        let lo = 0;
        let hi = 0;
        for (let i = 0; i < n; i++) {
          lo = Math.min(lo, w[o + i]);
          hi = Math.max(hi, w[o + i]);
        }
        const s = roundScale((hi - lo) / 15, scaleDtype);
        scales[r * nb + j] = s;
        const zp = s === 0 ? 0 : Math.max(0, Math.min(15, Math.round(-lo / s)));
        zps[r * nb + j] = zp;
        for (let i = 0; i < n; i++) codes[o + i] = s === 0 ? 0 : Math.max(0, Math.min(15, Math.round(w[o + i] / s) + zp));
      }
    }
  }
  return { rows, cols, block, codes, scales, zeroPoints: zps };
}

/**
 * MatMulNBits' B codes: each row padded to ceil(cols/block) whole blocks with the code of 0 (the
 * zero point: 8, or the block's zp), as onnxruntime's quantizer pads W with zeros.
 */
export function paddedInt4Codes(q: Int4Weights): Uint8Array {
  const nb = Math.ceil(q.cols / q.block);
  const K = nb * q.block;
  if (K === q.cols) return q.codes;
  const out = new Uint8Array(q.rows * K);
  for (let r = 0; r < q.rows; r++) {
    out.set(q.codes.subarray(r * q.cols, (r + 1) * q.cols), r * K);
    out.fill(q.zeroPoints ? q.zeroPoints[r * nb + nb - 1] : 8, r * K + q.cols, (r + 1) * K);
  }
  return out;
}

/** The values the codes stand for: (u − zp) · scale. */
export function dequantizeInt4(q: Int4Weights): Float32Array {
  const out = new Float32Array(q.rows * q.cols);
  const nb = Math.ceil(q.cols / q.block);
  for (let r = 0; r < q.rows; r++) {
    for (let c = 0; c < q.cols; c++) {
      const b = r * nb + Math.floor(c / q.block);
      out[r * q.cols + c] = (q.codes[r * q.cols + c] - (q.zeroPoints ? q.zeroPoints[b] : 8)) * q.scales[b];
    }
  }
  return out;
}

/** Two 4-bit values per byte, the first in the low nibble (ONNX INT4/UINT4 and MatMulNBits alike). */
export function packNibbles(values: Uint8Array): Uint8Array {
  const out = new Uint8Array(Math.ceil(values.length / 2));
  for (let i = 0; i < values.length; i += 2) out[i >> 1] = (values[i] & 15) | ((i + 1 < values.length ? values[i + 1] & 15 : 0) << 4);
  return out;
}

/** MatMulNBits' zero points: per row, ceil(nb/2) bytes of two blocks each (low nibble first). */
export function packMatMulNBitsZeroPoints(zps: Uint8Array, rows: number, nb: number): Uint8Array {
  const per = Math.ceil(nb / 2);
  const out = new Uint8Array(rows * per);
  for (let r = 0; r < rows; r++) out.set(packNibbles(zps.subarray(r * nb, (r + 1) * nb)), r * per);
  return out;
}

/**
 * Codes as the DequantizeLinear encoding stores them: signed int4 (u − 8) when symmetric, unsigned
 * otherwise, nibbles of the 2's-complement value.
 */
export function dqCodes(q: Int4Weights): Uint8Array {
  return q.zeroPoints ? q.codes : q.codes.map((u) => (u - 8) & 15);
}
