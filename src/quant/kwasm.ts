/**
 * make_qkx2_quants (ggml-quants.c) as a WebAssembly SIMD kernel: four groups at a time, one per f32x4
 * lane. Wasm f32 arithmetic is IEEE binary32 with round-to-nearest-even, as ggml's C float code on
 * x86-64 (SSE, no FMA contraction), so the plain C loop order transcribed op for op gives ggml's bits
 * with no Math.fround; per-lane branches become masks (bitselect), which changes no lane's values.
 * The module is assembled here byte by byte (no dependency). Callers fall back to the JS kernel
 * (kmake.ts) when WebAssembly SIMD is unavailable or inputs are extreme (see K_WASM_SAFE_ABS).
 *
 * Memory (one 64 KiB page): groups of n elements are stored transposed, element i of group 4g+k at
 * float index (g*n + i)*4 + k, in XT (values) and WT (weights); LB gets the codes (int32, same layout),
 * OS/OM the scale and -min of group 4g+k at float index 4g+k.
 */

const uleb = (n: number): number[] => {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n) b |= 0x80;
    out.push(b);
  } while (n);
  return out;
};
const sleb = (n: number): number[] => {
  const out: number[] = [];
  for (;;) {
    const b = n & 0x7f;
    n >>= 7;
    if ((n === 0 && !(b & 0x40)) || (n === -1 && b & 0x40)) {
      out.push(b);
      return out;
    }
    out.push(b | 0x80);
  }
};
const vec = (items: number[][]): number[] => [...uleb(items.length), ...items.flat()];
const section = (id: number, body: number[]): number[] => [id, ...uleb(body.length), ...body];
const str = (s: string): number[] => [...uleb(s.length), ...Array.from(s, (c) => c.charCodeAt(0))];

const I32 = 0x7f;
const F32 = 0x7d;
const V128 = 0x7b;

// byte offsets of the regions
export const K_XT = 0;
export const K_WT = 1024;
const LA = 2048; // candidate codes of the current group (int32x4 per element)
export const K_LB = 3072;
export const K_OS = 4096;
export const K_OM = 4160;
/** At most 16 groups of n <= 16, or 8 of n = 32: 256 elements per call. */
export const K_MAX_ELEMENTS = 256;

const get = (i: number) => [0x20, ...uleb(i)];
const set = (i: number) => [0x21, ...uleb(i)];
const i32c = (v: number) => [0x41, ...sleb(v)];
const f32c = (v: number) => [0x43, ...new Uint8Array(new Float32Array([v]).buffer)];
const simd = (code: number, ...imm: number[]) => [0xfd, ...uleb(code), ...imm];
const vload = (off = 0) => simd(0x00, 4, ...uleb(off));
const vstore = (off = 0) => simd(0x0b, 4, ...uleb(off));
const i32Add = [0x6a];
const i32Mul = [0x6c];
const i32LtS = [0x48];
const i32LeS = [0x4c];
const f32Add = [0x92];
const f32Mul = [0x94];
const f32FromI32 = [0xb2];
const f32Splat = simd(0x13);
const i32Splat = simd(0x11);
const fLt = simd(0x43);
const fGt = simd(0x44);
const fEq = simd(0x41);
const vAnd = simd(0x4e);
const vBitselect = simd(0x52);
const vAnyTrue = simd(0x53);
const iAnd = vAnd;
const iSub = simd(0xb1);
const iMinS = simd(0xb6);
const iMaxS = simd(0xb8);
const fAbs = simd(0xe0);
const fNeg = simd(0xe1);
const fAdd = simd(0xe4);
const fSub = simd(0xe5);
const fMul = simd(0xe6);
const fDiv = simd(0xe7);
const fFromI32 = simd(0xfa);
const vZero = simd(0x0c, ...new Array(16).fill(0));
const loop = (body: number[]) => [0x03, 0x40, ...body, 0x0b];
const ifThen = (body: number[]) => [0x04, 0x40, ...body, 0x0b];
const brIf = (d: number) => [0x0d, ...uleb(d)];

/**
 * qkx2(nGroups4, n, nmax, rmin, rdelta, nstep): make_qkx2_quants for 4*nGroups4 groups of n elements
 * (nstep >= 1), error |diff| when mad, diff^2 otherwise.
 */
function qkx2Body(mad: boolean): number[] {
  // params
  const [NG, N, NMAX, RMIN, RDELTA, NSTEP] = [0, 1, 2, 3, 4, 5];
  // i32 locals
  const [G, I, P, XB, IS, END] = [6, 7, 8, 9, 10, 11];
  // f32 local
  const A = 12;
  // v128 locals
  let k = 13;
  const [MIN, MAX, SW, SX, ISC, SC, BEST, SL, SL2, SXL, XI, WI, LF, TS, TM, CUR, MASK, D, DEGEN, MIN0, NMAXV, L, WL, TMP] =
    Array.from({ length: 24 }, () => k++);

  /** nearest_int(iscale * (x - min)) clamped to [0, nmax], as i32x4, from XI. */
  const code = [
    ...get(ISC), ...get(XI), ...get(MIN), ...fSub, ...fMul,
    ...f32c(12582912), ...f32Splat, ...fAdd,
    ...i32c(0x7fffff), ...i32Splat, ...iAnd,
    ...i32c(0x400000), ...i32Splat, ...iSub,
    ...get(NMAXV), ...iMinS, ...vZero, ...iMaxS,
  ];
  const err = (diff: number[]) => (mad ? [...diff, ...fAbs] : [...diff, ...set(TMP), ...get(TMP), ...get(TMP), ...fMul]);
  /** for (p = XB; p < END; p += 16) body, with XI/WI loaded (n >= 1). */
  const forElems = (body: number[]) => [
    ...get(XB), ...set(P),
    ...loop([
      ...get(P), ...vload(K_XT), ...set(XI),
      ...get(P), ...vload(K_WT), ...set(WI),
      ...body,
      ...get(P), ...i32c(16), ...i32Add, ...set(P),
      ...get(P), ...get(END), ...i32LtS, ...brIf(0),
    ]),
  ];
  /** Address of element (p - XB) in LA, on the stack. */
  const laAddr = [...get(P), ...get(XB), ...[0x6b], ...i32c(LA), ...i32Add];

  const body = [
    ...get(NMAX), ...i32Splat, ...set(NMAXV),
    ...i32c(0), ...set(G),
    ...loop([
      // XB = G*N*16, END = XB + N*16
      ...get(G), ...get(N), ...i32Mul, ...i32c(16), ...i32Mul, ...set(XB),
      ...get(XB), ...get(N), ...i32c(16), ...i32Mul, ...i32Add, ...set(END),
      // min/max/sum_w/sum_x
      ...get(XB), ...vload(K_XT), ...set(XI),
      ...get(XB), ...vload(K_WT), ...set(WI),
      ...get(XI), ...set(MIN), ...get(XI), ...set(MAX),
      ...get(WI), ...set(SW), ...get(WI), ...get(XI), ...fMul, ...set(SX),
      ...get(XB), ...i32c(16), ...i32Add, ...set(P),
      ...get(P), ...get(END), ...i32LtS,
      ...ifThen(loop([
        ...get(P), ...vload(K_XT), ...set(XI),
        ...get(P), ...vload(K_WT), ...set(WI),
        ...get(XI), ...get(MIN), ...get(XI), ...get(MIN), ...fLt, ...vBitselect, ...set(MIN),
        ...get(XI), ...get(MAX), ...get(XI), ...get(MAX), ...fGt, ...vBitselect, ...set(MAX),
        ...get(SW), ...get(WI), ...fAdd, ...set(SW),
        ...get(SX), ...get(WI), ...get(XI), ...fMul, ...fAdd, ...set(SX),
        ...get(P), ...i32c(16), ...i32Add, ...set(P),
        ...get(P), ...get(END), ...i32LtS, ...brIf(0),
      ])),
      ...vZero, ...get(MIN), ...get(MIN), ...vZero, ...fGt, ...vBitselect, ...set(MIN),
      ...get(MAX), ...get(MIN), ...fEq, ...set(DEGEN),
      ...get(MIN), ...set(MIN0),
      // iscale = nmax/(max - min); scale = 1/iscale; first codes and their error
      ...get(NMAX), ...f32FromI32, ...f32Splat, ...get(MAX), ...get(MIN), ...fSub, ...fDiv, ...set(ISC),
      ...f32c(1), ...f32Splat, ...get(ISC), ...fDiv, ...set(SC),
      ...vZero, ...set(BEST),
      ...forElems([
        ...code, ...set(L),
        ...get(P), ...get(L), ...vstore(K_LB),
        ...get(BEST), ...get(WI),
        ...err([...get(SC), ...get(L), ...fFromI32, ...fMul, ...get(MIN), ...fAdd, ...get(XI), ...fSub]),
        ...fMul, ...fAdd, ...set(BEST),
      ]),
      ...i32c(0), ...set(IS),
      ...loop([
        // iscale = (rmin + rdelta*is + nmax)/(max - min)
        ...get(RMIN), ...get(RDELTA), ...get(IS), ...f32FromI32, ...f32Mul, ...f32Add,
        ...get(NMAX), ...f32FromI32, ...f32Add, ...set(A),
        ...get(A), ...f32Splat, ...get(MAX), ...get(MIN), ...fSub, ...fDiv, ...set(ISC),
        ...vZero, ...set(SL), ...vZero, ...set(SL2), ...vZero, ...set(SXL),
        ...forElems([
          ...laAddr, ...code, ...vstore(0),
          ...laAddr, ...vload(0), ...fFromI32, ...set(LF),
          ...get(WI), ...get(LF), ...fMul, ...set(WL),
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
          ...forElems([
            ...get(CUR), ...get(WI),
            ...err([...get(TS), ...laAddr, ...vload(0), ...fFromI32, ...fMul, ...get(TM), ...fAdd, ...get(XI), ...fSub]),
            ...fMul, ...fAdd, ...set(CUR),
          ]),
          ...get(MASK), ...get(CUR), ...get(BEST), ...fLt, ...vAnd, ...set(MASK),
          ...get(MASK), ...vAnyTrue,
          ...ifThen([
            ...forElems([
              ...get(P), ...laAddr, ...vload(0), ...get(P), ...vload(K_LB), ...get(MASK), ...vBitselect, ...vstore(K_LB),
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
      ...ifThen(forElems([...get(P), ...vZero, ...get(P), ...vload(K_LB), ...get(DEGEN), ...vBitselect, ...vstore(K_LB)])),
      ...get(G), ...i32c(16), ...i32Mul,
      ...vZero, ...get(SC), ...get(DEGEN), ...vBitselect, ...vstore(K_OS),
      ...get(G), ...i32c(16), ...i32Mul,
      ...get(MIN0), ...get(MIN), ...get(DEGEN), ...vBitselect, ...fNeg, ...vstore(K_OM),
      ...get(G), ...i32c(1), ...i32Add, ...set(G),
      ...get(G), ...get(NG), ...i32LtS, ...brIf(0),
    ]),
  ];
  const locals = vec([[6, I32], [1, F32], [24, V128]].map(([c, t]) => [...uleb(c), t]));
  return [...locals, ...body, 0x0b];
}

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
  const code = [
    ...get(ISC), ...get(XI), ...fMul,
    ...f32c(12582912), ...f32Splat, ...fAdd,
    ...i32c(0x7fffff), ...i32Splat, ...iAnd,
    ...i32c(0x400000), ...i32Splat, ...iSub,
    ...get(NMAXV), ...i32c(1), ...i32Splat, ...iSub, ...iMinS,
    ...i32c(0), ...get(NMAX), ...[0x6b], ...i32Splat, ...iMaxS,
  ];
  const forElems = (body: number[]) => [
    ...get(XB), ...set(P),
    ...loop([
      ...get(P), ...vload(K_XT), ...set(XI),
      ...body,
      ...get(P), ...i32c(16), ...i32Add, ...set(P),
      ...get(P), ...get(END), ...i32LtS, ...brIf(0),
    ]),
  ];
  const laAddr = [...get(P), ...get(XB), ...[0x6b], ...i32c(LA), ...i32Add];
  /** sumlx += w*x*l; suml2 += w*l*l with w = x*x, l (float) in LF. */
  const sums = [
    ...get(XI), ...get(XI), ...fMul, ...set(W),
    ...get(SLX), ...get(W), ...get(XI), ...fMul, ...get(LF), ...fMul, ...fAdd, ...set(SLX),
    ...get(SL2), ...get(W), ...get(LF), ...fMul, ...get(LF), ...fMul, ...fAdd, ...set(SL2),
  ];
  const body = [
    ...get(NMAX), ...i32Splat, ...set(NMAXV),
    ...i32c(0), ...set(G),
    ...loop([
      ...get(G), ...get(N), ...i32Mul, ...i32c(16), ...i32Mul, ...set(XB),
      ...get(XB), ...get(N), ...i32c(16), ...i32Mul, ...i32Add, ...set(END),
      // max = the x of the largest |x| (first one wins ties)
      ...vZero, ...set(MAXV), ...vZero, ...set(AMAX),
      ...forElems([
        ...get(XI), ...fAbs, ...set(AX),
        ...get(AX), ...get(AMAX), ...fGt, ...set(MASK),
        ...get(AX), ...get(AMAX), ...get(MASK), ...vBitselect, ...set(AMAX),
        ...get(XI), ...get(MAXV), ...get(MASK), ...vBitselect, ...set(MAXV),
      ]),
      ...get(AMAX), ...f32c(Math.fround(1e-15)), ...f32Splat, ...fLt, ...set(SMALL),
      // iscale = -nmax/max; first codes and sums
      ...i32c(0), ...get(NMAX), ...[0x6b], ...f32FromI32, ...f32Splat, ...get(MAXV), ...fDiv, ...set(ISC),
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
          ...get(A), ...f32Splat, ...get(MAXV), ...fDiv, ...set(ISC),
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

function moduleBytes(): Uint8Array<ArrayBuffer> {
  const type = [0x60, ...vec([[I32], [I32], [I32], [F32], [F32], [I32]]), ...vec([])];
  const typeQx = [0x60, ...vec([[I32], [I32], [I32]]), ...vec([])];
  const types = section(1, vec([type, typeQx]));
  const funcs = section(3, vec([[0], [0], [1]]));
  const mem = section(5, vec([[0x00, 1]]));
  const exports = section(7, vec([
    [...str('qkx2'), 0x00, 0], [...str('qkx2_mad'), 0x00, 1], [...str('qx'), 0x00, 2], [...str('memory'), 0x02, 0],
  ]));
  const bodies = [qkx2Body(false), qkx2Body(true), qxBody()];
  const code = section(10, vec(bodies.map((b) => [...uleb(b.length), ...b])));
  return new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, ...types, ...funcs, ...mem, ...exports, ...code]);
}

export interface Qkx2Kernel {
  /** qkx2 / qkx2_mad(nGroups4, n, nmax, rmin, rdelta, nstep) */
  run: (nGroups4: number, n: number, nmax: number, rmin: number, rdelta: number, nstep: number) => void;
  runMad: (nGroups4: number, n: number, nmax: number, rmin: number, rdelta: number, nstep: number) => void;
  /** qx(nGroups4, n, nmax): make_qx_quants (rmse_type 1, no weights) */
  qx: (nGroups4: number, n: number, nmax: number) => void;
  f32: Float32Array;
  i32: Int32Array;
}

let KERNEL: Qkx2Kernel | null | undefined;
/** The instantiated kernel, or null without WebAssembly SIMD (or with LLMC_QUANT_NO_WASM set). */
export function qkx2Kernel(): Qkx2Kernel | null {
  if (KERNEL === undefined) {
    KERNEL = null;
    try {
      const bytes = moduleBytes();
      if (typeof WebAssembly === 'object' && !process.env.LLMC_QUANT_NO_WASM && WebAssembly.validate(bytes)) {
        const inst = new WebAssembly.Instance(new WebAssembly.Module(bytes), {});
        const ex = inst.exports as Record<string, unknown>;
        const mem = ex.memory as WebAssembly.Memory;
        KERNEL = {
          run: ex.qkx2 as Qkx2Kernel['run'],
          runMad: ex.qkx2_mad as Qkx2Kernel['run'],
          qx: ex.qx as Qkx2Kernel['qx'],
          f32: new Float32Array(mem.buffer),
          i32: new Int32Array(mem.buffer),
        };
      }
    } catch {
      KERNEL = null;
    }
  }
  return KERNEL;
}

/** Inputs with |x| below this (and finite) take the wasm path; anything wilder stays on the JS transcription. */
export const K_WASM_SAFE_ABS = 1e15;
