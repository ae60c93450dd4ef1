/**
 * Matmul kernels over a weight stored as F32, F16 or ggml blocks (Q8_0, Q4_0, Q4_K; Q5_0, Q2_K, Q3_K,
 * Q6_K on the generic decode-then-dot path), read in place. These JS kernels keep x in f32; weights in a
 * WebAssembly arena run ./wasm.ts's kernels instead (quantized ones on integer x as llama.cpp, ./qdot.ts;
 * Q2_K and Q3_K stay here):
 * quantized blocks are decoded inside the dot product, never into a dequantized copy of the matrix.
 *
 * A weight is [rows, cols] row-major (Hugging Face [out, in]). Every kernel takes a row range and a
 * column prefix, so elastic widths run on prefixes of the full weights with zero copies: rows
 * [rowStart, rowStart+nRows) and columns [0, nCols), the row stride staying the full width.
 * Accumulation is in JS doubles (at least as exact as an f32 reference).
 */
import { f16Table } from '../../core/util/half.js';
import { FORMAT_BLOCK, formatRowBytes, type WeightFormat } from './format.js';
import { WASM_FORMATS, type GroupRope, type WasmArena, type WasmFormat } from './wasm.js';

/** The half → float table, built when the first weight that needs it is made (an F32 model starts without it). */
let F16: Float32Array = new Float32Array(0);

export class Weight {
  readonly rowBytes: number;
  readonly f32: Float32Array;
  readonly u16: Uint16Array;
  readonly u8: Uint8Array;
  readonly i8: Int8Array;

  /** Set when the bytes live in a WebAssembly arena whose SIMD kernels handle this format. */
  readonly arena: WasmArena | null;
  /** Byte address of the bytes inside the arena's memory. */
  readonly ptr: number;

  /** `bytes` must start at an offset that is a multiple of 4 in its buffer (the loader guarantees it). */
  constructor(
    readonly name: string,
    readonly format: WeightFormat,
    readonly rows: number,
    readonly cols: number,
    bytes: Uint8Array,
    arena: WasmArena | null = null,
  ) {
    if (format !== 'F32') {
      if (F16.length === 0) F16 = f16Table();
      arena?.useF16Table();
    }
    const inArena = arena !== null && bytes.buffer === arena.memory.buffer && WASM_FORMATS.includes(format);
    this.arena = inArena ? arena : null;
    this.ptr = inArena ? bytes.byteOffset : -1;
    this.rowBytes = formatRowBytes(format, cols)!;
    const b = bytes.buffer;
    const o = bytes.byteOffset;
    this.u8 = bytes;
    this.i8 = new Int8Array(b, o, bytes.byteLength);
    this.u16 = new Uint16Array(b, o, bytes.byteLength >> 1);
    this.f32 = format === 'F32' ? new Float32Array(b, o, bytes.byteLength >> 2) : new Float32Array(0);
  }
}

/** Decode one block (block index `blk` of row `row`) into out[0..blockSize). */
function decodeBlock(w: Weight, row: number, blk: number, out: Float32Array): void {
  const { u8, u16, i8 } = w;
  switch (w.format) {
    case 'F32':
      out[0] = w.f32[row * w.cols + blk];
      return;
    case 'F16':
      out[0] = F16[u16[row * w.cols + blk]];
      return;
    case 'Q8_0': {
      const bo = row * w.rowBytes + blk * 34;
      const d = F16[u16[bo >> 1]];
      for (let j = 0; j < 32; j++) out[j] = d * i8[bo + 2 + j];
      return;
    }
    case 'Q4_0': {
      const bo = row * w.rowBytes + blk * 18;
      const d = F16[u16[bo >> 1]];
      for (let j = 0; j < 16; j++) {
        const v = u8[bo + 2 + j];
        out[j] = d * ((v & 15) - 8);
        out[j + 16] = d * ((v >> 4) - 8);
      }
      return;
    }
    case 'Q5_0': {
      const bo = row * w.rowBytes + blk * 22;
      const d = F16[u16[bo >> 1]];
      const qh = u8[bo + 2] | (u8[bo + 3] << 8) | (u8[bo + 4] << 16) | (u8[bo + 5] << 24);
      for (let j = 0; j < 16; j++) {
        const v = u8[bo + 6 + j];
        out[j] = d * (((v & 15) | (((qh >>> j) & 1) << 4)) - 16);
        out[j + 16] = d * (((v >> 4) | (((qh >>> (j + 16)) & 1) << 4)) - 16);
      }
      return;
    }
    case 'Q4_K': {
      const bo = row * w.rowBytes + blk * 144;
      const d = F16[u16[bo >> 1]];
      const dmin = F16[u16[(bo >> 1) + 1]];
      for (let j = 0; j < 4; j++) {
        const q = bo + 16 + 32 * j;
        const d1 = d * scaleK4(u8, bo + 4, 2 * j);
        const m1 = dmin * minK4(u8, bo + 4, 2 * j);
        const d2 = d * scaleK4(u8, bo + 4, 2 * j + 1);
        const m2 = dmin * minK4(u8, bo + 4, 2 * j + 1);
        for (let l = 0; l < 32; l++) {
          const v = u8[q + l];
          out[64 * j + l] = d1 * (v & 15) - m1;
          out[64 * j + 32 + l] = d2 * (v >> 4) - m2;
        }
      }
      return;
    }
    case 'Q2_K':
      return decodeQ2_K(u8, row * w.rowBytes + blk * 84, out);
    case 'Q3_K':
      return decodeQ3_K(u8, row * w.rowBytes + blk * 110, out);
    case 'Q6_K':
      return decodeQ6_K(u8, row * w.rowBytes + blk * 210, out);
  }
}

// ggml's dequantize_row_q{2,3,6}_K for one 256-element block at byte `bo`, float32-exact.
const fr = Math.fround;
const f16At = (u8: Uint8Array, o: number) => F16[u8[o] | (u8[o + 1] << 8)];

function decodeQ2_K(u8: Uint8Array, bo: number, out: Float32Array): void {
  const d = f16At(u8, bo + 80);
  const min = f16At(u8, bo + 82);
  let o = 0;
  let is = 0;
  for (let n = 0, q = bo + 16; n < 256; n += 128, q += 32) {
    for (let shift = 0; shift < 8; shift += 2) {
      for (let half = 0; half < 32; half += 16) {
        const sc = u8[bo + is++];
        const dl = fr(d * (sc & 15));
        const ml = fr(min * (sc >> 4));
        for (let l = 0; l < 16; l++) out[o++] = fr(dl * ((u8[q + half + l] >> shift) & 3)) - ml;
      }
    }
  }
}

const Q3_SCALES = new Int8Array(16);
function decodeQ3_K(u8: Uint8Array, bo: number, out: Float32Array): void {
  const dAll = f16At(u8, bo + 108);
  const s = Q3_SCALES;
  for (let j = 0; j < 16; j++) {
    const lo = j < 8 ? u8[bo + 96 + j] & 15 : u8[bo + 96 + j - 8] >> 4;
    s[j] = (lo | (((u8[bo + 104 + (j % 4)] >> (2 * (j >> 2))) & 3) << 4)) - 32;
  }
  let o = 0;
  let is = 0;
  let m = 1;
  for (let n = 0, q = bo + 32; n < 256; n += 128, q += 32) {
    for (let shift = 0; shift < 8; shift += 2, m <<= 1) {
      for (let half = 0; half < 32; half += 16) {
        const dl = fr(dAll * s[is++]);
        for (let l = 0; l < 16; l++) out[o++] = dl * (((u8[q + half + l] >> shift) & 3) - (u8[bo + half + l] & m ? 0 : 4));
      }
    }
  }
}

function decodeQ6_K(u8: Uint8Array, bo: number, out: Float32Array): void {
  const d = f16At(u8, bo + 208);
  const sc8 = (o: number) => (u8[o] << 24) >> 24;
  for (let n = 0, ql = bo, qh = bo + 128, sc = bo + 192; n < 256; n += 128, ql += 64, qh += 32, sc += 8) {
    for (let l = 0; l < 32; l++) {
      const is = l >> 4;
      const h = u8[qh + l];
      out[n + l] = fr(d * sc8(sc + is)) * (((u8[ql + l] & 15) | ((h & 3) << 4)) - 32);
      out[n + l + 32] = fr(d * sc8(sc + is + 2)) * (((u8[ql + l + 32] & 15) | (((h >> 2) & 3) << 4)) - 32);
      out[n + l + 64] = fr(d * sc8(sc + is + 4)) * (((u8[ql + l] >> 4) | (((h >> 4) & 3) << 4)) - 32);
      out[n + l + 96] = fr(d * sc8(sc + is + 6)) * (((u8[ql + l + 32] >> 4) | (((h >> 6) & 3) << 4)) - 32);
    }
  }
}

/** The 6-bit scale of sub-block j (0..7) from Q4_K's 12 packed bytes at `s` (ggml's get_scale_min_k4). */
function scaleK4(u8: Uint8Array, s: number, j: number): number {
  return j < 4 ? u8[s + j] & 63 : (u8[s + j + 4] & 15) | ((u8[s + j - 4] >> 6) << 4);
}
function minK4(u8: Uint8Array, s: number, j: number): number {
  return j < 4 ? u8[s + j + 4] & 63 : (u8[s + j + 4] >> 4) | ((u8[s + j] >> 6) << 4);
}

/** Row `row`'s first `n` values into out[outOff..), e.g. an embedding lookup. */
export function dequantRow(w: Weight, row: number, out: Float32Array, outOff = 0, n = w.cols): void {
  if (w.format === 'F32') {
    out.set(w.f32.subarray(row * w.cols, row * w.cols + n), outOff);
    return;
  }
  if (w.format === 'F16') {
    const base = row * w.cols;
    for (let i = 0; i < n; i++) out[outOff + i] = F16[w.u16[base + i]];
    return;
  }
  const bs = FORMAT_BLOCK[w.format].blockSize;
  const tmp = scratch(bs);
  for (let b = 0; b * bs < n; b++) {
    decodeBlock(w, row, b, tmp);
    const m = Math.min(bs, n - b * bs);
    for (let j = 0; j < m; j++) out[outOff + b * bs + j] = tmp[j];
  }
}

/** The whole weight as f32 values (small tensors: norms, biases). */
export function dequantAll(w: Weight): Float32Array {
  const out = new Float32Array(w.rows * w.cols);
  for (let r = 0; r < w.rows; r++) dequantRow(w, r, out, r * w.cols);
  return out;
}

// Reused scratch buffers (no allocation per call on hot paths).
let SCRATCH = new Float32Array(256);
function scratch(n: number): Float32Array {
  if (SCRATCH.length < n) SCRATCH = new Float32Array(n);
  return SCRATCH;
}
let SUMS = new Float64Array(64);
function sums(n: number): Float64Array {
  if (SUMS.length < n) SUMS = new Float64Array(n);
  return SUMS;
}
let ROW = new Float32Array(1024);
function rowScratch(n: number): Float32Array {
  if (ROW.length < n) ROW = new Float32Array(n);
  return ROW;
}

export interface MatmulArgs {
  /** First output row of the weight, and how many (default: all). */
  rowStart?: number;
  nRows?: number;
  /** Column prefix (default: all columns). */
  nCols?: number;
  /** Added to the outputs: bias[rowStart + r]. */
  bias?: Float32Array | null;
  /** Every token through the one-token kernels: a row's result does not depend on T (see RunOptions.rowwise). */
  rowwise?: boolean;
}

/**
 * y[t*yStride + r] = sum_{c<nCols} W[rowStart+r, c] * x[t*xStride + c] (+ bias), for t < T.
 * T = 1 takes the fused dequant-dot path; T > 1 decodes each weight row once and dots it with all T rows of x.
 */
export function matmul(
  w: Weight,
  x: Float32Array,
  T: number,
  xStride: number,
  y: Float32Array,
  yStride: number,
  args: MatmulArgs = {},
): void {
  const rowStart = args.rowStart ?? 0;
  const nRows = args.nRows ?? w.rows - rowStart;
  const nCols = args.nCols ?? w.cols;
  if (w.arena) {
    const whole = wholeColumns(w, nCols);
    w.arena.matmul(w.format as WasmFormat, w.ptr, w.rowBytes, rowStart, nRows, whole, x, T, xStride, y, yStride, args.rowwise);
    if (whole !== nCols) addTail(w, x, T, xStride, y, yStride, rowStart, nRows, nCols);
  } else if (T === 1) matvec(w, x, 0, y, 0, rowStart, nRows, nCols);
  else if (args.rowwise) for (let t = 0; t < T; t++) matvec(w, x, t * xStride, y, t * yStride, rowStart, nRows, nCols);
  else if (w.format === 'F32') matmulF32(w, x, T, xStride, y, yStride, rowStart, nRows, nCols);
  else {
    const row = rowScratch(nCols);
    for (let r = 0; r < nRows; r++) {
      dequantRow(w, rowStart + r, row, 0, nCols);
      for (let t = 0; t < T; t++) y[t * yStride + r] = dot(row, 0, x, t * xStride, nCols);
    }
  }
  if (args.bias) addBias(args.bias, T, y, yStride, rowStart, nRows);
}

/** y[t*yStride + r] += the cut block's part of row rowStart + r (columns the arena's kernels leave: tailDot). */
function addTail(w: Weight, x: Float32Array, T: number, xStride: number, y: Float32Array, yStride: number, rowStart: number, nRows: number, nCols: number): void {
  for (let t = 0; t < T; t++) for (let r = 0; r < nRows; r++) y[t * yStride + r] += tailDot(w, rowStart + r, x, t * xStride, nCols);
}

function addBias(bias: Float32Array, T: number, y: Float32Array, yStride: number, rowStart: number, nRows: number): void {
  for (let t = 0; t < T; t++) for (let r = 0; r < nRows; r++) y[t * yStride + r] += bias[rowStart + r];
}

/** One output of matmulGroup: y[t*yStride + r] = W[r, :] · x[t] (+ bias[r]) over all of W's rows. */
export interface GroupOutput {
  y: Float32Array;
  yStride: number;
  bias?: Float32Array | null;
}

/**
 * matmul of each of `ws` (all rows, columns [0, nCols)) over the same x (q, k, v; gate, up): where they
 * share an arena, format and row size, one WasmArena.matmulGroup call (x quantized once, one pool job);
 * else one matmul each. Outputs equal matmul's bit for bit.
 */
export function matmulGroup(ws: readonly Weight[], x: Float32Array, T: number, xStride: number, outs: readonly GroupOutput[], nCols: number, rowwise?: boolean): void {
  const w0 = ws[0];
  if (!w0.arena || ws.some((w) => w.arena !== w0.arena || w.format !== w0.format || w.rowBytes !== w0.rowBytes || w.cols !== w0.cols)) {
    ws.forEach((w, i) => matmul(w, x, T, xStride, outs[i].y, outs[i].yStride, { nCols, bias: outs[i].bias, rowwise }));
    return;
  }
  const whole = wholeColumns(w0, nCols);
  w0.arena.matmulGroup(w0.format as WasmFormat, w0.rowBytes, whole, x, T, xStride, ws.map((w, i) => ({ ptr: w.ptr, nRows: w.rows, y: outs[i].y, yStride: outs[i].yStride })), rowwise);
  ws.forEach((w, i) => {
    const { y, yStride, bias } = outs[i];
    if (whole !== nCols) addTail(w, x, T, xStride, y, yStride, 0, w.rows, nCols);
    if (bias) addBias(bias, T, y, yStride, 0, w.rows);
  });
}

/**
 * matmulGroup over RMSNorm(x) for one token (x the norm's input, `norm` its weight): the norm runs
 * inside the arena's job (WasmArena.matmulGroupNormed: on a worker pool the threads scale and
 * quantize x piece by piece), the same bits as the interpreter's rmsNorm then matmulGroup. False
 * (nothing done) unless every weight is a quantized one of one arena, format and row size whose
 * columns are D whole blocks: the caller runs the two steps then.
 */
export function matmulGroupNormed(ws: readonly Weight[], x: Float32Array, D: number, norm: Float32Array, eps: number, outs: readonly GroupOutput[], rope: GroupRope | null = null): boolean {
  const w0 = ws[0];
  if (!w0.arena || w0.format === 'F32' || w0.format === 'F16' || w0.cols !== D || wholeColumns(w0, D) !== D) return false;
  if (ws.some((w) => w.arena !== w0.arena || w.format !== w0.format || w.rowBytes !== w0.rowBytes || w.cols !== D)) return false;
  // RoPE's heads: the job is cut at whole heads, so every output must be whole heads; biases are added after the rows (so before a rope), here after the job
  if (rope && (ws.some((w) => w.rows % (2 * rope.half)) || outs.some((o, i) => i < rope.matrices && o.bias))) return false;
  w0.arena.matmulGroupNormed(w0.format as Exclude<WasmFormat, 'F32' | 'F16'>, w0.rowBytes, D, x, norm, eps, ws.map((w, i) => ({ ptr: w.ptr, nRows: w.rows, y: outs[i].y, yStride: outs[i].yStride })), rope);
  ws.forEach((w, i) => outs[i].bias && addBias(outs[i].bias!, 1, outs[i].y, outs[i].yStride, 0, w.rows));
  return true;
}

/**
 * y = W · (silu(g)·u) over W's rows and all its columns (the MLP's down projection over its fused
 * activation) with silu·mul inside the arena's matmul job, on its worker pool where there is one:
 * the same bits as SiluMul.run then matmul. False (nothing done) where W is not a quantized weight
 * of the arena whose columns are whole blocks: the caller runs the two steps then.
 */
export function matmulSiluMul(w: Weight, g: Float32Array, u: Float32Array, T: number, xStride: number, y: Float32Array, yStride: number, bias: Float32Array | null, r: Float32Array | null = null): boolean {
  if (!w.arena || w.format === 'F32' || w.format === 'F16' || wholeColumns(w, w.cols) !== w.cols) return false;
  if (r && (T !== 1 || bias)) return false;
  w.arena.matmulSiluMul(w.format as Exclude<WasmFormat, 'F32' | 'F16'>, w.ptr, w.rowBytes, w.rows, w.cols, g, u, T, xStride, y, yStride, r);
  if (bias) addBias(bias, T, y, yStride, 0, w.rows);
  return true;
}

/**
 * y = W·x + r for one token over W's rows and all its columns (o_proj and the residual add after
 * it): the add runs in the arena's matmul job, on each thread's rows (WasmArena.matmulResidual),
 * the same bits as matmul then the add. False (nothing done) where W is not a quantized weight of
 * the arena whose columns are whole blocks: the caller runs the two steps then.
 */
export function matmulResidual(w: Weight, x: Float32Array, r: Float32Array, y: Float32Array): boolean {
  if (!w.arena || w.format === 'F32' || w.format === 'F16' || wholeColumns(w, w.cols) !== w.cols) return false;
  w.arena.matmulResidual(w.format as Exclude<WasmFormat, 'F32' | 'F16'>, w.ptr, w.rowBytes, w.rows, w.cols, x, r, y);
  return true;
}

/** The columns of a prefix of nCols that the arena's kernels take: whole blocks (the caller adds the cut block's tail). */
const wholeColumns = (w: Weight, nCols: number) => (w.format === 'F32' || w.format === 'F16' ? nCols : FORMAT_BLOCK[w.format].blockSize === 256 ? nCols & ~255 : nCols & ~31);

function dot(a: Float32Array, ao: number, b: Float32Array, bo: number, n: number): number {
  let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  let i = 0;
  for (; i + 3 < n; i += 4) {
    s0 += a[ao + i] * b[bo + i];
    s1 += a[ao + i + 1] * b[bo + i + 1];
    s2 += a[ao + i + 2] * b[bo + i + 2];
    s3 += a[ao + i + 3] * b[bo + i + 3];
  }
  for (; i < n; i++) s0 += a[ao + i] * b[bo + i];
  return s0 + s1 + s2 + s3;
}

function matmulF32(w: Weight, x: Float32Array, T: number, xs: number, y: Float32Array, ys: number, r0: number, nr: number, nc: number): void {
  const f = w.f32;
  const C = w.cols;
  for (let r = 0; r < nr; r++) {
    const o = (r0 + r) * C;
    for (let t = 0; t < T; t++) y[t * ys + r] = dot(f, o, x, t * xs, nc);
  }
}

/** One token: y[yOff + r] = W[rowStart + r, :nCols] · x[xOff ..]. */
export function matvec(w: Weight, x: Float32Array, xOff: number, y: Float32Array, yOff: number, rowStart: number, nRows: number, nCols: number): void {
  switch (w.format) {
    case 'F32': {
      const f = w.f32;
      const C = w.cols;
      for (let r = 0; r < nRows; r++) y[yOff + r] = dot(f, (rowStart + r) * C, x, xOff, nCols);
      return;
    }
    case 'F16': {
      const u = w.u16;
      const C = w.cols;
      for (let r = 0; r < nRows; r++) {
        const o = (rowStart + r) * C;
        let s0 = 0, s1 = 0;
        let i = 0;
        for (; i + 1 < nCols; i += 2) {
          s0 += F16[u[o + i]] * x[xOff + i];
          s1 += F16[u[o + i + 1]] * x[xOff + i + 1];
        }
        if (i < nCols) s0 += F16[u[o + i]] * x[xOff + i];
        y[yOff + r] = s0 + s1;
      }
      return;
    }
    case 'Q8_0':
      return matvecQ8_0(w, x, xOff, y, yOff, rowStart, nRows, nCols);
    case 'Q4_0':
      return matvecQ4_0(w, x, xOff, y, yOff, rowStart, nRows, nCols);
    case 'Q4_K':
      return matvecQ4_K(w, x, xOff, y, yOff, rowStart, nRows, nCols);
    case 'Q5_0':
    case 'Q2_K':
    case 'Q3_K':
    case 'Q6_K':
      return matvecBlocks(w, x, xOff, y, yOff, rowStart, nRows, nCols);
  }
}

/** The part of a row past the last whole block (a column prefix that cuts a block). */
function tailDot(w: Weight, row: number, x: Float32Array, xOff: number, nCols: number): number {
  const bs = FORMAT_BLOCK[w.format].blockSize;
  const full = Math.floor(nCols / bs);
  if (full * bs === nCols) return 0;
  const tmp = scratch(bs);
  decodeBlock(w, row, full, tmp);
  let s = 0;
  for (let j = full * bs; j < nCols; j++) s += tmp[j - full * bs] * x[xOff + j];
  return s;
}

function matvecQ8_0(w: Weight, x: Float32Array, xOff: number, y: Float32Array, yOff: number, rowStart: number, nRows: number, nCols: number): void {
  const { i8, u16, rowBytes } = w;
  const nb = nCols >> 5;
  const tail = nb * 32 !== nCols;
  for (let r = 0; r < nRows; r++) {
    let bo = (rowStart + r) * rowBytes;
    let acc = 0;
    for (let b = 0; b < nb; b++, bo += 34) {
      const q = bo + 2;
      const xb = xOff + (b << 5);
      let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (let j = 0; j < 32; j += 4) {
        s0 += i8[q + j] * x[xb + j];
        s1 += i8[q + j + 1] * x[xb + j + 1];
        s2 += i8[q + j + 2] * x[xb + j + 2];
        s3 += i8[q + j + 3] * x[xb + j + 3];
      }
      acc += F16[u16[bo >> 1]] * (s0 + s1 + s2 + s3);
    }
    if (tail) acc += tailDot(w, rowStart + r, x, xOff, nCols);
    y[yOff + r] = acc;
  }
}

/** Sums of x over consecutive 32-element groups: the offset terms of Q4_0/Q4_K factor out of the dot. */
function groupSums(x: Float32Array, xOff: number, groups: number): Float64Array {
  const s = sums(groups);
  for (let g = 0; g < groups; g++) {
    let a = 0;
    const o = xOff + g * 32;
    for (let j = 0; j < 32; j++) a += x[o + j];
    s[g] = a;
  }
  return s;
}

function matvecQ4_0(w: Weight, x: Float32Array, xOff: number, y: Float32Array, yOff: number, rowStart: number, nRows: number, nCols: number): void {
  const { u8, u16, rowBytes } = w;
  const nb = nCols >> 5;
  const tail = nb * 32 !== nCols;
  const xs = groupSums(x, xOff, nb);
  for (let r = 0; r < nRows; r++) {
    let bo = (rowStart + r) * rowBytes;
    let acc = 0;
    for (let b = 0; b < nb; b++, bo += 18) {
      const q = bo + 2;
      const xb = xOff + (b << 5);
      let s0 = 0, s1 = 0;
      for (let j = 0; j < 16; j += 2) {
        const v0 = u8[q + j];
        const v1 = u8[q + j + 1];
        s0 += (v0 & 15) * x[xb + j] + (v0 >> 4) * x[xb + 16 + j];
        s1 += (v1 & 15) * x[xb + j + 1] + (v1 >> 4) * x[xb + 17 + j];
      }
      acc += F16[u16[bo >> 1]] * (s0 + s1 - 8 * xs[b]);
    }
    if (tail) acc += tailDot(w, rowStart + r, x, xOff, nCols);
    y[yOff + r] = acc;
  }
}

function matvecQ4_K(w: Weight, x: Float32Array, xOff: number, y: Float32Array, yOff: number, rowStart: number, nRows: number, nCols: number): void {
  const { u8, u16, rowBytes } = w;
  const nb = nCols >> 8;
  const tail = nb * 256 !== nCols;
  const xs = groupSums(x, xOff, nb * 8);
  for (let r = 0; r < nRows; r++) {
    let bo = (rowStart + r) * rowBytes;
    let acc = 0;
    for (let b = 0; b < nb; b++, bo += 144) {
      const d = F16[u16[bo >> 1]];
      const dmin = F16[u16[(bo >> 1) + 1]];
      const sc = bo + 4;
      let qsum = 0;
      let msum = 0;
      for (let j = 0; j < 4; j++) {
        const q = bo + 16 + 32 * j;
        const xb = xOff + (b << 8) + 64 * j;
        let s1 = 0, s2 = 0;
        for (let l = 0; l < 32; l += 2) {
          const v0 = u8[q + l];
          const v1 = u8[q + l + 1];
          s1 += (v0 & 15) * x[xb + l] + (v1 & 15) * x[xb + l + 1];
          s2 += (v0 >> 4) * x[xb + 32 + l] + (v1 >> 4) * x[xb + 33 + l];
        }
        const g = b * 8 + 2 * j;
        qsum += scaleK4(u8, sc, 2 * j) * s1 + scaleK4(u8, sc, 2 * j + 1) * s2;
        msum += minK4(u8, sc, 2 * j) * xs[g] + minK4(u8, sc, 2 * j + 1) * xs[g + 1];
      }
      acc += d * qsum - dmin * msum;
    }
    if (tail) acc += tailDot(w, rowStart + r, x, xOff, nCols);
    y[yOff + r] = acc;
  }
}

/** Generic path (decode a block, then dot): Q5_0 (a fallback) and Q2_K / Q3_K / Q6_K. */
function matvecBlocks(w: Weight, x: Float32Array, xOff: number, y: Float32Array, yOff: number, rowStart: number, nRows: number, nCols: number): void {
  const bs = FORMAT_BLOCK[w.format].blockSize;
  const tmp = new Float32Array(bs);
  for (let r = 0; r < nRows; r++) {
    let acc = 0;
    for (let b = 0; b * bs < nCols; b++) {
      decodeBlock(w, rowStart + r, b, tmp);
      const m = Math.min(bs, nCols - b * bs);
      const xb = xOff + b * bs;
      for (let j = 0; j < m; j++) acc += tmp[j] * x[xb + j];
    }
    y[yOff + r] = acc;
  }
}
