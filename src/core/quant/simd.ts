/**
 * The WebAssembly SIMD kernels for whole streams of values, the gguf target's hot loops: bf16 → F16,
 * bf16 → Q8_0, bf16 → f32, f16 → f32, an f16 copy, and f32 → Q8_0 / Q4_0 / Q5_0 / Q4_1 / Q5_1 / F16 / BF16
 * (what quantize() runs for those types). Each gives the bytes of its JS transcription (bf16.ts, legacy.ts), which
 * test/gguf-encode.test.ts checks it against, on every bf16/f16 value and on wild f32 inputs:
 *  - F16 from bf16: exponent rebias for f16 normals; |x| >= 65536 → Inf; below the f16 normal range
 *    nearest-even(|x| * 2^24) (exact scaling; f32x4.nearest is IEEE roundTiesToEven, and a code of
 *    1024 is the smallest normal's encoding);
 *  - Q8_0: amax is an integer max of the bits without sign; roundf(|x| * id) is trunc plus
 *    (frac >= 0.5), exact since frac = v - trunc(v) is; a non-finite |x| * id (tiny subnormal d)
 *    gives code 0, as the JS and C paths do. From bf16, d and id come from bf16.ts's per-amax tables.
 * Every kernel reports an Inf or NaN input (exponent all ones) through its return value; what it
 * wrote is then unspecified (the f32 quantizers' callers then take the JS path, which follows C).
 * Arrays in the module's own (shared) memory, the arena, are used in place; others are copied
 * through the scratch area of a second instance on a private memory. The module is assembled here byte by byte, like kwasm.ts.
 */
import { F32, I32, section, str, uleb, V128, vec } from '../util/wasm-asm.js';
import {
  bBitmask, bNarrowS, bNarrowU, brIf, bShl, bSplat, f32c, f32Mul, fAbs, fAdd, fEq, fFromI32, fGe, fLt, fMul, fNearest, fPmax, fPmin, fSplat, fSub,
  fTrunc, get, hAllTrue, hGeU, hMaxU, hNarrowS, hNarrowU, hShl, hShrS, hSplat, hSub, i32Add, i32And, i32c, i32LtS, i32Mul, i32Or,
  i32Shl, iAdd, iBitmask, iEq, iExtHighU, iExtLowU, ifElse, ifThen, iGeS, iLtS, iMaxS, iMinS, iShl, iShrS, iSplat, iSub,
  iTruncSat, loop, set, simd, tee, vAnd, vAnyTrue, vBitselect, vload, vOr, vstore, vXor, vZero,
} from '../util/wasm-ops.js';

// Memory map (byte offsets). Tables: Q8_0's f16 d and f32 id per 15-bit amax.
const D_TAB = 0; // u16[32768]
const ID_TAB = 0x10000; // f32[32768]
/** Scratch for inputs and outputs that live elsewhere (copied through, SLICE values at a time). */
const IN = 0x30000;
const SLICE = 1 << 16;
const OUT = IN + SLICE * 2;
/** The arena: buffers lent to one caller at a time (see SimdKernels.acquireArena), used in place. */
const ARENA = OUT + SLICE * 2;
export const ARENA_SLOTS = 7;
export const ARENA_SLOT_BYTES = 16 << 20;
const PAGES = (ARENA + ARENA_SLOTS * ARENA_SLOT_BYTES) / 0x10000;

const i16x8 = (v: number) => [...i32c(v), ...hSplat];
const f32x4 = (v: number) => [...f32c(v), ...fSplat];
/** Byte shuffle of a vector with itself: lane i takes byte perm[i]. */
const shuffleSelf = (x: number, perm: number[]) => [...get(x), ...get(x), ...simd(0x0d, ...perm)];
const locals = (decl: [number, number][]) => vec(decl.map(([n, t]) => [...uleb(n), t]));

/** The f32 bits of each u16 lane of `mag` (low or high half): mag << 16 as i32x4. */
const widen = (mag: number, high: boolean) => [...get(mag), ...(high ? iExtHighU : iExtLowU), ...i32c(16), ...iShl];

/**
 * f16(in, out, nVec) -> bad: converts nVec vectors of 8 bf16 values at `in` to f16 bits at `out`;
 * bad != 0 if any input was Inf or NaN.
 */
function f16Body(): number[] {
  const [SRC, DST, NV, P, END] = [0, 1, 2, 3, 4];
  const [V, MAG, R, BAD, NORM] = [5, 6, 7, 8, 9];
  const small = (high: boolean) => [...widen(MAG, high), ...f32x4(2 ** 24), ...fMul, ...fNearest, ...iTruncSat];
  const body = [
    ...get(NV), ...i32c(16), ...i32Mul, ...set(END),
    ...loop([
      ...get(SRC), ...get(P), ...i32Add, ...vload(0), ...tee(V), ...i16x8(0x7fff), ...vAnd, ...set(MAG),
      ...get(BAD), ...get(MAG), ...i16x8(0x7f80), ...hGeU, ...vOr, ...set(BAD),
      // f16 normals: rebias the exponent; from 2^16 up: Inf
      ...i16x8(0x7c00),
      ...get(MAG), ...i16x8(0x3800), ...hSub, ...i32c(3), ...hShl,
      ...get(MAG), ...i16x8(0x4780), ...hGeU, ...vBitselect, ...set(R),
      // below 2^-14 (rare in weights, so only when some lane needs it): the subnormal code (or 0,
      // or 1024 = the smallest normal's encoding)
      ...get(MAG), ...i16x8(0x3880), ...hGeU, ...tee(NORM), ...hAllTrue,
      ...ifElse(V128, [...get(R)], [
        ...get(R), ...small(false), ...small(true), ...hNarrowS, ...get(NORM), ...vBitselect,
      ]),
      ...set(R),
      ...get(DST), ...get(P), ...i32Add, ...get(R),
      ...get(V), ...i16x8(0x8000), ...vAnd, ...vOr,
      ...vstore(0),
      ...get(P), ...i32c(16), ...i32Add, ...tee(P), ...get(END), ...i32LtS, ...brIf(0),
    ]),
    ...get(BAD), ...vAnyTrue,
  ];
  return [...locals([[2, I32], [5, V128]]), ...body, 0x0b]; // after the 3 params
}

/**
 * f32(in, out, nVec) -> bad: decodes nVec vectors of 8 bf16 values at `in` to f32 at `out` (x << 16);
 * bad != 0 if any input was Inf or NaN.
 */
function f32Body(): number[] {
  const [SRC, DST, NV, P, END] = [0, 1, 2, 3, 4];
  const [V, BAD, Q] = [5, 6, 7];
  const body = [
    ...get(NV), ...i32c(16), ...i32Mul, ...set(END),
    ...loop([
      ...get(SRC), ...get(P), ...i32Add, ...vload(0), ...set(V),
      ...get(BAD), ...get(V), ...i16x8(0x7fff), ...vAnd, ...i16x8(0x7f80), ...hGeU, ...vOr, ...set(BAD),
      ...get(DST), ...get(P), ...get(P), ...i32Add, ...i32Add, ...tee(Q),
      ...widen(V, false), ...vstore(0),
      ...get(Q), ...widen(V, true), ...vstore(16),
      ...get(P), ...i32c(16), ...i32Add, ...tee(P), ...get(END), ...i32LtS, ...brIf(0),
    ]),
    ...get(BAD), ...vAnyTrue,
  ];
  return [...locals([[2, I32], [2, V128], [1, I32]]), ...body, 0x0b];
}

/** h2h(in, out, nVec) -> bad: copies nVec vectors of 8 f16 values; bad != 0 if any was Inf or NaN. */
function h2hBody(): number[] {
  const [SRC, DST, NV, P, END] = [0, 1, 2, 3, 4];
  const [V, BAD] = [5, 6];
  const body = [
    ...get(NV), ...i32c(16), ...i32Mul, ...set(END),
    ...loop([
      ...get(SRC), ...get(P), ...i32Add, ...vload(0), ...set(V),
      ...get(BAD), ...get(V), ...i16x8(0x7fff), ...vAnd, ...i16x8(0x7c00), ...hGeU, ...vOr, ...set(BAD),
      ...get(DST), ...get(P), ...i32Add, ...get(V), ...vstore(0),
      ...get(P), ...i32c(16), ...i32Add, ...tee(P), ...get(END), ...i32LtS, ...brIf(0),
    ]),
    ...get(BAD), ...vAnyTrue,
  ];
  return [...locals([[2, I32], [2, V128]]), ...body, 0x0b];
}

/**
 * h2f(in, out, nVec) -> bad: decodes nVec vectors of 8 f16 values at `in` to f32 at `out`, exactly:
 * normals by rebiasing the exponent, subnormals as code * 2^-24 (exact); bad != 0 if any input was
 * Inf or NaN.
 */
function h2fBody(): number[] {
  const [SRC, DST, NV, P, END, Q] = [0, 1, 2, 3, 4, 5];
  const [V, MAG, BAD] = [6, 7, 8];
  /** One half of the lanes as f32 bits: (mag << 13) + (112 << 23) for normals, else mag * 2^-24. */
  const half = (high: boolean) => [
    ...get(MAG), ...(high ? iExtHighU : iExtLowU), ...set(W),
    ...get(W), ...i32c(13), ...iShl, ...i32c(112 << 23), ...iSplat, ...iAdd,
    ...get(W), ...fFromI32, ...f32x4(2 ** -24), ...fMul,
    ...get(W), ...i32c(0x400), ...iSplat, ...iGeS, ...vBitselect,
    ...get(V), ...(high ? iExtHighU : iExtLowU), ...i32c(0x8000), ...iSplat, ...vAnd, ...i32c(16), ...iShl, ...vOr,
  ];
  const W = 9;
  const body = [
    ...get(NV), ...i32c(16), ...i32Mul, ...set(END),
    ...loop([
      ...get(SRC), ...get(P), ...i32Add, ...vload(0), ...tee(V), ...i16x8(0x7fff), ...vAnd, ...set(MAG),
      ...get(BAD), ...get(MAG), ...i16x8(0x7c00), ...hGeU, ...vOr, ...set(BAD),
      ...get(DST), ...get(P), ...get(P), ...i32Add, ...i32Add, ...tee(Q),
      ...half(false), ...vstore(0),
      ...get(Q), ...half(true), ...vstore(16),
      ...get(P), ...i32c(16), ...i32Add, ...tee(P), ...get(END), ...i32LtS, ...brIf(0),
    ]),
    ...get(BAD), ...vAnyTrue,
  ];
  return [...locals([[3, I32], [4, V128]]), ...body, 0x0b];
}

/**
 * The bits of max |x| over the 32 floats at local `p` (finite non-negative floats order like their
 * bits, so an integer max is exact), left as an i32, and stored in i32 local `a`; v128 local `bad`
 * gets all ones when a lane held Inf or NaN (the max then is >= 0x7f800000: Inf's bits, or a NaN's).
 * Uses v128 local `m`; `abs` holds 0x7fffffff in every lane.
 */
function absMaxBits(p: number, abs: number, m: number, a: number, bad: number): number[] {
  return [
    ...get(p), ...vload(0), ...get(abs), ...vAnd, ...set(m),
    ...[16, 32, 48, 64, 80, 96, 112].flatMap((off) => [
      ...get(p), ...vload(off), ...get(abs), ...vAnd, ...get(m), ...iMaxS, ...set(m),
    ]),
    ...shuffleSelf(m, [8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7]), ...get(m), ...iMaxS, ...set(m),
    ...shuffleSelf(m, [4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3]), ...get(m), ...iMaxS,
    ...simd(0x1b, 0), ...set(a), // i32x4.extract_lane 0
    ...get(bad), ...get(a), ...i32c(0x7f800000), ...[0x4f], ...iSplat, ...vOr, ...set(bad), // i32.ge_u: 0 or 1
    ...get(a),
  ];
}

/**
 * The f16 bits of the f32 in local `d` (GGML_FP32_TO_FP16: round to nearest even), using i32 local
 * `a`: the integer rebias for f16 normals, nearest(|d| * 2^24) below them (subnormals, or 1024: the
 * smallest normal), Inf from 65520 up; d's sign on top. Leaves an i32.
 */
function f16Of(d: number, a: number): number[] {
  const select = [0x1b];
  const [i32ShrU, i32Sub, i32GeU, i32LtU] = [[0x76], [0x6b], [0x4f], [0x49]];
  return [
    ...get(d), ...[0xbc], ...i32c(0x7fffffff), ...i32And, ...set(a), // |d|'s bits
    ...get(a), ...i32c(0x38000000), ...i32Sub, ...i32c(0xfff), ...i32Add,
    ...get(a), ...i32c(13), ...i32ShrU, ...i32c(1), ...i32And, ...i32Add, ...i32c(13), ...i32ShrU, // normal
    ...get(d), ...[0x8b], ...f32c(2 ** 24), ...[0x94], ...[0x90], ...[0xfc, 0x00], // below: nearest(|d| * 2^24), saturating
    ...get(a), ...i32c(0x38800000), ...i32GeU, ...select,
    ...i32c(0x7c00), ...get(a), ...i32c(0x477ff000), ...i32LtU, ...select, // from 65520 up: Inf
    ...get(d), ...[0xbc], ...i32c(16), ...i32ShrU, ...i32c(0x8000), ...i32And, ...i32Or, // sign
  ];
}

const iShrU = simd(0xad); // i32x4.shr_u
const fNe = simd(0x42);
const iGtS = simd(0x3b);
const f32Le = [0x5f];
/** The block type of an if/else that leaves nothing. */
const EMPTY = 0x40;
const i32x4 = (v: number) => [...i32c(v), ...iSplat];

/**
 * half(in, out, nVec): f32 → F16 or BF16 bits for nVec vectors of 8 floats, every input handled
 * (no fallback), as src/core/util/half.ts's encodeF16 / encodeBf16 (GGML_FP32_TO_FP16,
 * ggml_compute_fp32_to_bf16):
 *  - BF16: (b + 0x7fff + ((b >> 16) & 1)) >> 16 (round to nearest even), NaN → (b >> 16) | 64;
 *  - F16 of a = |x|'s bits: the integer rebias for f16 normals, nearest(|x| * 2^24) below them
 *    (subnormals, zero, or 1024: the smallest normal), Inf from 65520 up, NaN → 0x7e00; sign on top.
 */
function halfBody(kind: 'F16' | 'BF16'): number[] {
  const [SRC, DST, NV, IP, OP, END] = [0, 1, 2, 3, 4, 5];
  const [V, A] = [6, 7];
  const bf16 = [
    ...get(V), ...i32c(16), ...iShrU, ...i32x4(64), ...vOr, // NaN: quieted top half
    ...get(V), ...i32x4(0x7fff), ...iAdd, ...get(V), ...i32c(16), ...iShrU, ...i32x4(1), ...vAnd, ...iAdd, ...i32c(16), ...iShrU,
    ...get(V), ...i32x4(0x7fffffff), ...vAnd, ...i32x4(0x7f800000), ...iGtS,
    ...vBitselect,
  ];
  const f16 = [
    ...get(V), ...i32x4(0x7fffffff), ...vAnd, ...set(A),
    // below the f16 normals: nearest(|x| * 2^24), exact; else the rebias
    ...get(A), ...f32x4(2 ** 24), ...fMul, ...fNearest, ...iTruncSat,
    ...get(A), ...i32x4(0x38000000), ...iSub, ...i32x4(0xfff), ...iAdd, ...get(A), ...i32c(13), ...iShrU, ...i32x4(1), ...vAnd, ...iAdd, ...i32c(13), ...iShrU,
    ...get(A), ...i32x4(0x38800000), ...iLtS,
    ...vBitselect,
    // from 65520 up: Inf, or NaN
    ...i32x4(0x7e00), ...i32x4(0x7c00), ...get(A), ...i32x4(0x7f800000), ...iGtS, ...vBitselect,
    ...get(A), ...i32x4(0x477ff000), ...iLtS, ...vBitselect,
    ...get(V), ...i32c(16), ...iShrU, ...i32x4(0x8000), ...vAnd, ...vOr,
  ];
  const lanes = (off: number) => [...get(SRC), ...get(IP), ...i32Add, ...vload(off), ...set(V), ...(kind === 'F16' ? f16 : bf16)];
  const body = [
    ...get(NV), ...i32c(32), ...i32Mul, ...set(END),
    ...get(NV), ...ifThen(loop([
      ...get(DST), ...get(OP), ...i32Add,
      ...lanes(0), ...lanes(16), ...hNarrowU, ...vstore(0),
      ...get(OP), ...i32c(16), ...i32Add, ...set(OP),
      ...get(IP), ...i32c(32), ...i32Add, ...tee(IP), ...get(END), ...i32LtS, ...brIf(0),
    ])),
    ...i32c(0),
  ];
  return [...locals([[3, I32], [2, V128]]), ...body, 0x0b];
}

/**
 * q8f(in, out, nBlocks) -> bad: Q8_0 from f32 (quantize_row_q8_0_ref): amax as an integer max of
 * |x|'s bits, d = amax / 127 and id = d ? 1 / d : 0 in f32, d stored as f16 (round to nearest even:
 * the integer rebias for f16 normals, nearest(d * 2^24) below, Inf above), codes as in q8. bad != 0
 * if any input was Inf or NaN (the caller then takes the JS path, which follows C's NaN order).
 */
function q8fBody(): number[] {
  const [SRC, DST, NB, B, P, Q, A, H] = [0, 1, 2, 3, 4, 5, 6, 7];
  const [M, ID, BAD, T, PROD, S, X] = [8, 9, 10, 11, 12, 13, 14];
  const [D] = [15]; // f32
  const Q0 = 16; // 4 v128: the codes of vector pairs, as i16x8
  const ABS = 20;
  const select = [0x1b];
  /** roundf(|x| * id) with x's sign, for the 4 floats at P + off, as i32x4 (0 where not finite). */
  const code = (off: number) => [
    ...get(P), ...vload(off), ...tee(X), ...fAbs, ...get(ID), ...fMul, ...tee(PROD), ...fTrunc, ...tee(T),
    ...f32x4(1), ...get(PROD), ...get(T), ...fSub, ...f32x4(0.5), ...fGe, ...vAnd, ...fAdd,
    ...get(PROD), ...f32x4(128), ...fLt, ...vAnd,
    ...iTruncSat,
    ...get(X), ...i32c(31), ...iShrS, ...tee(S), ...vXor, ...get(S), ...iSub,
  ];
  const body = [
    ...i32x4(0x7fffffff), ...set(ABS),
    ...loop([
      ...get(B), ...i32c(128), ...i32Mul, ...get(SRC), ...i32Add, ...set(P),
      ...get(B), ...i32c(34), ...i32Mul, ...get(DST), ...i32Add, ...set(Q),
      ...absMaxBits(P, ABS, M, A, BAD),
      ...[0xbe], // f32.reinterpret_i32
      ...f32c(127), ...[0x95], ...set(D), // d = amax / 127
      // id = d ? 1 / d : 0
      ...f32c(1), ...get(D), ...[0x95], ...f32c(0), ...get(D), ...f32c(0), ...[0x5c], ...select, ...fSplat, ...set(ID),
      ...f16Of(D, A), ...set(H),
      ...get(Q), ...get(H), ...[0x3b, 0, 0], // i32.store16 (unaligned)
      ...[0, 1, 2, 3].flatMap((k) => [...code(32 * k), ...code(32 * k + 16), ...hNarrowS, ...set(Q0 + k)]),
      ...get(Q), ...get(Q0), ...get(Q0 + 1), ...bNarrowS, ...vstore(2),
      ...get(Q), ...get(Q0 + 2), ...get(Q0 + 3), ...bNarrowS, ...vstore(18),
      ...get(B), ...i32c(1), ...i32Add, ...tee(B), ...get(NB), ...i32LtS, ...brIf(0),
    ]),
    ...get(BAD), ...vAnyTrue,
  ];
  return [...locals([[5, I32], [7, V128], [1, F32], [5, V128]]), ...body, 0x0b];
}

/** The four other 32-value block types: where their fields sit and how codes are made. */
const LEGACY = {
  Q4_0: { bytes: 18, qs: 2, qh: -1, m: -1, nmax: 15, clamp: true },
  Q5_0: { bytes: 22, qs: 6, qh: 2, m: -1, nmax: 31, clamp: true },
  Q4_1: { bytes: 20, qs: 4, qh: -1, m: 2, nmax: 15, clamp: true },
  Q5_1: { bytes: 24, qs: 8, qh: 4, m: 2, nmax: 31, clamp: false },
} as const;
export type LegacyType = keyof typeof LEGACY;

/**
 * (in, out, nBlocks) -> bad: Q4_0 / Q5_0 / Q4_1 / Q5_1 from f32, as quantize_row_*_ref:
 *  - _0: max = the first x with the largest |x| (+0 for an all-zero block), d = max / -(nmax+1) / 2,
 *    codes (int8_t)(x * id + (nmax+1)/2 + 0.5f);
 *  - _1: min and max as C's sequential `<` / `>` find them (so the first of +0 and -0 when the extreme
 *    is zero), d = (max - min) / nmax, m = min, codes (int8_t)((x - min) * id + 0.5f);
 *  - id = d ? 1 / d : 0; (int8_t) as x86 converts (low byte of the int32; 0 when out of its range);
 *    MIN(nmax, code) except Q5_1 (ggml does not clamp it); d and m stored as f16;
 *  - packing: low nibbles x[j] | x[j + 16] << 4, and for Q5 the 5th bits in qh (bit j: x[j]).
 * bad != 0 if any input was Inf or NaN (the caller then takes the JS path, which follows C).
 */
function legacyBody(type: LegacyType): number[] {
  const t = LEGACY[type];
  const offsetType = t.m >= 0;
  const [SRC, DST, NB, B, P, Q, A, MASK] = [0, 1, 2, 3, 4, 5, 6, 7];
  const [M, ID, BAD, X, LO, HI, BIAS, MINV, CAP, MAGIC, ABS, C16, ABOVE] = [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20];
  const [D, MAX, MIN, IDS] = [21, 22, 23, 24]; // f32
  /** Q4_1 checks for Inf and NaN along its codes (fast path) or in slowCodes, Q5_1 here; the _0 types by amax's bits. */
  const fast = t.qh < 0;
  const select = [0x1b];
  const i32Ctz = [0x68];
  const [f32Sub, f32Div, f32Ne, f32Eq] = [[0x93], [0x95], [0x5c], [0x5b]];
  /** (int8_t)(v) for i32x4 from the f32x4 `v` in X, then MIN(nmax, ·). */
  const truncI8 = [
    ...get(X), ...iTruncSat, ...get(X), ...fAbs, ...f32x4(2 ** 31), ...fLt, ...vAnd,
    ...i32c(24), ...iShl, ...i32c(24), ...iShrS,
    ...(t.clamp ? [...i32c(t.nmax), ...iSplat, ...iMinS] : []),
  ];
  /** The code of the 4 floats at P + off, as i32x4. */
  const code = (off: number) => [
    ...get(P), ...vload(off), ...(offsetType ? [...get(MIN), ...fSplat, ...fSub] : []),
    ...get(ID), ...fMul, ...get(BIAS), ...fAdd, ...set(X), ...truncI8,
  ];
  /** 16 codes (x[off/4 ..] in order) as i8x16 (all within int8: no saturation). */
  const codes16 = (off: number) => [
    ...code(off), ...code(off + 16), ...hNarrowS, ...code(off + 32), ...code(off + 48), ...hNarrowS, ...bNarrowS,
  ];
  /**
   * The fast path of the 4-bit types, for a block whose every v = x·id + bias (or (x - min)·id + 0.5)
   * is known to lie in [0, 17): (int8_t)v is then trunc(v), so a code is MIN(15, trunc(v)) as a
   * float, and the packed byte code(x[j]) + 16·code(x[j + 16]) is exact in f32 (<= 255); adding 2^23
   * leaves it in the low mantissa bits.
   */
  const codeFast = (off: number) => [
    ...get(P), ...vload(off), ...(offsetType ? [...get(MINV), ...fSub] : []),
    ...get(ID), ...fMul, ...get(BIAS), ...fAdd, ...fTrunc, ...get(CAP), ...fPmin,
  ];
  const byteFast = (k: number) => [
    ...codeFast(64 + 16 * k), ...get(C16), ...fMul, ...codeFast(16 * k), ...fAdd,
    ...get(MAGIC), ...fAdd, ...get(MAGIC), ...iSub, ...set(k === 0 ? LO : k === 1 ? HI : k === 2 ? X : M),
  ];
  /**
   * The 16 packed bytes; an Inf or NaN input the min/max missed (pseudo-min/max pass NaNs by)
   * makes its byte NaN, whose bits minus 2^23's are far above 255: that marks the block bad.
   */
  const packedFast = [
    ...[0, 1, 2, 3].flatMap(byteFast),
    ...(offsetType
      ? [...get(LO), ...get(HI), ...vOr, ...get(X), ...vOr, ...get(M), ...vOr, ...get(ABOVE), ...vAnd, ...get(BAD), ...vOr, ...set(BAD)]
      : []),
    ...get(Q), ...get(LO), ...get(HI), ...hNarrowU, ...get(X), ...get(M), ...hNarrowU, ...bNarrowU, ...vstore(t.qs),
  ];
  /** BAD gets all ones in lanes where x - x is NaN (x is Inf or NaN). */
  const finiteCheck = [
    ...get(P), ...vload(0), ...tee(X), ...get(X), ...fSub, ...set(M),
    ...[16, 32, 48, 64, 80, 96, 112].flatMap((off) => [...get(P), ...vload(off), ...tee(X), ...get(X), ...fSub, ...get(M), ...fAdd, ...set(M)]),
    ...get(M), ...get(M), ...fNe, ...get(BAD), ...vOr, ...set(BAD),
  ];
  /**
   * Whether the block may take the fast path: every |x·id| (or (x - min)·id) is at most
   * fl(amax·|id|) (or fl((max - min)·id)), as rounding is monotonic, so that bound (false when NaN)
   * keeps v in [0, 17).
   */
  const fastOk = offsetType
    ? [...get(MAX), ...get(MIN), ...f32Sub, ...get(IDS), ...f32Mul, ...f32c(16), ...f32Le]
    : [...get(MAX), ...get(IDS), ...f32Mul, ...[0x8b], ...f32c(8.25), ...f32Le]; // f32.abs
  /** The first x equal to the f32 in `local` (as a float: +0 == -0), loaded into it. */
  const firstEqual = (local: number, eq: (k: number) => number[]) => [
    ...i32c(0), ...set(MASK),
    ...[0, 1, 2, 3, 4, 5, 6, 7].flatMap((k) => [...get(MASK), ...eq(k), ...iBitmask, ...i32c(4 * k), ...i32Shl, ...i32Or, ...set(MASK)]),
    ...get(P), ...get(MASK), ...i32Ctz, ...i32c(2), ...i32Shl, ...i32Add, ...[0x2a, 0, 0], ...set(local), // f32.load
  ];
  /** Horizontal pseudo-min or -max (f32x4.pmin 0xea / pmax 0xeb) of the v128 local `v`, into f32 `local`. */
  const reduce = (op: number, v: number, local: number) => [
    ...shuffleSelf(v, [8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7]), ...get(v), ...simd(op), ...set(v),
    ...shuffleSelf(v, [4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3]), ...get(v), ...simd(op),
    ...simd(0x1f, 0), ...set(local), // f32x4.extract_lane 0
    // a zero extreme: C keeps the first zero it meets, +0 or -0
    ...get(local), ...f32c(0), ...f32Eq,
    ...ifThen(firstEqual(local, (k) => [...get(P), ...vload(16 * k), ...vZero, ...fEq])),
  ];
  const scales = offsetType
    ? [
      // min and max in one pass over the block (LO and HI are free until the codes), with the
      // pseudo-min/max (b < a ? b : a: one instruction each)
      ...get(P), ...vload(0), ...tee(LO), ...set(HI),
      ...[16, 32, 48, 64, 80, 96, 112].flatMap((off) => [
        ...get(P), ...vload(off), ...set(X),
        ...get(LO), ...get(X), ...fPmin, ...set(LO),
        ...get(HI), ...get(X), ...fPmax, ...set(HI),
      ]),
      ...(fast ? [] : finiteCheck),
      ...reduce(0xea, LO, MIN), ...reduce(0xeb, HI, MAX),
      ...get(MAX), ...get(MIN), ...f32Sub, ...f32c(t.nmax), ...f32Div, ...set(D),
    ]
    : [
      ...absMaxBits(P, ABS, M, A, BAD), ...iSplat, ...set(M),
      // max = the first x reaching amax, or +0 when the block is all zeros
      ...firstEqual(MAX, (k) => [...get(P), ...vload(16 * k), ...i32c(0x7fffffff), ...iSplat, ...vAnd, ...get(M), ...iEq]),
      ...get(MAX), ...f32c(0), ...get(A), ...select, ...set(MAX),
      ...get(MAX), ...f32c(-(t.nmax + 1) / 2), ...f32Div, ...set(D),
    ];
  const slowCodes = [
    ...(fast && offsetType ? finiteCheck : []),
    ...codes16(0), ...set(LO), ...codes16(64), ...set(HI),
    ...get(Q), ...get(LO), ...(t.qh >= 0 ? [...i32c(0x0f), ...bSplat, ...vAnd] : []), ...get(HI), ...i32c(4), ...bShl, ...vOr, ...vstore(t.qs),
  ];
  const body = [
    ...f32x4(offsetType ? 0.5 : (t.nmax + 1) / 2 + 0.5), ...set(BIAS),
    ...f32x4(t.nmax), ...set(CAP), ...f32x4(2 ** 23), ...set(MAGIC), ...i32x4(0x7fffffff), ...set(ABS),
    ...f32x4(16), ...set(C16), ...i32x4(~0xff), ...set(ABOVE),
    ...loop([
      ...get(B), ...i32c(128), ...i32Mul, ...get(SRC), ...i32Add, ...set(P),
      ...get(B), ...i32c(t.bytes), ...i32Mul, ...get(DST), ...i32Add, ...set(Q),
      ...scales,
      ...f32c(1), ...get(D), ...f32Div, ...f32c(0), ...get(D), ...f32c(0), ...f32Ne, ...select, ...tee(IDS), ...fSplat, ...set(ID),
      ...get(Q), ...f16Of(D, A), ...[0x3b, 0, 0], // d (i32.store16, unaligned)
      ...(offsetType ? [...get(Q), ...f16Of(MIN, A), ...[0x3b, 0, t.m], ...get(MIN), ...fSplat, ...set(MINV)] : []), // m
      ...(fast ? [...fastOk, ...ifElse(EMPTY, packedFast, slowCodes)] : slowCodes),
      ...(t.qh >= 0
        ? [
          ...get(Q),
          ...get(LO), ...i32c(3), ...bShl, ...bBitmask,
          ...get(HI), ...i32c(3), ...bShl, ...bBitmask, ...i32c(16), ...i32Shl, ...i32Or,
          ...[0x36, 0, t.qh], // i32.store (unaligned)
        ]
        : []),
      ...get(B), ...i32c(1), ...i32Add, ...tee(B), ...get(NB), ...i32LtS, ...brIf(0),
    ]),
    ...get(BAD), ...vAnyTrue,
  ];
  return [...locals([[5, I32], [13, V128], [4, F32]]), ...body, 0x0b];
}

/**
 * q8(in, out, nBlocks) -> bad: converts nBlocks blocks of 32 bf16 values at `in` to Q8_0 blocks
 * (34 bytes) at `out`; bad != 0 if any input was Inf or NaN.
 */
function q8Body(): number[] {
  const [SRC, DST, NB, B, P, Q, AMAX, BAD] = [0, 1, 2, 3, 4, 5, 6, 7];
  const [V0, M0, M, ID, Q0, T, PROD, S] = [8, 12, 16, 17, 18, 22, 23, 24]; // V0..V3, M0..M3, Q0..Q3
  /** roundf(|x| * id) of one half of MAG's lanes, as i32x4 (0 where the product is not finite). */
  const code = (mag: number, high: boolean, t: number, prod: number) => [
    ...widen(mag, high), ...get(ID), ...fMul, ...tee(prod), ...fTrunc, ...tee(t),
    ...f32x4(1), ...get(prod), ...get(t), ...fSub, ...f32x4(0.5), ...fGe, ...vAnd, ...fAdd,
    ...get(prod), ...f32x4(128), ...fLt, ...vAnd,
    ...iTruncSat,
  ];
  const perVector = (k: number) => [
    // codes of 8 values with the sign of x applied: (q ^ s) - s, s = x >> 15 (0 or -1)
    ...code(M0 + k, false, T, PROD), ...code(M0 + k, true, T, PROD), ...hNarrowS,
    ...get(V0 + k), ...i32c(15), ...hShrS, ...tee(S), ...vXor, ...get(S), ...hSub, ...set(Q0 + k),
  ];
  const body = [
    ...loop([
      ...get(B), ...i32c(64), ...i32Mul, ...get(SRC), ...i32Add, ...set(P),
      ...get(B), ...i32c(34), ...i32Mul, ...get(DST), ...i32Add, ...set(Q),
      ...[0, 1, 2, 3].flatMap((k) => [
        ...get(P), ...vload(16 * k), ...tee(V0 + k), ...i16x8(0x7fff), ...vAnd, ...set(M0 + k),
      ]),
      ...get(M0), ...get(M0 + 1), ...hMaxU, ...get(M0 + 2), ...get(M0 + 3), ...hMaxU, ...hMaxU, ...set(M),
      ...shuffleSelf(M, [8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7]), ...get(M), ...hMaxU, ...set(M),
      ...shuffleSelf(M, [4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3]), ...get(M), ...hMaxU, ...set(M),
      ...shuffleSelf(M, [2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1]), ...get(M), ...hMaxU,
      ...simd(0x19, 0), ...set(AMAX), // i16x8.extract_lane_u 0
      // an Inf or NaN makes amax >= 0x7f80: 0x80 more carries into bit 15
      ...get(BAD), ...get(AMAX), ...i32c(0x80), ...i32Add, ...i32c(0x8000), ...i32And, ...i32Or, ...set(BAD),
      ...get(Q), ...get(AMAX), ...i32c(1), ...i32Shl, ...[0x2f, 1, ...uleb(D_TAB)], ...[0x3b, 1, 0], // d
      ...get(AMAX), ...i32c(2), ...i32Shl, ...[0x2a, 2, ...uleb(ID_TAB)], ...fSplat, ...set(ID),
      ...[0, 1, 2, 3].flatMap(perVector),
      ...get(Q), ...get(Q0), ...get(Q0 + 1), ...bNarrowS, ...vstore(2),
      ...get(Q), ...get(Q0 + 2), ...get(Q0 + 3), ...bNarrowS, ...vstore(18),
      ...get(B), ...i32c(1), ...i32Add, ...tee(B), ...get(NB), ...i32LtS, ...brIf(0),
    ]),
    ...get(BAD),
  ];
  return [...locals([[5, I32], [17, V128]]), ...body, 0x0b];
}

/** The module for a memory of `pages`, shared or not (the flags of its memory import must match). */
function moduleBytes(shared: boolean, pages: number): Uint8Array<ArrayBuffer> {
  const type = [0x60, ...vec([[I32], [I32], [I32]]), ...vec([[I32]])];
  const types = section(1, vec([type]));
  const imports = section(2, vec([[...str('env'), ...str('memory'), 0x02, shared ? 0x03 : 0x01, ...uleb(pages), ...uleb(pages)]]));
  const bodies = {
    f16: f16Body(), q8: q8Body(), f32: f32Body(), h2f: h2fBody(), h2h: h2hBody(), q8f: q8fBody(),
    Q4_0: legacyBody('Q4_0'), Q5_0: legacyBody('Q5_0'), Q4_1: legacyBody('Q4_1'), Q5_1: legacyBody('Q5_1'),
    F16: halfBody('F16'), BF16: halfBody('BF16'),
  };
  const names = Object.keys(bodies);
  const funcs = section(3, vec(names.map(() => [0])));
  const exports = section(7, vec(names.map((name, i) => [...str(name), 0x00, i])));
  const code = section(10, vec(Object.values(bodies).map((b) => [...uleb(b.length), ...b])));
  return new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, ...types, ...imports, ...funcs, ...exports, ...code]);
}

export interface SimdKernels {
  /** bf16 bits → f16 bits; whether every input was finite. */
  toF16(src: Uint16Array, dst: Uint16Array): boolean;
  /** bf16 bits → Q8_0 blocks (src.length a multiple of 32); whether every input was finite. */
  toQ8_0(src: Uint16Array, y: Uint8Array): boolean;
  /** bf16 bits → f32 values; whether every input was finite. */
  toF32(src: Uint16Array, dst: Float32Array): boolean;
  /** f16 bits → f32 values (exact); whether every input was finite. */
  f16ToF32(src: Uint16Array, dst: Float32Array): boolean;
  /** f16 bits copied; whether every value was finite. */
  copyF16(src: Uint16Array, dst: Uint16Array): boolean;
  /** f32 → Q8_0 blocks (src.length a multiple of 32); false (output unspecified) if any input was Inf or NaN. */
  f32ToQ8_0(src: Float32Array, y: Uint8Array): boolean;
  /** f32 → Q4_0 / Q5_0 / Q4_1 / Q5_1 blocks, likewise. */
  f32ToLegacy(type: LegacyType, src: Float32Array, y: Uint8Array): boolean;
  /** f32 → F16 / BF16 bits (src.length a multiple of 8, y 2 bytes per value): every input, no fallback. */
  f32ToHalf(type: 'F16' | 'BF16', src: Float32Array, y: Uint8Array): void;
  /**
   * The arena, for one user at a time (null while another holds it): inputs and outputs in its
   * buffers are used in place, with no copy in or out; the memory is shared (a SharedArrayBuffer).
   */
  acquireArena(): Arena | null;
}

export interface Arena {
  /**
   * Buffer `slot` (< ARENA_SLOTS; the holder numbers its buffers), `bytes` long, or null if that is
   * more than ARENA_SLOT_BYTES. The same slot is the same memory until release().
   */
  buffer(slot: number, bytes: number): Uint8Array | null;
  release(): void;
}

/** Q8_0's scale tables, indexed by the 15-bit amax: d as f16 bits, id as float32. */
export interface Q8Tables {
  d: Uint16Array;
  id: Float32Array;
}

type Kernel = (src: number, dst: number, n: number) => number;

let KERNELS: SimdKernels | null | undefined;

/** The kernels, or null without WebAssembly SIMD. `tables` is read once, on the first call. */
export function instantiateSimdKernels(tables: () => Q8Tables): SimdKernels | null {
  if (KERNELS !== undefined) return KERNELS;
  KERNELS = null;
  try {
    const sharedBytes = moduleBytes(true, PAGES);
    if (typeof WebAssembly !== 'object' || !WebAssembly.validate(sharedBytes)) return null;
    const { d, id } = tables();
    const instance = (shared: boolean, pages: number) => {
      const memory = new WebAssembly.Memory({ initial: pages, maximum: pages, shared });
      const bytes = shared ? sharedBytes : moduleBytes(false, pages);
      const ex = new WebAssembly.Instance(new WebAssembly.Module(bytes), { env: { memory } }).exports;
      new Uint16Array(memory.buffer, D_TAB, 0x8000).set(d);
      new Float32Array(memory.buffer, ID_TAB, 0x8000).set(id);
      return { ex: ex as Record<string, Kernel>, buf: memory.buffer };
    };
    // Two instances of the module: one on a shared memory holding the arena (whose buffers can be
    // handed to a hashing worker without a copy), and one on a small private memory for inputs
    // copied through its scratch area (copies into a SharedArrayBuffer run at half memcpy's speed).
    const arena = instance(true, PAGES);
    const local = instance(false, ARENA / 0x10000);
    const buf = arena.buf;
    const scratchIn = new Uint8Array(local.buf, IN, SLICE * 2);
    const scratchOut = new Uint8Array(local.buf, OUT, SLICE * 2);
    const bytesOf = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    /**
     * Runs kernel `name` over `n` items (inBytes / outBytes each): in place when both arrays live in the
     * arena, else copied through the private instance's scratch area a slice at a time.
     */
    const run = (name: string, src: ArrayBufferView, dst: ArrayBufferView, n: number, inBytes: number, outBytes: number): number => {
      if (src.buffer === buf && dst.buffer === buf) return arena.ex[name](src.byteOffset, dst.byteOffset, n);
      const kernel = local.ex[name];
      const from = bytesOf(src);
      const to = bytesOf(dst);
      const per = (SLICE * 2) / Math.max(inBytes, outBytes);
      let bad = 0;
      for (let i = 0; i < n; i += per) {
        const k = Math.min(per, n - i);
        scratchIn.set(from.subarray(i * inBytes, (i + k) * inBytes));
        bad |= kernel(IN, OUT, k);
        to.set(scratchOut.subarray(0, k * outBytes), i * outBytes);
      }
      return bad;
    };
    /** A kernel over vectors of 8 values (`outSize` bytes each out): whole vectors, then the tail padded. */
    const vectors = (name: string, src: Uint16Array, dst: Uint16Array | Float32Array, outSize: number): boolean => {
      const whole = src.length & ~7;
      let bad = whole ? run(name, src.subarray(0, whole), dst.subarray(0, whole), whole >>> 3, 16, 8 * outSize) : 0;
      if (whole < src.length) {
        scratchIn.fill(0, 0, 16);
        scratchIn.set(bytesOf(src.subarray(whole)));
        bad |= local.ex[name](IN, OUT, 1);
        bytesOf(dst).set(scratchOut.subarray(0, (src.length - whole) * outSize), whole * outSize);
      }
      return bad === 0;
    };
    let arenaHeld = false;
    KERNELS = {
      toF16: (src, dst) => vectors('f16', src, dst, 2),
      toQ8_0: (src, y) => run('q8', src, y, src.length >>> 5, 64, 34) === 0,
      toF32: (src, dst) => vectors('f32', src, dst, 4),
      f16ToF32: (src, dst) => vectors('h2f', src, dst, 4),
      copyF16: (src, dst) => vectors('h2h', src, dst, 2),
      f32ToQ8_0: (src, y) => run('q8f', src, y, src.length >>> 5, 128, 34) === 0,
      f32ToLegacy: (type, src, y) => run(type, src, y, src.length >>> 5, 128, LEGACY[type].bytes) === 0,
      f32ToHalf: (type, src, y) => void run(type, src, y, src.length >>> 3, 32, 16),
      acquireArena() {
        if (arenaHeld) return null;
        arenaHeld = true;
        let held = true;
        return {
          buffer(slot, bytes) {
            if (!held) throw new Error('internal: arena buffer asked for after release');
            if (slot < 0 || slot >= ARENA_SLOTS || bytes > ARENA_SLOT_BYTES) return null;
            return new Uint8Array(buf, ARENA + slot * ARENA_SLOT_BYTES, bytes);
          },
          release() {
            if (held) arenaHeld = held = false;
          },
        };
      },
    };
  } catch {
    KERNELS = null;
  }
  return KERNELS;
}
