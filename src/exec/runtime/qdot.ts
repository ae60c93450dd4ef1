/**
 * Integer-activation matmul kernels, llama.cpp's vec_dot: the activation x is quantized once per call
 * (ggml's quantize_row_q8_0_ref per 32 values for Q8_0 / Q4_0 / Q5_0 weights, quantize_row_q8_K_ref
 * per 256 with its block sums for Q4_K / Q6_K), then each block's dot product is int8 × int8 in
 * i16 lanes summed into i32 (exact), and the scales apply per block in f32. So the runtime's results
 * for these weights are llama.cpp's, up to the order of the f32 sums.
 *
 * The quantized x lives in the arena's memory (WasmArena.matmul writes it before any kernel runs, so
 * a worker pool's threads all read the same bytes). Layout per token, blocks back to back:
 * - q8_0 (36 bytes): f32 d (the f16-rounded scale ggml stores), 32 × int8;
 * - q8_K (308 bytes): f32 d, 16 × i16 sums of 16 values (ggml's bsums), 8 × i16 sums of 32, 256 × int8.
 *
 * The kernels take the others' parameters (w, wStride, xq, xqStride, y, yStride, nRows, nBlocks, T,
 * table): y[t·yStride + 4r] = Σ over nBlocks whole blocks of row r and token t. Browser-safe.
 */
import { fr, nearestInt } from '../../core/quant/common.js';
import { f16ToF32, f32ToF16 } from '../../core/util/half.js';
import { uleb } from '../../core/util/wasm-asm.js';
import {
  block, br, brIf, f32Load, f32Mul, fAdd, fFromI32, fMul, fSplat, fSub, get, i32Add, i32And, i32c, i32GeU, i32Mul, i32Or, i32Shl, iAdd, iSplat, loop, set, simd, vAnd, vload, vOr, vZero,
} from '../../core/util/wasm-ops.js';

/** Weight formats with an integer-activation kernel, and the activation blocks each reads. */
export type QdotFormat = 'Q8_0' | 'Q4_0' | 'Q5_0' | 'Q4_K' | 'Q6_K';
export const QDOT_FORMATS: readonly string[] = ['Q8_0', 'Q4_0', 'Q5_0', 'Q4_K', 'Q6_K'];
export const Q8_0_BYTES = 36;
export const Q8_K_BYTES = 308;
/** Activation layout by weight format: values per block and bytes per block. */
export const QDOT_ACT: Record<QdotFormat, { block: number; bytes: number }> = {
  Q8_0: { block: 32, bytes: Q8_0_BYTES },
  Q4_0: { block: 32, bytes: Q8_0_BYTES },
  Q5_0: { block: 32, bytes: Q8_0_BYTES },
  Q4_K: { block: 256, bytes: Q8_K_BYTES },
  Q6_K: { block: 256, bytes: Q8_K_BYTES },
};

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

// Instructions not in wasm-ops.ts.
const mem = (code: number, align: number, off: number) => [code, align, ...uleb(off)];
const i32Load = (off: number) => mem(0x28, 2, off);
const i32Load8S = (off: number) => mem(0x2c, 0, off);
const i32Load16U = (off: number) => mem(0x2f, 1, off);
const f32Store = [0x38, 2, 0];
const i32ShrU = [0x76];
const load8x8S = (off: number) => simd(0x01, 0, ...uleb(off));
const load8x8U = (off: number) => simd(0x02, 0, ...uleb(off));
const load32Splat = (off: number) => simd(0x09, 0, ...uleb(off));
const vConst = (bytes: number[]) => simd(0x0c, ...bytes);
const bSwizzle = simd(0x0e);
const bSplat = simd(0x0f);
const bExtractU = (lane: number) => simd(0x16, lane);
const iReplace = (lane: number) => simd(0x1c, lane);
const bEq = simd(0x23);
const bShl = simd(0x6b);
const bShrU = simd(0x6d);
const bSub = simd(0x71);
const hExtLowS = simd(0x87); // i16x8.extend_low_i8x16_s
const hExtHighS = simd(0x88);
const hExtHighU = simd(0x8a); // i16x8.extend_high_i8x16_u
const hShrU = simd(0x8d);
const hSub = simd(0x91);
const hSplat = simd(0x10);
const iMul = simd(0xb5);
const iDot = simd(0xba); // i32x4.dot_i16x8_s

// Locals: parameters 0..9, then i32 10..19, f32 20..23, v128 24..39.
const [W, WS, X, XS, Y, YS, NR, NB, T, TAB] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9];
const [R, TT, BP, XB, B, U0, U1, U2] = [10, 11, 12, 13, 14, 15, 16, 17];
const V = (i: number) => 24 + i;
const [ACC, IACC, MACC, IS, Q] = [V(0), V(1), V(2), V(3), V(5)];
/** Free v128 locals for a kernel's own use. */
const TMP = [V(6), V(7), V(8), V(9), V(10), V(11), V(12), V(13)];
const LOCALS = [...uleb(3), ...uleb(10), 0x7f, ...uleb(4), 0x7d, ...uleb(16), 0x7b];

const whileLt = (a: number[], limit: number[], body: number[]) => block(loop([...a, ...limit, ...i32GeU, ...brIf(1), ...body, ...br(0)]));
const inc = (l: number, by: number) => [...get(l), ...i32c(by), ...i32Add, ...set(l)];
const splatB = (v: number) => [...i32c(v), ...bSplat];
/** The f16 at BP + off as f32, through the table. */
const f16At = (off: number) => [...get(TAB), ...get(BP), ...i32Load16U(off), ...i32c(2), ...i32Shl, ...i32Add, ...f32Load()];
/** ACC += f32(vector local `acc`) · splat(f16 weight scale at BP + off · x's f32 scale); `minus` subtracts. */
const scaleInto = (acc: number, off: number, minus = false) => [
  ...get(ACC), ...get(acc), ...fFromI32, ...f16At(off), ...get(XB), ...f32Load(), ...f32Mul, ...fSplat, ...fMul, ...(minus ? fSub : fAdd), ...set(ACC),
];
/**
 * i32x4 Σ of the products of the 16 int8 lanes of `w` with the int8 x at XB + off: both widened to
 * i16 (x by its load), then i32x4.dot_i16x8_s (one pmaddwd on x64; i8×i8 extmuls cost more).
 */
const dot16 = (w: number[], off: number) => [
  ...w, ...set(Q),
  ...get(Q), ...hExtLowS, ...get(XB), ...load8x8S(off), ...iDot,
  ...get(Q), ...hExtHighS, ...get(XB), ...load8x8S(off + 8), ...iDot,
  ...iAdd,
];
/** i32x4 Σ of the products of the i16 lanes of `w` (8 values) with the int8 x at XB + off. */
const dot8 = (w: number[], off: number) => [...w, ...get(XB), ...load8x8S(off), ...iDot];
/** Nibbles as i16 lanes: bytes widened by their load, then the low (`& 15`) or high (`>> 4`) half. */
const lowNib = (l: number) => [...get(l), ...splatB(15), ...vAnd];
const highNib = (l: number) => [...get(l), ...i32c(4), ...hShrU];

/**
 * A kernel: for each row r and token t, ACC zeroed, `blk` run for each of the nBlocks blocks (it reads
 * the weight block at BP and the activation block at XB), BP += wBytes, XB += xBytes, then
 * y[t·yStride + 4r] = the lanes of ACC summed. `setup` runs once (constants into locals).
 */
function kernel(wBytes: number, xBytes: number, blk: number[], setup: number[] = []): number[] {
  const hsum = [0, 1, 2, 3].flatMap((l) => [...get(ACC), ...simd(0x1f, l), ...(l ? [0x92] : [])]);
  return [
    ...LOCALS,
    ...setup,
    ...i32c(0), ...set(R),
    ...whileLt(get(R), get(NR), [
      ...i32c(0), ...set(TT),
      ...whileLt(get(TT), get(T), [
        ...get(W), ...get(R), ...get(WS), ...i32Mul, ...i32Add, ...set(BP),
        ...get(X), ...get(TT), ...get(XS), ...i32Mul, ...i32Add, ...set(XB),
        ...vZero, ...set(ACC),
        ...i32c(0), ...set(B),
        ...whileLt(get(B), get(NB), [...blk, ...inc(BP, wBytes), ...inc(XB, xBytes), ...inc(B, 1)]),
        ...get(Y), ...get(TT), ...get(YS), ...i32Mul, ...i32Add, ...get(R), ...i32c(2), ...i32Shl, ...i32Add,
        ...hsum, ...f32Store,
        ...inc(TT, 1),
      ]),
      ...inc(R, 1),
    ]),
    0x0b,
  ];
}

/** Q8_0 × q8_0: 34-byte blocks (f16 d, 32 × int8); i16 products summed by i32x4.dot_i16x8_s. */
function q8_0Body(): number[] {
  const dots = [0, 1, 2, 3].flatMap((k) => [...get(IS), ...get(BP), ...load8x8S(2 + 8 * k), ...get(XB), ...load8x8S(4 + 8 * k), ...iDot, ...iAdd, ...set(IS)]);
  return kernel(34, Q8_0_BYTES, [...vZero, ...set(IS), ...dots, ...scaleInto(IS, 0)]);
}

/** Q4_0 / Q5_0 × q8_0: signed 4- or 5-bit values (lo: elements 0..15, hi: 16..31) against x's 32. */
function legacyBody(wBytes: number, lo: number[], hi: number[], setup: number[] = []): number[] {
  const blk = [...dot16(lo, 4), ...dot16(hi, 20), ...iAdd, ...set(IS), ...scaleInto(IS, 0)];
  return kernel(wBytes, Q8_0_BYTES, blk, setup);
}

/** Q4_0 (18 bytes: f16 d, 16 bytes of nibbles): q − 8, in i16 lanes (bytes 0..7 and 8..15 widened by their loads). */
function q4_0Body(): number[] {
  const [C0, C1] = [TMP[0], TMP[1]];
  const m8 = (nib: number[]) => [...nib, ...i32c(8), ...hSplat, ...hSub];
  return kernel(18, Q8_0_BYTES, [
    ...get(BP), ...load8x8U(2), ...set(C0), ...get(BP), ...load8x8U(10), ...set(C1),
    ...dot8(m8(lowNib(C0)), 4), ...dot8(m8(lowNib(C1)), 12), ...iAdd,
    ...dot8(m8(highNib(C0)), 20), ...iAdd, ...dot8(m8(highNib(C1)), 28), ...iAdd,
    ...set(IS), ...scaleInto(IS, 0),
  ]);
}

/**
 * Q5_0 (22 bytes: f16 d, 32 high bits, 16 bytes of nibbles): q = (nibble | bit << 4) − 16. The high
 * bits of elements 0..15 (16..31) are bits of bytes 0, 1 (2, 3) of the u32: each byte spread over 8
 * lanes by a swizzle, one bit kept per lane, lanes with it set become 0x10.
 */
function q5_0Body(): number[] {
  const [SW0, SW1, BITS] = [TMP[0], TMP[1], TMP[2]];
  const bitsOf = (sw: number) => [...get(BP), ...load32Splat(2), ...get(sw), ...bSwizzle, ...get(BITS), ...vAnd, ...get(BITS), ...bEq, ...splatB(0x10), ...vAnd];
  const raw = [...get(BP), ...vload(6)];
  const setup = [
    ...vConst([0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]), ...set(SW0),
    ...vConst([2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3]), ...set(SW1),
    ...vConst([1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128]), ...set(BITS),
  ];
  return legacyBody(
    22,
    [...raw, ...splatB(15), ...vAnd, ...bitsOf(SW0), ...vOr, ...splatB(16), ...bSub],
    [...raw, ...i32c(4), ...bShrU, ...bitsOf(SW1), ...vOr, ...splatB(16), ...bSub],
    setup,
  );
}

/**
 * Q4_K × q8_K (144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles):
 * Σ_s d·sc_s·(q·x)_s − dmin·m_s·(Σx)_s. The 12 bytes unpack (ggml's kmask trick) into the lanes of SC:
 * bytes 0..7 the scales, 8..15 the mins; the mins meet x's sums of 32 in one i32x4.dot_i16x8_s.
 */
function q4_KBody(): number[] {
  const SC = TMP[0];
  const [RAW0, RAW1] = [TMP[1], TMP[2]];
  const u = (l: number, sh: number, mask: number) => [...get(l), ...i32c(sh), ...i32ShrU, ...i32c(mask), ...i32And];
  const scales = [
    ...get(BP), ...i32Load(4), ...set(U0),
    ...get(BP), ...i32Load(8), ...set(U1),
    ...get(BP), ...i32Load(12), ...set(U2),
    ...get(U0), ...i32c(0x3f3f3f3f), ...i32And, ...iSplat,
    ...get(U2), ...i32c(0x0f0f0f0f), ...i32And, ...u(U0, 6, 0x03030303), ...i32c(4), ...i32Shl, ...i32Or, ...iReplace(1),
    ...get(U1), ...i32c(0x3f3f3f3f), ...i32And, ...iReplace(2),
    ...u(U2, 4, 0x0f0f0f0f), ...u(U1, 6, 0x03030303), ...i32c(4), ...i32Shl, ...i32Or, ...iReplace(3),
    ...set(SC),
  ];
  // Sub-blocks 2j and 2j+1 are the low and high nibbles of bytes 32j..32j+31, read as four i16 vectors of 8.
  const C = [RAW0, RAW1, TMP[3], TMP[4]];
  const sub = (s: number) => {
    const j = s >> 1;
    const nib = s & 1 ? highNib : lowNib;
    const xo = 52 + 32 * s;
    return [
      ...(s & 1 ? [] : C.flatMap((c, i) => [...get(BP), ...load8x8U(16 + 32 * j + 8 * i), ...set(c)])),
      ...get(IACC),
      ...dot8(nib(C[0]), xo), ...dot8(nib(C[1]), xo + 8), ...iAdd, ...dot8(nib(C[2]), xo + 16), ...iAdd, ...dot8(nib(C[3]), xo + 24), ...iAdd,
      ...get(SC), ...bExtractU(s), ...iSplat, ...iMul, ...iAdd, ...set(IACC),
    ];
  };
  return kernel(144, Q8_K_BYTES, [
    ...scales,
    ...vZero, ...set(IACC),
    ...[0, 1, 2, 3, 4, 5, 6, 7].flatMap(sub),
    ...get(SC), ...hExtHighU, ...get(XB), ...vload(36), ...iDot, ...set(MACC),
    ...scaleInto(IACC, 0), ...scaleInto(MACC, 2, true),
  ]);
}

/**
 * Q6_K × q8_K (210 bytes: 128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales, f16 d): each
 * 16 values share a scale; q = (nibble | high << 4) − 32. Per half (128 values): ql bytes 0..63 and qh
 * bytes 0..31; value 16k + l of the half takes its nibble from ql[16(k mod 4) + l] (low for k < 4) and
 * its high bits from qh[16(k mod 2) + l] at bits 2·⌊k/2⌋.
 */
function q6_KBody(): number[] {
  const QL = [TMP[0], TMP[1], TMP[2], TMP[3]];
  const QH = [TMP[4], TMP[5]];
  const half = (h: number) => {
    const sub = (k: number) => {
      const lo = k < 4 ? [...get(QL[k]), ...splatB(15), ...vAnd] : [...get(QL[k - 4]), ...i32c(4), ...bShrU];
      const sh = [4, 4, 2, 2, 0, 0, -2, -2][k];
      const hi = [...get(QH[k & 1]), ...(sh > 0 ? [...i32c(sh), ...bShl] : sh < 0 ? [...i32c(-sh), ...bShrU] : []), ...splatB(0x30), ...vAnd];
      return [
        ...get(IACC),
        ...dot16([...lo, ...hi, ...vOr, ...splatB(32), ...bSub], 52 + 128 * h + 16 * k),
        ...get(BP), ...i32Load8S(192 + 8 * h + k), ...iSplat, ...iMul, ...iAdd, ...set(IACC),
      ];
    };
    return [
      ...[0, 1, 2, 3].flatMap((i) => [...get(BP), ...vload(64 * h + 16 * i), ...set(QL[i])]),
      ...[0, 1].flatMap((i) => [...get(BP), ...vload(128 + 32 * h + 16 * i), ...set(QH[i])]),
      ...[0, 1, 2, 3, 4, 5, 6, 7].flatMap(sub),
    ];
  };
  return kernel(210, Q8_K_BYTES, [...vZero, ...set(IACC), ...half(0), ...half(1), ...scaleInto(IACC, 208)]);
}

/** The kernels by export name, for ./wasm.ts's module (10 i32 parameters each). */
export const QDOT_KERNELS: Record<QdotFormat, { name: string; body: () => number[] }> = {
  Q8_0: { name: 'qdot_q8_0', body: q8_0Body },
  Q4_0: { name: 'qdot_q4_0', body: q4_0Body },
  Q5_0: { name: 'qdot_q5_0', body: q5_0Body },
  Q4_K: { name: 'qdot_q4_k', body: q4_KBody },
  Q6_K: { name: 'qdot_q6_k', body: q6_KBody },
};
