/**
 * quantize / dequantize: rows of f32 <-> ggml block bytes, byte-identical to ggml_quantize_chunk
 * without an imatrix (quantize_row_*_ref) and to dequantize_row_* (ggml's to_float).
 */
import { LlmcError } from '../errors.js';
import { encodeBf16, encodeF16, f16Table } from '../util/half.js';
import { QUANT_TYPES, rowBytes, type QuantType } from './types.js';
import * as legacy from './legacy.js';
import * as k from './kquants.js';
import { simdKernels } from './bf16.js';
import { dequantizeIQ4_NL, dequantizeIQ4_XS, quantizeRowsWeighted } from './weighted.js';

/** IQ4_NL / IQ4_XS have no reference quantizer: ggml runs quantize_iq4_* with a null imatrix. */
const iq4Unweighted = (type: 'IQ4_NL' | 'IQ4_XS'): BlockQuantizer => (x, xo, nb, y, yo) => {
  const n = nb * QUANT_TYPES[type].blockSize;
  quantizeRowsWeighted(type, x.subarray(xo, xo + n), n, null, y, yo);
};

/** Block codec signature: `nb` blocks from x[xo] into y[yo] (or back). */
type BlockQuantizer = (x: Float32Array, xo: number, nb: number, y: Uint8Array, yo: number) => void;
type BlockDequantizer = (y: Uint8Array, yo: number, nb: number, out: Float32Array, oo: number) => void;

function quantizeF32(x: Float32Array, xo: number, n: number, y: Uint8Array, yo: number): void {
  y.set(new Uint8Array(x.buffer, x.byteOffset + xo * 4, n * 4), yo);
}
/**
 * GGML_FP32_TO_FP16 / ggml_compute_fp32_to_bf16: whole vectors of 8 in WebAssembly SIMD (simd.ts)
 * where available, the rest through src/core/util/half.ts's array encoders (same bits).
 */
function quantizeHalf(type: 'F16' | 'BF16'): BlockQuantizer {
  const encode = type === 'F16' ? encodeF16 : encodeBf16;
  return (x, xo, n, y, yo) => {
    const kernels = simdKernels();
    const whole = kernels ? n & ~7 : 0;
    if (whole) kernels!.f32ToHalf(type, x.subarray(xo, xo + whole), y.subarray(yo, yo + 2 * whole));
    if (whole === n) return;
    const rest = n - whole;
    const out = encode(x.subarray(xo + whole, xo + n), halfView(y, yo + 2 * whole, rest));
    if (out.buffer !== y.buffer) y.set(new Uint8Array(out.buffer, out.byteOffset, out.byteLength), yo + 2 * whole);
  };
}
const quantizeF16 = quantizeHalf('F16');
const quantizeBF16 = quantizeHalf('BF16');
/** 16-bit little-endian output: a view into y when aligned (the host is little-endian), else a scratch copy. */
function halfView(y: Uint8Array, yo: number, n: number): Uint16Array {
  return (y.byteOffset + yo) % 2 === 0 ? new Uint16Array(y.buffer, y.byteOffset + yo, n) : new Uint16Array(n);
}
function dequantizeF32(y: Uint8Array, yo: number, n: number, out: Float32Array, oo: number): void {
  new Uint8Array(out.buffer, out.byteOffset + oo * 4, n * 4).set(y.subarray(yo, yo + n * 4));
}
function dequantizeF16(y: Uint8Array, yo: number, n: number, out: Float32Array, oo: number): void {
  const t = f16Table();
  for (let i = 0; i < n; i++, yo += 2) out[oo + i] = t[y[yo] | (y[yo + 1] << 8)];
}
const BF = new Float32Array(1);
const BU = new Uint32Array(BF.buffer);
function dequantizeBF16(y: Uint8Array, yo: number, n: number, out: Float32Array, oo: number): void {
  for (let i = 0; i < n; i++, yo += 2) {
    BU[0] = (y[yo] << 16) | (y[yo + 1] << 24);
    out[oo + i] = BF[0];
  }
}

const QUANTIZERS: Record<QuantType, BlockQuantizer> = {
  F32: quantizeF32, F16: quantizeF16, BF16: quantizeBF16,
  Q8_0: legacy.quantizeQ8_0, Q4_0: legacy.quantizeQ4_0, Q4_1: legacy.quantizeQ4_1,
  Q5_0: legacy.quantizeQ5_0, Q5_1: legacy.quantizeQ5_1,
  Q2_K: k.quantizeQ2_K, Q3_K: k.quantizeQ3_K, Q4_K: k.quantizeQ4_K, Q5_K: k.quantizeQ5_K, Q6_K: k.quantizeQ6_K,
  IQ4_NL: iq4Unweighted('IQ4_NL'), IQ4_XS: iq4Unweighted('IQ4_XS'),
};

const DEQUANTIZERS: Record<QuantType, BlockDequantizer> = {
  F32: dequantizeF32, F16: dequantizeF16, BF16: dequantizeBF16,
  Q8_0: legacy.dequantizeQ8_0, Q4_0: legacy.dequantizeQ4_0, Q4_1: legacy.dequantizeQ4_1,
  Q5_0: legacy.dequantizeQ5_0, Q5_1: legacy.dequantizeQ5_1,
  Q2_K: k.dequantizeQ2_K, Q3_K: k.dequantizeQ3_K, Q4_K: k.dequantizeQ4_K, Q5_K: k.dequantizeQ5_K, Q6_K: k.dequantizeQ6_K,
  IQ4_NL: dequantizeIQ4_NL, IQ4_XS: dequantizeIQ4_XS,
};

/** Checks shapes; returns the number of rows. */
export function checkRows(type: QuantType, n: number, rowLength: number): number {
  const bytesPerRow = rowBytes(type, rowLength); // validates type and block divisibility
  void bytesPerRow;
  if (rowLength === 0) {
    if (n !== 0) throw new LlmcError(`${type}: row length 0 with ${n} elements`);
    return 0;
  }
  if (n % rowLength !== 0) throw new LlmcError(`${type}: ${n} elements is not a whole number of rows of ${rowLength}`);
  return n / rowLength;
}

/**
 * Quantize `data` (rows of `rowLength`) into `out` at byte offset `outOffset`; the caller sized `out`.
 * Used by quantize and by the workers of quantizeParallel.
 */
export function quantizeInto(type: QuantType, data: Float32Array, rowLength: number, out: Uint8Array, outOffset = 0): void {
  checkRows(type, data.length, rowLength);
  const nb = data.length / QUANT_TYPES[type].blockSize; // blocks never straddle rows: rowLength % blockSize == 0
  const need = nb * QUANT_TYPES[type].typeSize;
  if (outOffset + need > out.length) throw new LlmcError(`${type}: output buffer too small (${out.length - outOffset} < ${need} bytes)`);
  QUANTIZERS[type](data, 0, nb, out, outOffset);
}

/**
 * Quantize rows of length rowLength (data.length multiple of it; rowLength multiple of blockSize)
 * into ggml's block layout, bytes identical to ggml's reference quantizer.
 */
export function quantize(type: QuantType, data: Float32Array, rowLength: number): Uint8Array {
  const rows = checkRows(type, data.length, rowLength);
  const out = new Uint8Array(rows * rowBytes(type, rowLength));
  QUANTIZERS[type](data, 0, data.length / QUANT_TYPES[type].blockSize, out, 0);
  return out;
}

/** Decode `count` elements of `type` from `bytes` (ggml's dequantize_row_* arithmetic). */
export function dequantize(type: QuantType, bytes: Uint8Array, count: number): Float32Array {
  const need = rowBytes(type, count); // count must be whole blocks
  if (bytes.length < need) throw new LlmcError(`${type}: ${count} elements need ${need} bytes, got ${bytes.length}`);
  const out = new Float32Array(count);
  DEQUANTIZERS[type](bytes, 0, count / QUANT_TYPES[type].blockSize, out, 0);
  return out;
}
