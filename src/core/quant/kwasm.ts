/**
 * The K-quant scale searches of ggml-quants.c (make_qkx2_quants, make_qx_quants, make_q3_quants) and the
 * final code pass as WebAssembly SIMD kernels, four groups at a time, one per f32x4 lane. Wasm f32
 * arithmetic is IEEE binary32 with round-to-nearest-even, like ggml's C float code on x86-64 (SSE, no
 * FMA contraction), so C's loops transcribed op for op, in C's order, give ggml's bits with no
 * Math.fround; per-lane branches become masks (bitselect), which changes no lane's values. The module
 * is assembled here byte by byte (no dependency). kquants.ts falls back to the JS transcriptions
 * (kmake.ts) without WebAssembly SIMD or for blocks with non-finite or huge values (K_WASM_SAFE_ABS).
 * test/quant-ggml.test.ts checks both paths against libggml.
 *
 * Memory (one 64 KiB page): RAW holds one super-block as given; prep stores its groups of n transposed,
 * element i of group 4g+k at float index (g*n + i)*4 + k, in XT (values) and WT (weights). The searches
 * leave codes in LB (same layout; floats from qkx2, int32 from qx/q3) and the scale and -min of group
 * 4g+k at float index 4g+k of OS/OM. requant writes final codes (int32, natural order) to RES.
 */

import { F32, I32, section, str, uleb, V128, vec } from '../util/wasm-asm.js';
import {
  bNarrowU, brIf, bShl, bSplat, f32Add, f32c, f32FromI32, f32Mul, fAbs, fAdd, fDiv, fEq, fFromI32, fGt, fLt, fMul, fNeg, fSplat, fSub, get,
  hNarrowS, i32Add, i32c, i32LeS, i32LtS, i32Mul, ifThen, iMaxS, iMinS, iSplat, iSub, loop, set, simd, vAnd, vAnyTrue, vBitselect, vload,
  vOr, vstore, vZero,
} from '../util/wasm-ops.js';

// byte offsets of the regions
export const K_XT = 0;
export const K_WT = 1024;
const LA = 2048; // candidate codes of the current group (int32x4 per element)
export const K_LB = 3072;
export const K_OS = 4096;
export const K_OM = 4160;
/** A super-block as given (256 floats), for prep and requant. */
export const K_RAW = 8192;
/** requant's per-group d and dm (f32), and its codes (int32, natural order). */
export const K_OD = 9216;
export const K_ODM = 9280;
export const K_RES = 9344;
/** pack3's bytes: the codes as bytes (scratch), then the block's hmask (32 bytes) and qs (64 bytes). */
const K_CODES8 = 10368;
export const K_Q3OUT = 10624;
/** Inputs with |x| below this (and finite) take the wasm path; anything wilder stays on the JS transcription. */
export const K_WASM_SAFE_ABS = 1e15;


/**
 * qkx2(nGroups4, n, nmax, rmin, rdelta, nstep): make_qkx2_quants for 4*nGroups4 groups of n elements
 * (nstep >= 1), error |diff| when mad, diff^2 otherwise. Emitted for one n (n >= 2; the n parameter is
 * ignored). Codes go to LB as floats. (Unrolling the element loops measured slower.)
 */
function qkx2Body(mad: boolean, n: number): number[] {
  // params
  const [NG, , NMAX, RMIN, RDELTA, NSTEP] = [0, 1, 2, 3, 4, 5];
  // i32 locals
  const [G, XB, IS, P, Q] = [6, 7, 8, 9, 10];
  // f32 local
  const A = 11;
  // v128 locals
  let k = 12;
  const [MIN, MAX, SW, SX, ISC, SC, BEST, SL, SL2, SXL, XI, WI, LF, TS, TM, CUR, MASK, D, DEGEN, MIN0, NMAXV, WL, TMP,
    C12, CLOW, CHALF] = Array.from({ length: 26 }, () => k++);

  // element loops: P = XB + 16 i addresses XT/WT/LB, Q = 16 i addresses LA
  const ldX = (_i: number) => [...get(P), ...vload(K_XT)];
  const ldW = (_i: number) => [...get(P), ...vload(K_WT)];
  const pLB = (_i: number) => get(P);
  const pLA = (_i: number) => get(Q);
  /** float(clamp(nearest_int(iscale * (x - min)), 0, nmax)) from XI. */
  const codeF = [
    ...get(ISC), ...get(XI), ...get(MIN), ...fSub, ...fMul,
    ...get(C12), ...fAdd, ...get(CLOW), ...vAnd, ...get(CHALF), ...iSub,
    ...get(NMAXV), ...iMinS, ...vZero, ...iMaxS, ...fFromI32,
  ];
  const err = (diff: number[]) => (mad ? [...diff, ...fAbs] : [...diff, ...set(TMP), ...get(TMP), ...get(TMP), ...fMul]);
  /** for (i = from; i < n; i++) body(i), as a loop over P and Q. */
  const each = (body: (i: number) => number[], from = 0) => [
    ...get(XB), ...i32c(16 * from), ...i32Add, ...set(P), ...i32c(16 * from), ...set(Q),
    ...loop([
      ...body(0),
      ...get(P), ...i32c(16), ...i32Add, ...set(P),
      ...get(Q), ...i32c(16), ...i32Add, ...set(Q),
      ...get(Q), ...i32c(16 * n), ...i32LtS, ...brIf(0),
    ]),
  ];

  const body = [
    ...get(NMAX), ...iSplat, ...set(NMAXV),
    ...f32c(12582912), ...fSplat, ...set(C12),
    ...i32c(0x7fffff), ...iSplat, ...set(CLOW),
    ...i32c(0x400000), ...iSplat, ...set(CHALF),
    ...i32c(0), ...set(G),
    ...loop([
      ...get(G), ...i32c(16 * n), ...i32Mul, ...set(XB),
      // min/max/sum_w/sum_x
      ...get(XB), ...vload(K_XT), ...set(XI), ...get(XB), ...vload(K_WT), ...set(WI),
      ...get(XI), ...set(MIN), ...get(XI), ...set(MAX),
      ...get(WI), ...set(SW), ...get(WI), ...get(XI), ...fMul, ...set(SX),
      ...each((i) => [
        ...ldX(i), ...set(XI), ...ldW(i), ...set(WI),
        ...get(XI), ...get(MIN), ...get(XI), ...get(MIN), ...fLt, ...vBitselect, ...set(MIN),
        ...get(XI), ...get(MAX), ...get(XI), ...get(MAX), ...fGt, ...vBitselect, ...set(MAX),
        ...get(SW), ...get(WI), ...fAdd, ...set(SW),
        ...get(SX), ...get(WI), ...get(XI), ...fMul, ...fAdd, ...set(SX),
      ], 1),
      ...vZero, ...get(MIN), ...get(MIN), ...vZero, ...fGt, ...vBitselect, ...set(MIN),
      ...get(MAX), ...get(MIN), ...fEq, ...set(DEGEN),
      ...get(MIN), ...set(MIN0),
      // iscale = nmax/(max - min); scale = 1/iscale; first codes and their error
      ...get(NMAX), ...f32FromI32, ...fSplat, ...get(MAX), ...get(MIN), ...fSub, ...fDiv, ...set(ISC),
      ...f32c(1), ...fSplat, ...get(ISC), ...fDiv, ...set(SC),
      ...vZero, ...set(BEST),
      ...each((i) => [
        ...ldX(i), ...set(XI),
        ...pLB(i), ...codeF, ...set(LF), ...get(LF), ...vstore(K_LB),
        ...get(BEST), ...ldW(i),
        ...err([...get(SC), ...get(LF), ...fMul, ...get(MIN), ...fAdd, ...get(XI), ...fSub]),
        ...fMul, ...fAdd, ...set(BEST),
      ]),
      ...i32c(0), ...set(IS),
      ...loop([
        // iscale = (rmin + rdelta*is + nmax)/(max - min)
        ...get(RMIN), ...get(RDELTA), ...get(IS), ...f32FromI32, ...f32Mul, ...f32Add,
        ...get(NMAX), ...f32FromI32, ...f32Add, ...set(A),
        ...get(A), ...fSplat, ...get(MAX), ...get(MIN), ...fSub, ...fDiv, ...set(ISC),
        ...vZero, ...set(SL), ...vZero, ...set(SL2), ...vZero, ...set(SXL),
        ...each((i) => [
          ...ldX(i), ...set(XI),
          ...pLA(i), ...codeF, ...set(LF), ...get(LF), ...vstore(LA),
          ...ldW(i), ...get(LF), ...fMul, ...set(WL),
          ...get(SL), ...get(WL), ...fAdd, ...set(SL),
          ...get(SL2), ...get(WL), ...get(LF), ...fMul, ...fAdd, ...set(SL2),
          ...get(SXL), ...get(WL), ...get(XI), ...fMul, ...fAdd, ...set(SXL),
        ]),
        // D = sum_w*sum_l2 - sum_l*sum_l
        ...get(SW), ...get(SL2), ...fMul, ...get(SL), ...get(SL), ...fMul, ...fSub, ...set(D),
        ...get(D), ...vZero, ...fGt, ...set(MASK),
        ...get(MASK), ...vAnyTrue,
        ...ifThen([
          ...get(SW), ...get(SXL), ...fMul, ...get(SX), ...get(SL), ...fMul, ...fSub, ...get(D), ...fDiv, ...set(TS),
          ...get(SL2), ...get(SX), ...fMul, ...get(SL), ...get(SXL), ...fMul, ...fSub, ...get(D), ...fDiv, ...set(TM),
          // this_min > 0: this_min = 0, this_scale = sum_xl/sum_l2
          ...get(SXL), ...get(SL2), ...fDiv, ...get(TS), ...get(TM), ...vZero, ...fGt, ...vBitselect, ...set(TS),
          ...vZero, ...get(TM), ...get(TM), ...vZero, ...fGt, ...vBitselect, ...set(TM),
          ...vZero, ...set(CUR),
          ...each((i) => [
            ...get(CUR), ...ldW(i),
            ...err([...get(TS), ...pLA(i), ...vload(LA), ...fMul, ...get(TM), ...fAdd, ...ldX(i), ...fSub]),
            ...fMul, ...fAdd, ...set(CUR),
          ]),
          ...get(MASK), ...get(CUR), ...get(BEST), ...fLt, ...vAnd, ...set(MASK),
          ...get(MASK), ...vAnyTrue,
          ...ifThen([
            ...each((i) => [
              ...pLB(i), ...pLA(i), ...vload(LA), ...pLB(i), ...vload(K_LB), ...get(MASK), ...vBitselect,
              ...vstore(K_LB),
            ]),
            ...get(CUR), ...get(BEST), ...get(MASK), ...vBitselect, ...set(BEST),
            ...get(TS), ...get(SC), ...get(MASK), ...vBitselect, ...set(SC),
            ...get(TM), ...get(MIN), ...get(MASK), ...vBitselect, ...set(MIN),
          ]),
        ]),
        ...get(IS), ...i32c(1), ...i32Add, ...set(IS),
        ...get(IS), ...get(NSTEP), ...i32LeS, ...brIf(0),
      ]),
      // max == min: codes 0, scale 0, the_min = -min of the start
      ...get(DEGEN), ...vAnyTrue,
      ...ifThen(each((i) => [
        ...pLB(i), ...vZero, ...pLB(i), ...vload(K_LB), ...get(DEGEN), ...vBitselect, ...vstore(K_LB),
      ])),
      ...get(G), ...i32c(16), ...i32Mul,
      ...vZero, ...get(SC), ...get(DEGEN), ...vBitselect, ...vstore(K_OS),
      ...get(G), ...i32c(16), ...i32Mul,
      ...get(MIN0), ...get(MIN), ...get(DEGEN), ...vBitselect, ...fNeg, ...vstore(K_OM),
      ...get(G), ...i32c(1), ...i32Add, ...set(G),
      ...get(G), ...get(NG), ...i32LtS, ...brIf(0),
    ]),
  ];
  const locals = vec([[5, I32], [1, F32], [26, V128]].map(([c, t]) => [...uleb(c), t]));
  return [...locals, ...body, 0x0b];
}

/** for each f32x4 of a group's transposed values (XT bytes XB..END): XI = the values, then `body`. */
function forGroup(l: { XB: number; P: number; XI: number; END: number }, body: number[]): number[] {
  return [
    ...get(l.XB), ...set(l.P),
    ...loop([
      ...get(l.P), ...vload(K_XT), ...set(l.XI),
      ...body,
      ...get(l.P), ...i32c(16), ...i32Add, ...set(l.P),
      ...get(l.P), ...get(l.END), ...i32LtS, ...brIf(0),
    ]),
  ];
}

/** nearest_int(top of stack) clamped to [-nmax, nmax-1], as i32x4 (NMAXV: nmax in each lane, NMAX: the i32 parameter). */
const nearestClamp = (NMAXV: number, NMAX: number) => [
  ...f32c(12582912), ...fSplat, ...fAdd,
  ...i32c(0x7fffff), ...iSplat, ...vAnd,
  ...i32c(0x400000), ...iSplat, ...iSub,
  ...get(NMAXV), ...i32c(1), ...iSplat, ...iSub, ...iMinS,
  ...i32c(0), ...get(NMAX), ...[0x6b], ...iSplat, ...iMaxS,
];

/** MAXV = the x of the largest |x| per lane (the first wins ties, as ggml's loop), SMALL = that |x| < GROUP_MAX_EPS. */
const groupMax = (l: { XI: number; AX: number; AMAX: number; MASK: number; MAXV: number; SMALL: number }, forElems: (body: number[]) => number[]) => [
  ...vZero, ...set(l.MAXV), ...vZero, ...set(l.AMAX),
  ...forElems([
    ...get(l.XI), ...fAbs, ...set(l.AX),
    ...get(l.AX), ...get(l.AMAX), ...fGt, ...set(l.MASK),
    ...get(l.AX), ...get(l.AMAX), ...get(l.MASK), ...vBitselect, ...set(l.AMAX),
    ...get(l.XI), ...get(l.MAXV), ...get(l.MASK), ...vBitselect, ...set(l.MAXV),
  ]),
  ...get(l.AMAX), ...f32c(Math.fround(1e-15)), ...fSplat, ...fLt, ...set(l.SMALL),
];

/**
 * qx(nGroups4, n, nmax): make_qx_quants with rmse_type 1 and no quant weights (w = x*x) for 4*nGroups4
 * groups of n elements; codes (already + nmax, 0 for an all-tiny group) to LB, scales to OS.
 */
function qxBody(): number[] {
  const [NG, N, NMAX] = [0, 1, 2];
  const [G, I, P, XB, IS, END] = [3, 4, 5, 6, 7, 8];
  const A = 9;
  let k = 10;
  const [MAXV, AMAX, ISC, SC, BEST, SLX, SL2, XI, LF, W, MASK, SMALL, NMAXV, L, NS, AX] =
    Array.from({ length: 16 }, () => k++);
  void I;
  /** nearest_int(iscale * x) clamped to [-nmax, nmax-1], as i32x4. */
  const code = [...get(ISC), ...get(XI), ...fMul, ...nearestClamp(NMAXV, NMAX)];
  const forElems = (body: number[]) => forGroup({ XB, P, XI, END }, body);
  const laAddr = [...get(P), ...get(XB), ...[0x6b], ...i32c(LA), ...i32Add];
  /** sumlx += w*x*l; suml2 += w*l*l with w = x*x, l (float) in LF. */
  const sums = [
    ...get(XI), ...get(XI), ...fMul, ...set(W),
    ...get(SLX), ...get(W), ...get(XI), ...fMul, ...get(LF), ...fMul, ...fAdd, ...set(SLX),
    ...get(SL2), ...get(W), ...get(LF), ...fMul, ...get(LF), ...fMul, ...fAdd, ...set(SL2),
  ];
  const body = [
    ...get(NMAX), ...iSplat, ...set(NMAXV),
    ...i32c(0), ...set(G),
    ...loop([
      ...get(G), ...get(N), ...i32Mul, ...i32c(16), ...i32Mul, ...set(XB),
      ...get(XB), ...get(N), ...i32c(16), ...i32Mul, ...i32Add, ...set(END),
      ...groupMax({ XI, AX, AMAX, MASK, MAXV, SMALL }, forElems),
      // iscale = -nmax/max; first codes and sums
      ...i32c(0), ...get(NMAX), ...[0x6b], ...f32FromI32, ...fSplat, ...get(MAXV), ...fDiv, ...set(ISC),
      ...vZero, ...set(SLX), ...vZero, ...set(SL2),
      ...forElems([
        ...code, ...set(L),
        ...get(P), ...get(L), ...vstore(K_LB),
        ...get(L), ...fFromI32, ...set(LF),
        ...sums,
      ]),
      // scale = suml2 ? sumlx/suml2 : 0; best = scale*sumlx
      ...get(SLX), ...get(SL2), ...fDiv, ...vZero, ...get(SL2), ...vZero, ...simd(0x42), ...vBitselect, ...set(SC),
      ...get(SC), ...get(SLX), ...fMul, ...set(BEST),
      ...i32c(-9), ...set(IS),
      ...loop([
        ...get(IS),
        ...ifThen([
          // iscale = -(nmax + 0.1f*is)/max
          ...get(NMAX), ...f32FromI32, ...f32c(Math.fround(0.1)), ...get(IS), ...f32FromI32, ...f32Mul, ...f32Add,
          ...[0x8c], ...set(A),
          ...get(A), ...fSplat, ...get(MAXV), ...fDiv, ...set(ISC),
          ...vZero, ...set(SLX), ...vZero, ...set(SL2),
          ...forElems([
            ...laAddr, ...code, ...set(L), ...get(L), ...vstore(0),
            ...get(L), ...fFromI32, ...set(LF),
            ...sums,
          ]),
          // suml2 > 0 && sumlx*sumlx > best*suml2
          ...get(SL2), ...vZero, ...fGt,
          ...get(SLX), ...get(SLX), ...fMul, ...get(BEST), ...get(SL2), ...fMul, ...fGt,
          ...vAnd, ...set(MASK),
          ...get(MASK), ...vAnyTrue,
          ...ifThen([
            ...forElems([
              ...get(P), ...laAddr, ...vload(0), ...get(P), ...vload(K_LB), ...get(MASK), ...vBitselect, ...vstore(K_LB),
            ]),
            ...get(SLX), ...get(SL2), ...fDiv, ...set(NS),
            ...get(NS), ...get(SLX), ...fMul, ...get(BEST), ...get(MASK), ...vBitselect, ...set(BEST),
            ...get(NS), ...get(SC), ...get(MASK), ...vBitselect, ...set(SC),
          ]),
        ]),
        ...get(IS), ...i32c(1), ...i32Add, ...set(IS),
        ...get(IS), ...i32c(9), ...i32LeS, ...brIf(0),
      ]),
      // codes + nmax; an all-tiny group gets codes 0 and scale 0
      ...forElems([
        ...get(P),
        ...vZero, ...get(P), ...vload(K_LB), ...get(NMAXV), ...simd(0xae), ...get(SMALL), ...vBitselect,
        ...vstore(K_LB),
      ]),
      ...get(G), ...i32c(16), ...i32Mul,
      ...vZero, ...get(SC), ...get(SMALL), ...vBitselect, ...vstore(K_OS),
      ...get(G), ...i32c(1), ...i32Add, ...set(G),
      ...get(G), ...get(NG), ...i32LtS, ...brIf(0),
    ]),
  ];
  const locals = vec([[6, I32], [1, F32], [16, V128]].map(([c, t]) => [...uleb(c), t]));
  return [...locals, ...body, 0x0b];
}

/**
 * q3(nGroups4, n, nmax): make_q3_quants with do_rmse for 4*nGroups4 groups of n elements; codes (+ nmax,
 * 0 for an all-tiny group) to LB, scales to OS. A lane whose pass changed nothing would change nothing
 * in the next pass either (same state), so running the passes while any lane changes is exact.
 */
function q3Body(): number[] {
  const [NG, N, NMAX] = [0, 1, 2];
  const [G, ITRY, P, XB, END] = [3, 4, 5, 6, 7];
  let k = 8;
  const [MAXV, AMAX, ISC, SLX, SL2, XI, LF, W, MASK, SMALL, NMAXV, L, AX, CHANGED, NL, NLF, TSLX, TSL2, WX] =
    Array.from({ length: 19 }, () => k++);
  const forElems = (body: number[]) => forGroup({ XB, P, XI, END }, body);
  const body = [
    ...get(NMAX), ...iSplat, ...set(NMAXV),
    ...i32c(0), ...set(G),
    ...loop([
      ...get(G), ...get(N), ...i32Mul, ...i32c(16), ...i32Mul, ...set(XB),
      ...get(XB), ...get(N), ...i32c(16), ...i32Mul, ...i32Add, ...set(END),
      ...groupMax({ XI, AX, AMAX, MASK, MAXV, SMALL }, forElems),
      ...i32c(0), ...get(NMAX), ...[0x6b], ...f32FromI32, ...fSplat, ...get(MAXV), ...fDiv, ...set(ISC),
      ...vZero, ...set(SLX), ...vZero, ...set(SL2),
      ...forElems([
        ...get(P),
        ...get(ISC), ...get(XI), ...fMul, ...nearestClamp(NMAXV, NMAX), ...set(L),
        ...get(L), ...vstore(K_LB),
        ...get(L), ...fFromI32, ...set(LF),
        ...get(XI), ...get(XI), ...fMul, ...set(W),
        ...get(SLX), ...get(W), ...get(XI), ...fMul, ...get(LF), ...fMul, ...fAdd, ...set(SLX),
        ...get(SL2), ...get(W), ...get(LF), ...fMul, ...get(LF), ...fMul, ...fAdd, ...set(SL2),
      ]),
      ...i32c(0), ...set(ITRY),
      ...loop([
        ...vZero, ...set(CHANGED),
        ...forElems([
          ...get(P), ...vload(K_LB), ...set(L),
          ...get(L), ...fFromI32, ...set(LF),
          ...get(XI), ...get(XI), ...fMul, ...set(W),
          ...get(W), ...get(XI), ...fMul, ...set(WX),
          // slx = sumlx - w*x*L; sl2 = suml2 - w*L*L
          ...get(SLX), ...get(WX), ...get(LF), ...fMul, ...fSub, ...set(TSLX),
          ...get(SL2), ...get(W), ...get(LF), ...fMul, ...get(LF), ...fMul, ...fSub, ...set(TSL2),
          ...get(TSLX), ...vZero, ...fGt, ...set(MASK),
          ...get(MASK), ...vAnyTrue,
          ...ifThen([
            // new_l = nearest_int(x*sl2/slx), clamped
            ...get(XI), ...get(TSL2), ...fMul, ...get(TSLX), ...fDiv, ...nearestClamp(NMAXV, NMAX), ...set(NL),
            ...get(NL), ...fFromI32, ...set(NLF),
            ...get(MASK), ...get(NL), ...get(L), ...simd(0x38), ...vAnd, ...set(MASK),
            ...get(TSLX), ...get(WX), ...get(NLF), ...fMul, ...fAdd, ...set(TSLX),
            ...get(TSL2), ...get(W), ...get(NLF), ...fMul, ...get(NLF), ...fMul, ...fAdd, ...set(TSL2),
            // sl2 > 0 && slx*slx*suml2 > sumlx*sumlx*sl2
            ...get(MASK),
            ...get(TSL2), ...vZero, ...fGt, ...vAnd,
            ...get(TSLX), ...get(TSLX), ...fMul, ...get(SL2), ...fMul,
            ...get(SLX), ...get(SLX), ...fMul, ...get(TSL2), ...fMul, ...fGt, ...vAnd, ...set(MASK),
            ...get(P), ...get(NL), ...get(L), ...get(MASK), ...vBitselect, ...vstore(K_LB),
            ...get(TSLX), ...get(SLX), ...get(MASK), ...vBitselect, ...set(SLX),
            ...get(TSL2), ...get(SL2), ...get(MASK), ...vBitselect, ...set(SL2),
            ...get(CHANGED), ...get(MASK), ...simd(0x50), ...set(CHANGED),
          ]),
        ]),
        ...get(ITRY), ...i32c(1), ...i32Add, ...set(ITRY),
        ...get(CHANGED), ...vAnyTrue,
        ...get(ITRY), ...i32c(5), ...i32LtS, ...[0x71], ...brIf(0),
      ]),
      ...forElems([
        ...get(P),
        ...vZero, ...get(P), ...vload(K_LB), ...get(NMAXV), ...simd(0xae), ...get(SMALL), ...vBitselect,
        ...vstore(K_LB),
      ]),
      // suml2 > 0 ? sumlx/suml2 : 0, and 0 for an all-tiny group
      ...get(G), ...i32c(16), ...i32Mul,
      ...get(SLX), ...get(SL2), ...fDiv, ...vZero, ...get(SL2), ...vZero, ...fGt, ...vBitselect, ...set(AX),
      ...vZero, ...get(AX), ...get(SMALL), ...vBitselect, ...vstore(K_OS),
      ...get(G), ...i32c(1), ...i32Add, ...set(G),
      ...get(G), ...get(NG), ...i32LtS, ...brIf(0),
    ]),
  ];
  const locals = vec([[5, I32], [19, V128]].map(([c, t]) => [...uleb(c), t]));
  return [...locals, ...body, 0x0b];
}

/**
 * prep(nGroups4, n, mode): RAW (4*nGroups4 groups of n) transposed into XT; WT = |x| (mode 1) or
 * sqrtf(sum x^2 / n) + |x| (mode 2, the Q4_K/Q5_K weights; the sum runs in C's order).
 * Returns 1 if every |x| < K_WASM_SAFE_ABS (NaN fails), else 0: then the caller must use the JS path.
 */
function prepBody(): number[] {
  const [NG, N, MODE] = [0, 1, 2];
  const [G, I, P, XB, END, R] = [3, 4, 5, 6, 7, 8];
  const [XI, S2, AV, OK] = [9, 10, 11, 12];
  const lane = (k: number) => [
    ...get(R), ...get(N), ...i32c(4 * k), ...i32Mul, ...i32Add, ...[0x2a, 2, ...uleb(K_RAW)],
  ];
  const forElems = (body: number[]) => forGroup({ XB, P, XI, END }, body);
  const body = [
    ...simd(0x0c, ...new Array(16).fill(0xff)), ...set(OK),
    ...i32c(0), ...set(G),
    ...loop([
      ...get(G), ...get(N), ...i32Mul, ...i32c(16), ...i32Mul, ...set(XB),
      ...get(XB), ...get(N), ...i32c(16), ...i32Mul, ...i32Add, ...set(END),
      // R = byte offset of element i of group 4g in RAW
      ...get(XB), ...set(R),
      ...get(XB), ...set(P),
      ...vZero, ...set(S2),
      ...loop([
        ...lane(0), ...fSplat,
        ...lane(1), ...simd(0x20, 1),
        ...lane(2), ...simd(0x20, 2),
        ...lane(3), ...simd(0x20, 3), ...set(XI),
        ...get(P), ...get(XI), ...vstore(K_XT),
        ...get(S2), ...get(XI), ...get(XI), ...fMul, ...fAdd, ...set(S2),
        ...get(OK), ...get(XI), ...fAbs, ...f32c(K_WASM_SAFE_ABS), ...fSplat, ...fLt, ...vAnd, ...set(OK),
        ...get(R), ...i32c(4), ...i32Add, ...set(R),
        ...get(P), ...i32c(16), ...i32Add, ...set(P),
        ...get(P), ...get(END), ...i32LtS, ...brIf(0),
      ]),
      ...get(MODE), ...i32c(1), ...[0x46],
      ...ifThen(forElems([...get(P), ...get(XI), ...fAbs, ...vstore(K_WT)])),
      ...get(MODE), ...i32c(2), ...[0x46],
      ...ifThen([
        ...get(S2), ...get(N), ...f32FromI32, ...fSplat, ...fDiv, ...simd(0xe3), ...set(AV),
        ...forElems([...get(P), ...get(AV), ...get(XI), ...fAbs, ...fAdd, ...vstore(K_WT)]),
      ]),
      ...get(G), ...i32c(1), ...i32Add, ...set(G),
      ...get(G), ...get(NG), ...i32LtS, ...brIf(0),
    ]),
  ];
  void I;
  return [...vec([[6, I32], [4, V128]].map(([c, t]) => [...uleb(c), t])), ...body, ...get(OK), ...simd(0xa3), 0x0b];
}

/**
 * requant(nGroups, n, lo, hi, off): RES[j*n + i] = clamp(nearest_int((RAW[j*n + i] + dm_j)/d_j), lo, hi) + off
 * for every group j with d_j = OD[j] != 0 (dm_j = ODM[j]; 0 for x/d, which gives the same code).
 * n is a multiple of 4.
 */
function requantBody(): number[] {
  const [NG, N, LO, HI, OFF] = [0, 1, 2, 3, 4];
  const [J, P, END] = [5, 6, 7];
  const [D, DM] = [8, 9];
  const body = [
    ...i32c(0), ...set(J),
    ...loop([
      ...get(J), ...i32c(4), ...i32Mul, ...[0x2a, 2, ...uleb(K_OD)], ...fSplat, ...set(D),
      ...get(D), ...simd(0x1f, 0), ...f32c(0), ...[0x5c], // f32.ne
      ...ifThen([
        ...get(J), ...i32c(4), ...i32Mul, ...[0x2a, 2, ...uleb(K_ODM)], ...fSplat, ...set(DM),
        ...get(J), ...get(N), ...i32Mul, ...i32c(4), ...i32Mul, ...set(P),
        ...get(P), ...get(N), ...i32c(4), ...i32Mul, ...i32Add, ...set(END),
        ...loop([
          ...get(P),
          ...get(P), ...vload(K_RAW), ...get(DM), ...fAdd, ...get(D), ...fDiv,
          ...f32c(12582912), ...fSplat, ...fAdd,
          ...i32c(0x7fffff), ...iSplat, ...vAnd,
          ...i32c(0x400000), ...iSplat, ...iSub,
          ...get(HI), ...iSplat, ...iMinS, ...get(LO), ...iSplat, ...iMaxS,
          ...get(OFF), ...iSplat, ...simd(0xae),
          ...vstore(K_RES),
          ...get(P), ...i32c(16), ...i32Add, ...set(P),
          ...get(P), ...get(END), ...i32LtS, ...brIf(0),
        ]),
      ]),
      ...get(J), ...i32c(1), ...i32Add, ...set(J),
      ...get(J), ...get(NG), ...i32LtS, ...brIf(0),
    ]),
  ];
  const locals = vec([[3, I32], [2, V128]].map(([c, t]) => [...uleb(c), t]));
  return [...locals, ...body, 0x0b];
}

/**
 * pack3(): Q3_K's hmask and qs from the 256 codes (0..7, int32, natural order) in RES, to Q3OUT:
 * the high bit of code j goes to hmask[j % 32] as bit j / 32; byte l of each 32-byte run of qs holds
 * the low two bits of codes l, l + 32, l + 64, l + 96 of its 128 (quantize_row_q3_K_ref's packing).
 */
function pack3Body(): number[] {
  const bGtU = simd(0x28); // i8x16.gt_u
  const [THREE, ACC] = [0, 1];
  const res = (v: number) => [...i32c(0), ...vload(K_RES + 16 * v)];
  const codes = (b: number) => [...i32c(0), ...vload(K_CODES8 + b)];
  const low2 = (b: number) => [...codes(b), ...get(THREE), ...vAnd];
  const body = [
    ...i32c(3), ...bSplat, ...set(THREE),
    // the codes as bytes (all in 0..7: no saturation)
    ...Array.from({ length: 16 }, (_, v) => [
      ...i32c(0), ...res(4 * v), ...res(4 * v + 1), ...hNarrowS, ...res(4 * v + 2), ...res(4 * v + 3), ...hNarrowS, ...bNarrowU,
      ...vstore(K_CODES8 + 16 * v),
    ]).flat(),
    ...[0, 16].flatMap((h) => [
      ...vZero, ...set(ACC),
      ...Array.from({ length: 8 }, (_, k) => [
        ...get(ACC), ...codes(32 * k + h), ...get(THREE), ...bGtU, ...i32c(1 << k), ...bSplat, ...vAnd, ...vOr, ...set(ACC),
      ]).flat(),
      ...i32c(0), ...get(ACC), ...vstore(K_Q3OUT + h),
    ]),
    ...[0, 128].flatMap((j) => [0, 16].flatMap((l) => [
      ...i32c(0),
      ...low2(j + l), ...low2(j + l + 32), ...i32c(2), ...bShl, ...vOr,
      ...low2(j + l + 64), ...i32c(4), ...bShl, ...vOr, ...low2(j + l + 96), ...i32c(6), ...bShl, ...vOr,
      ...vstore(K_Q3OUT + 32 + j / 4 + l),
    ])),
  ];
  return [...vec([[2, V128]].map(([c, t]) => [...uleb(c), t])), ...body, 0x0b];
}

function moduleBytes(): Uint8Array<ArrayBuffer> {
  const type = [0x60, ...vec([[I32], [I32], [I32], [F32], [F32], [I32]]), ...vec([])];
  const typeQx = [0x60, ...vec([[I32], [I32], [I32]]), ...vec([])];
  const typeRq = [0x60, ...vec([[I32], [I32], [I32], [I32], [I32]]), ...vec([])];
  const typePrep = [0x60, ...vec([[I32], [I32], [I32]]), ...vec([[I32]])];
  const typeVoid = [0x60, ...vec([]), ...vec([])];
  const types = section(1, vec([type, typeQx, typeRq, typePrep, typeVoid]));
  const funcs = section(3, vec([[0], [0], [1], [1], [3], [2], [4]]));
  const mem = section(5, vec([[0x00, 1]]));
  const exports = section(7, vec([
    [...str('qkx2'), 0x00, 0], [...str('qkx2_mad'), 0x00, 1], [...str('qx'), 0x00, 2], [...str('q3'), 0x00, 3], [...str('prep'), 0x00, 4], [...str('requant'), 0x00, 5], [...str('pack3'), 0x00, 6], [...str('memory'), 0x02, 0],
  ]));
  const bodies = [qkx2Body(false, 32), qkx2Body(true, 16), qxBody(), q3Body(), prepBody(), requantBody(), pack3Body()];
  const code = section(10, vec(bodies.map((b) => [...uleb(b.length), ...b])));
  return new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, ...types, ...funcs, ...mem, ...exports, ...code]);
}

export interface KQuantKernels {
  /**
   * make_qkx2_quants(nGroups4, n, nmax, rmin, rdelta, nstep): run is emitted for n = 32 with squared
   * error (Q4_K/Q5_K), runMad for n = 16 with |error| (Q2_K); n must match.
   */
  run: (nGroups4: number, n: number, nmax: number, rmin: number, rdelta: number, nstep: number) => void;
  runMad: (nGroups4: number, n: number, nmax: number, rmin: number, rdelta: number, nstep: number) => void;
  /** qx(nGroups4, n, nmax): make_qx_quants (rmse_type 1, no weights) */
  qx: (nGroups4: number, n: number, nmax: number) => void;
  /** q3(nGroups4, n, nmax): make_q3_quants (do_rmse) */
  q3: (nGroups4: number, n: number, nmax: number) => void;
  /** prep(nGroups4, n, mode): RAW -> XT, WT (mode 0: none, 1: |x|, 2: Q4_K/Q5_K weights) */
  prep: (nGroups4: number, n: number, mode: number) => number;
  /** requant(nGroups, n, lo, hi, off): codes of RAW for the d/dm in OD/ODM into RES */
  requant: (nGroups: number, n: number, lo: number, hi: number, off: number) => void;
  /** pack3(): Q3_K's hmask and qs from RES to Q3OUT */
  pack3: () => void;
  f32: Float32Array;
  u8: Uint8Array;
  i32: Int32Array;
}

let KERNELS: KQuantKernels | null | undefined;
/** The instantiated kernels, or null without WebAssembly SIMD. */
export function kquantKernels(): KQuantKernels | null {
  if (KERNELS === undefined) {
    KERNELS = null;
    try {
      const bytes = moduleBytes();
      if (typeof WebAssembly === 'object' && WebAssembly.validate(bytes)) {
        const inst = new WebAssembly.Instance(new WebAssembly.Module(bytes), {});
        const ex = inst.exports as Record<string, unknown>;
        const mem = ex.memory as WebAssembly.Memory;
        KERNELS = {
          run: ex.qkx2 as KQuantKernels['run'],
          runMad: ex.qkx2_mad as KQuantKernels['run'],
          qx: ex.qx as KQuantKernels['qx'],
          q3: ex.q3 as KQuantKernels['qx'],
          prep: ex.prep as KQuantKernels['prep'],
          requant: ex.requant as KQuantKernels['requant'],
          pack3: ex.pack3 as KQuantKernels['pack3'],
          f32: new Float32Array(mem.buffer),
          u8: new Uint8Array(mem.buffer),
          i32: new Int32Array(mem.buffer),
        };
      }
    } catch {
      KERNELS = null;
    }
  }
  return KERNELS;
}
