/**
 * The integer-activation kernels' x quantizers (./qdot.ts's layout) in WebAssembly SIMD, exports of
 * the matmul module (./wasm.ts). Scalar JS (now test/qdot-layout.ts, their oracle) spent ~15 ns a
 * value, 13% of a llama-100M Q8_0 decode token, all of it on the calling thread while a worker pool
 * waits. These write the same bytes as that JS for every input (ggml's quantize_row_q8_0_ref /
 * quantize_row_q8_K_ref; test/runtime-qact.test.ts compares them on random, tie, zero, subnormal,
 * huge, Inf and NaN inputs), so the kernels' results do not change.
 *
 * (x, out, nBlocks): nBlocks blocks of f32 at byte x (tokens back to back) into blocks at byte out.
 * - q8_0: amax = max |x| (NaN wins, as in Math.max), d = amax / 127, id = d > 0 ? 1 / d : 0 in f32,
 *   d stored f16-rounded (nearest even) as f32, codes roundf(x · id) (halves away from zero) wrapped
 *   to int8 as a JS Int8Array store wraps (0 for Inf / NaN); only subnormal d can make a code leave ±127.
 * - q8_K: max = the first x of the largest |x| (NaN skipped), iscale = −127 / max, codes
 *   min(127, nearest_int(iscale · x)) (ggml's magic-number rounding, which is its bit trick for every
 *   input; a NaN's code is its payload's low bits there, as here) wrapped to int8, the 16 sums of 16 and 8 of 32, d = 1 / iscale; an all-zero block is zeros.
 * Browser-safe.
 */
import { uleb } from '../../core/util/wasm-asm.js';
import {
  block, bNarrowU, brIf, f32Add, f32c, f32Div, f32Eq, f32Ge, f32Gt, f32Load, f32Lt, f32Max, f32Min, f32Ne, f32Neg, f32Reinterpret, f32Store, f32Sub, fAbs, fAdd, fExtract,
  fGe, fLt, fMul, fPmax, fPmin, fShuffle, fSplat, fSub, fTrunc, get, hNarrowU, hPairs, i32Add, i32And, i32c, i32LeS, i32LtS, i32Reinterpret, i32ShrU, i32Store16, iExtract, ifElse,
  iMaxS, iMinS, iPairs, iSplat, iSub, iTruncSat, loop, set, tee, vAnd, vload, vOr, vstore, vZero,
} from '../../core/util/wasm-ops.js';
import { Q8_0_BYTES, Q8_K_BYTES } from './qdot.js';

// Value types of locals and blocks.
const F32 = 0x7d;
const I32 = 0x7f;
const splatI = (v: number) => [...i32c(v), ...iSplat];
const splatF = (v: number) => [...f32c(v), ...fSplat];
const inc = (l: number, by: number) => [...get(l), ...i32c(by), ...i32Add, ...set(l)];
/** do { body } while (++B < N), skipped when N is 0. */
const blocks = (B: number, N: number, body: number[]) => block([
  ...get(N), ...i32c(0), ...i32LeS, ...brIf(0),
  ...loop([...body, ...get(B), ...i32c(1), ...i32Add, ...tee(B), ...get(N), ...i32LtS, ...brIf(0)]),
]);
const locals = (groups: [number, number][]) => [...uleb(groups.length), ...groups.flatMap(([n, t]) => [...uleb(n), t])];
/** The f32 lanes of vector local `v` folded by scalar op `fold`. */
const lanes = (v: number, fold: number[]) => [0, 1, 2, 3].flatMap((l) => [...get(v), ...fExtract(l), ...(l ? fold : [])]);
/**
 * i32x4 → the low byte of each lane (as a JS Int8Array store wraps), `valid` lanes only (others 0):
 * masked to 0..255, so narrow4's unsigned narrows cannot saturate.
 */
const lowByte = (valid: number[]) => [...valid, ...splatI(0xff), ...vAnd, ...vAnd];
const narrow4 = (a: number[], b: number[], c: number[], d: number[]) => [...a, ...b, ...hNarrowU, ...c, ...d, ...hNarrowU, ...bNarrowU];

/** f32 local `d` (≥ 0 or NaN) rounded to f16 and back: nearest even, Inf from 65520, canonical NaN. */
function f16Round(d: number, bits: number): number[] {
  const normal = [
    ...get(bits), ...i32c(0xfff), ...i32Add, ...get(bits), ...i32c(13), ...i32ShrU, ...i32c(1), ...i32And, ...i32Add,
    ...i32c(~0x1fff), ...i32And, ...f32Reinterpret,
  ];
  // below f16's normals the spacing is 2^-24: the ulp of f32 at 0.5, so adding 0.5 rounds there
  const subnormal = [...get(d), ...f32c(0.5), ...f32Add, ...f32c(0.5), ...f32Sub];
  return [
    ...get(d), ...i32Reinterpret, ...set(bits),
    ...get(d), ...get(d), ...f32Ne,
    ...ifElse(F32, [...i32c(0x7fc00000), ...f32Reinterpret], [
      ...get(d), ...f32c(65520), ...f32Ge,
      ...ifElse(F32, f32c(Infinity), [...get(d), ...f32c(2 ** -14), ...f32Lt, ...ifElse(F32, subnormal, normal)]),
    ]),
  ];
}

/** quant_q8_0(x, out, nBlocks). */
function q8_0Body(): number[] {
  const [X, O, N, B, BITS] = [0, 1, 2, 3, 4];
  const [D, ID] = [5, 6]; // f32
  const V = (k: number) => 7 + k; // v128: the block's 8 vectors, then scratch
  const [ACC, IDV, P, T] = [V(8), V(9), V(10), V(11)];
  /** The 4 codes of vector k: roundf(x · id) as trunc + (|frac| ≥ 0.5 ? ±1 : 0), exact; non-finite → 0. */
  const code = (k: number) => [
    ...get(V(k)), ...get(IDV), ...fMul, ...tee(P), ...fTrunc, ...tee(T),
    ...get(P), ...get(T), ...fSub, ...fAbs, ...splatF(0.5), ...fGe,
    ...get(P), ...splatI(0x80000000), ...vAnd, ...splatF(1), ...vOr, ...vAnd,
    ...fAdd, ...tee(T), ...iTruncSat,
    ...lowByte([...get(T), ...fAbs, ...splatF(2 ** 31), ...fLt]),
  ];
  const body = blocks(B, N, [
    ...[0, 1, 2, 3, 4, 5, 6, 7].flatMap((k) => [...get(X), ...vload(16 * k), ...set(V(k))]),
    // amax as the integer max of |x|'s bits (a NaN's bits exceed every number's, so NaN wins as in
    // Math.max); f32x4.max's NaN handling cost V8 ~2 ns a value
    ...get(V(0)), ...fAbs, ...get(V(1)), ...fAbs, ...iMaxS,
    ...[2, 3, 4, 5, 6, 7].flatMap((k) => [...get(V(k)), ...fAbs, ...iMaxS]),
    ...set(ACC), ...get(ACC), ...get(ACC), ...get(ACC), ...fShuffle([2, 3, 0, 1]), ...iMaxS,
    ...tee(ACC), ...get(ACC), ...get(ACC), ...fShuffle([1, 0, 3, 2]), ...iMaxS,
    ...fExtract(0), ...f32c(127), ...f32Div, ...set(D),
    ...f32c(1), ...get(D), ...f32Div, ...f32c(0), ...get(D), ...f32c(0), ...f32Gt, ...[0x1b], ...tee(ID),
    ...fSplat, ...set(IDV),
    ...get(O), ...f16Round(D, BITS), ...f32Store(0),
    ...get(O), ...narrow4(code(0), code(1), code(2), code(3)), ...vstore(4),
    ...get(O), ...narrow4(code(4), code(5), code(6), code(7)), ...vstore(20),
    ...inc(X, 128), ...inc(O, Q8_0_BYTES),
  ]);
  return [...locals([[2, I32], [2, F32], [12, 0x7b]]), ...body, 0x0b];
}

/** quant_q8_k(x, out, nBlocks). */
function q8_KBody(): number[] {
  const [X, O, N, B, J, S] = [0, 1, 2, 3, 4, 5];
  const [AMAX, MAX, ISC] = [6, 7, 8]; // f32
  const [ACC, HI, LO, V, ISV, Q] = [9, 10, 11, 12, 13, 14]; // v128
  /** The codes of the 4 floats at X + off, as i32x4 low bytes. */
  const code = (off: number) => [
    ...get(X), ...vload(off), ...get(ISV), ...fMul, ...splatF(12582912), ...fAdd, ...tee(V),
    ...splatI(0x7fffff), ...vAnd, ...splatI(0x400000), ...iSub, ...splatI(127), ...iMinS,
    ...splatI(0xff), ...vAnd, // NaN: its payload's low bits, as the bit trick gives in ggml and JS
  ];
  /** Codes of values 16k..16k+15 stored, their sum (the bsum) at O + 4 + 2k; odd k also the sum of 32. */
  const sixteen = (k: number) => [
    ...get(O), ...narrow4(code(64 * k), code(64 * k + 16), code(64 * k + 32), code(64 * k + 48)), ...tee(Q), ...vstore(52 + 16 * k),
    ...get(Q), ...hPairs, ...iPairs, ...set(Q),
    ...[0, 1, 2, 3].flatMap((l) => [...get(Q), ...iExtract(l), ...(l ? i32Add : [])]),
    ...(k & 1 ? [...tee(J), ...get(S), ...i32Add, ...set(S), ...get(O), ...get(J), ...i32Store16(4 + 2 * k), ...get(O), ...get(S), ...i32Store16(36 + (k - 1))] : [...tee(S), ...set(J), ...get(O), ...get(J), ...i32Store16(4 + 2 * k)]),
  ];
  const scan = [ // the first x with |x| = amax (both signs reach it)
    ...i32c(0), ...set(J),
    ...block(loop([
      ...get(X), ...get(J), ...i32Add, ...f32Load(0), ...tee(MAX), ...[0x8b] /* f32.abs */, ...get(AMAX), ...f32Eq, ...brIf(1),
      ...inc(J, 4), ...[0x0c, 0], // br 0
    ])),
  ];
  const body = blocks(B, N, [
    ...vZero, ...set(ACC), ...splatF(-Infinity), ...set(HI), ...splatF(Infinity), ...set(LO),
    ...Array.from({ length: 64 }, (_, k) => [
      ...get(X), ...vload(16 * k), ...set(V),
      ...get(ACC), ...get(V), ...fAbs, ...fPmax, ...set(ACC), // pmax / pmin: NaN never replaces
      ...get(HI), ...get(V), ...fPmax, ...set(HI),
      ...get(LO), ...get(V), ...fPmin, ...set(LO),
    ]).flat(),
    ...lanes(ACC, f32Max), ...tee(AMAX), ...f32c(0), ...f32Eq,
    ...ifElse(0x40, [
      ...get(O), ...f32c(0), ...f32Store(0),
      ...Array.from({ length: 19 }, (_, k) => [...get(O), ...vZero, ...vstore(4 + 16 * k)]).flat(),
    ], [
      ...lanes(HI, f32Max), ...get(AMAX), ...f32Eq, ...lanes(LO, f32Min), ...get(AMAX), ...f32Neg, ...f32Eq, ...i32And,
      ...ifElse(0x40, scan, [...get(AMAX), ...get(AMAX), ...f32Neg, ...lanes(HI, f32Max), ...get(AMAX), ...f32Eq, ...[0x1b], ...set(MAX)]),
      ...f32c(-127), ...get(MAX), ...f32Div, ...tee(ISC), ...fSplat, ...set(ISV),
      ...get(O), ...f32c(1), ...get(ISC), ...f32Div, ...f32Store(0),
      ...Array.from({ length: 16 }, (_, k) => sixteen(k)).flat(),
    ]),
    ...inc(X, 1024), ...inc(O, Q8_K_BYTES),
  ]);
  return [...locals([[3, I32], [3, F32], [6, 0x7b]]), ...body, 0x0b];
}

/** The quantizers by export name, for ./wasm.ts's module (3 i32 parameters each: x, out, nBlocks). */
export const QACT_KERNELS = {
  q8_0: { name: 'quant_q8_0', body: q8_0Body },
  q8_K: { name: 'quant_q8_k', body: q8_KBody },
} as const;
