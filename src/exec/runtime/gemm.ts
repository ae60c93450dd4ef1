/**
 * Matrix–matrix kernels for T > 1 tokens (prefill, chunked prefill; speculative verification's
 * `rowwise` calls keep the one-token kernels' sums) in WebAssembly SIMD, a module of its own over the
 * arena's memory (./wasm.ts instantiates it).
 *
 * gemm_f32(w, wStride, x, xStride, y, yStride, nRows, nCols, T), strides in bytes:
 * y[t·yStride + 4r] = Σ_c w[r·wStride + 4c] · x[t·xStride + 4c] for r < nRows, t < T. A register tile
 * of RB weight rows × TB tokens: every weight vector loaded feeds TB dot products and every x vector
 * RB, so the loop does RB + TB loads per RB·TB multiply-adds (the one-row kernels do 1 + TB).
 * Requires nRows % RB = 0, T % TB = 0 (GEMM_TILE), F32 nCols % 4 = 0: the caller runs the rest on the other kernels.
 * Each output sums its columns in four lanes (column c in lane c mod 4, in column order), then the
 * lanes (0 + 1) + 2 + 3: a fixed order that does not depend on T or on the row range, so rows split
 * across workers at multiples of GEMM_TILE.rows give the same bits as one call.
 *
 * Quantized weights do not come here: they take integer activations (./qdot.ts), whose one-token
 * kernel beat an f32 tile over Q8_0 (28 vs 22 GFLOP/s) and keeps prefill's numerics those of decode.
 *
 * When asked (`preferRelaxedSimd`, LLMC_RELAXED_SIMD=on) and WebAssembly relaxed SIMD validates
 * (Chromium, Node ≥ 22; Node 20 once ./node.ts sets its flag) each acc += w·x is one f32x4.relaxed_madd: a fused multiply-add on x86 with FMA and on arm64,
 * a multiply then an add elsewhere, so results may differ in the last bits between machines (never
 * between row ranges or threads of one process: the choice is made once per process). Measured
 * ~1.06–1.09× for F32 on a Zen 5 core, whose separate add pipes already overlap the unfused form.
 */
import { I32, uleb, V128, vec } from '../../core/util/wasm-asm.js';
import { kernelModuleBytes } from './kernel-module.js';
import {
  block, br, brIf, f32Add, f32Load, f32Store, fAdd, fExtract, fFromI32, fMul, fSplat, get, i32Add, i32And, i32c, i32GeU, i32Mul, i32Shl, loop, set, simd, vload, vZero,
} from '../../core/util/wasm-ops.js';
import { kernelModule } from './kernel-store.js';
import { relaxedFmaWanted } from './relaxed.js';

/**
 * Rows × tokens of the register tile (x86 has 16 xmm registers: F32 holds 12 accumulators +
 * 3 weights + 1 x).
 * Measured on a [1376 × 512] weight with 64 tokens, F32 ran ~1.35× the one-token kernel at 3 × 4 and
 * 4 × 3, ~1.15× at 2 × 4. It groups tokens by four as the kernels before them
 * did, so a call's tokens 4k..4k+3 get the same bits whatever T is (the tokens past the last whole
 * group run one by one, on the one-token kernels' sums).
 */
export const GEMM_TILE = { rows: 3, tokens: 4 } as const;

const i32Load16U = (off = 0) => [0x2f, 1, ...uleb(off)];
const load8x8s = (off: number) => simd(0x01, 0, ...uleb(off));
const iLowI16 = simd(0xa7); // i32x4.extend_low_i16x8_s
const iHighI16 = simd(0xa8);
/** f32x4.relaxed_madd(a, b, c) = a·b + c, fused or not as the platform does it (relaxed SIMD). */
const fMadd = simd(0x105);

/** acc += w · x: one relaxed multiply-add, or a multiply then an add (today's rounding). */
const mulAdd = (fma: boolean, acc: number, w: number, x: number) =>
  fma ? [...get(w), ...get(x), ...get(acc), ...fMadd, ...set(acc)] : [...get(acc), ...get(w), ...get(x), ...fMul, ...fAdd, ...set(acc)];

/** while (get(a) < limit) { body } (unsigned compare; body advances a). */
const whileLt = (a: number, limit: number[], body: number[]) => block(loop([...get(a), ...limit, ...i32GeU, ...brIf(1), ...body, ...br(0)]));
const inc = (l: number, by: number[]) => [...get(l), ...by, ...i32Add, ...set(l)];
const hsum = (l: number) => [...get(l), ...fExtract(0), ...get(l), ...fExtract(1), ...f32Add, ...get(l), ...fExtract(2), ...f32Add, ...get(l), ...fExtract(3), ...f32Add];
const range = (n: number) => Array.from({ length: n }, (_, i) => i);

/** The tile loops: row tiles, token tiles, accumulators zeroed, `inner` over the columns, the outputs stored. */
function tiled(L: { R: number; TT: number; WP: number[]; XP: number[]; ACC: number[][] }, inner: number[]): number[] {
  const [W, WS, X, XS, Y, YS, NR, , T] = [0, 1, 2, 3, 4, 5, 6, 7, 8];
  const { R, TT, WP, XP, ACC } = L;
  const store = (i: number, j: number) => [
    // y + (TT + j)·yStride + (R + i)·4
    ...get(Y), ...get(TT), ...i32c(j), ...i32Add, ...get(YS), ...i32Mul, ...i32Add, ...get(R), ...i32c(i), ...i32Add, ...i32c(2), ...i32Shl, ...i32Add,
    ...hsum(ACC[i][j]), ...f32Store(),
  ];
  return [
    ...i32c(0), ...set(R),
    ...whileLt(R, get(NR), [
      ...i32c(0), ...set(TT),
      ...whileLt(TT, get(T), [
        ...WP.flatMap((wp, i) => [...get(W), ...get(R), ...i32c(i), ...i32Add, ...get(WS), ...i32Mul, ...i32Add, ...set(wp)]),
        ...XP.flatMap((xp, j) => [...get(X), ...get(TT), ...i32c(j), ...i32Add, ...get(XS), ...i32Mul, ...i32Add, ...set(xp)]),
        ...ACC.flat().flatMap((a) => [...vZero, ...set(a)]),
        ...inner,
        ...range(ACC.length).flatMap((i) => range(ACC[0].length).flatMap((j) => store(i, j))),
        ...inc(TT, i32c(ACC[0].length)),
      ]),
      ...inc(R, i32c(ACC.length)),
    ]),
  ];
}

function locals(nParams: number, RB: number, TB: number, v128: number) {
  let n = nParams;
  const take = () => n++;
  const R = take();
  const TT = take();
  const C = take();
  const END = take();
  const XO = take();
  const WP = range(RB).map(take);
  const XP = range(TB).map(take);
  const i32Count = n - nParams;
  const ACC = range(RB).map(() => range(TB).map(take));
  const V = range(v128).map(take);
  return { R, TT, C, END, XO, WP, XP, ACC, V, decl: vec([[i32Count, I32], [RB * TB + v128, V128]]) };
}

function gemmF32Body(RB: number, TB: number, fma: boolean): number[] {
  const NC = 7;
  const L = locals(9, RB, TB, RB + 1);
  const { END, WP, XP, ACC, V } = L;
  const WV = V.slice(0, RB);
  const XV = V[RB];
  // The row and token pointers advance together; immediate offsets address the unrolled steps.
  const step = (off: number) => [
    ...WP.flatMap((wp, i) => [...get(wp), ...vload(off), ...set(WV[i])]),
    ...XP.flatMap((xp, j) => [
      ...get(xp), ...vload(off), ...set(XV),
      ...range(RB).flatMap((i) => mulAdd(fma, ACC[i][j], WV[i], XV)),
    ]),
  ];
  const bump = (by: number) => [...WP, ...XP].flatMap((p) => inc(p, i32c(by)));
  const endAt = (cols: number[]) => [...get(WP[0]), ...cols, ...i32c(2), ...i32Shl, ...i32Add, ...set(END)];
  const inner = [
    ...endAt([...get(NC), ...i32c(-16), ...i32And]),
    ...whileLt(WP[0], get(END), [...step(0), ...step(16), ...step(32), ...step(48), ...bump(64)]),
    ...endAt([...get(NC), ...i32c(15), ...i32And]),
    ...whileLt(WP[0], get(END), [...step(0), ...bump(16)]),
  ];
  return [...L.decl, ...tiled(L, inner), 0x0b];
}

/** `shared`: the memory import is a shared memory (the worker pool's arena), as ./wasm.ts's kernels. */
/** The kernel's bytes at the tile shape, with relaxed multiply-adds (`fma`) or without. */
export function gemmModuleBytes(fma: boolean, shared = false): Uint8Array<ArrayBuffer> {
  return kernelModuleBytes([{ name: 'gemm_f32', params: new Array(9).fill(I32), body: gemmF32Body(GEMM_TILE.rows, GEMM_TILE.tokens, fma) }], shared);
}

/** Decided once, at the first kernels built, so every arena of a process sums the same way. */
let useFma: boolean | undefined;

/** Whether the kernels built so far use relaxed multiply-adds (undefined before the first). */
export const gemmUsesFma = (): boolean | undefined => useFma;

type Kernel = (...args: number[]) => void;
export interface GemmKernels {
  f32: Kernel;
  /** The module (a worker pool instantiates it too: MatmulPool.attach). */
  module: WebAssembly.Module;
}

/** The kernels over `memory`, or null where WebAssembly SIMD is unavailable. */
export function gemmKernels(memory: WebAssembly.Memory, shared = false): GemmKernels | null {
  useFma ??= relaxedFmaWanted();
  const fma = useFma;
  const name = `gemm${fma ? '-fma' : ''}${shared ? '-shared' : ''}`;
  const mod = kernelModule(name, () => gemmModuleBytes(fma, shared));
  if (!mod) return null;
  const inst = new WebAssembly.Instance(mod, { env: { memory } });
  return { f32: inst.exports.gemm_f32 as Kernel, module: mod };
}

