/**
 * WebAssembly SIMD matmul kernels (F32, F16, Q8_0, Q4_0, Q5_0, Q2_K, Q3_K, Q4_K, Q6_K; the quantized ones on integer
 * activations as llama.cpp, ./qdot.ts), assembled here byte by byte so the runtime stays
 * dependency-free and browser-safe. Scalar JS reaches ~1/4 of onnxruntime's single-thread matvec
 * speed on a 30M model; f32x4 lanes close most of that gap.
 *
 * Memory layout of one instance (one per loaded model): [0, 256 KiB) f16 → f32 table (Q8_0 scales),
 * then the x and y scratch buffers, the quantized-x scratch, then weights.bin copied in at a 64-byte aligned base. The
 * memory never grows after setup, so typed-array views over it stay valid.
 */
import { f16Table } from '../../core/util/half.js';
import { F32, I32, sleb, uleb, V128, vec } from '../../core/util/wasm-asm.js';
import { kernelModuleBytes } from './kernel-module.js';
import { kernelModule } from './kernel-store.js';
import { GEMM_TILE, gemmKernels, type GemmKernels } from './gemm.js';
import { MAX_GROUP, MatmulPool, runEach, runPost, runPrep, type PoolOptions, type Post, type Prep } from './pool.js';
import { SILU_MUL_KERNEL } from './activation.js';
import { rmsFactor, rmsScaleKernel } from './norm.js';
import { ADD_KERNEL, ropeKernel } from './epilogue.js';
import { QDOT_ACT, QDOT_FORMATS, QDOT_KERNELS, Q8_0_BYTES, Q8_K_BYTES, type QdotFormat } from './qdot.js';
import { QACT_KERNELS } from './qact.js';
import { QGEMM_KERNELS, QGEMM_TILE, QGEMM_WIDEN, QX16_BYTES, type QgemmFormat } from './qgemm.js';
import { relaxedIntegerDots } from './relaxed.js';

/**
 * Kernel bytes are built as nested arrays and flattened once (moduleBytes): spreading small arrays
 * into large ones made assembling cost tens of milliseconds of start-up.
 */
type Bytes = (number | Bytes)[];
const flatten = (b: Bytes): number[] => (b as unknown[]).flat(Infinity) as number[];

const op = {
  block: [0x02, 0x40],
  loop: [0x03, 0x40],
  end: [0x0b],
  br: (d: number) => [0x0c, uleb(d)],
  brIf: (d: number) => [0x0d, uleb(d)],
  get: (i: number) => [0x20, uleb(i)],
  set: (i: number) => [0x21, uleb(i)],
  i32: (v: number) => [0x41, sleb(v)],
  f32: (v: number) => [0x43, ...new Uint8Array(new Float32Array([v]).buffer)],
  i32Add: [0x6a],
  i32Mul: [0x6c],
  i32And: [0x71],
  i32Shl: [0x74],
  i32GeU: [0x4f],
  f32Add: [0x92],
  f32Mul: [0x94],
  f32Load: (off = 0) => [0x2a, 2, uleb(off)],
  f32Store: (off = 0) => [0x38, 2, uleb(off)],
  i32Load16U: (off = 0) => [0x2f, 1, uleb(off)],
  simd: (code: number, ...imm: Bytes): Bytes => [0xfd, uleb(code), imm],
};
const v = {
  load: (off = 0) => op.simd(0x00, 0, uleb(off)), // align 2^0: addresses need not be 16-aligned
  load8x8s: (off = 0) => op.simd(0x01, 0, uleb(off)),
  zero: () => op.simd(0x0c, ...new Array(16).fill(0)),
  f32x4Splat: () => op.simd(0x13),
  f32x4Lane: (l: number) => op.simd(0x1f, l),
  f32x4Add: () => op.simd(0xe4),
  f32x4Mul: () => op.simd(0xe6),
  i8x16Splat: () => op.simd(0x0f),
  and: () => op.simd(0x4e),
  i8x16ShrU: () => op.simd(0x6d),
  i8x16Sub: () => op.simd(0x71),
  i16x8LowI8: () => op.simd(0x87),
  i16x8HighI8: () => op.simd(0x88),
  i16x8LowU8: () => op.simd(0x89),
  i16x8HighU8: () => op.simd(0x8a),
  f32x4Sub: () => op.simd(0xe5),
  i32x4Splat: () => op.simd(0x11),
  or: () => op.simd(0x50),
  i32x4Shl: () => op.simd(0xab),
  i32x4LowU16: () => op.simd(0xa9),
  i32x4HighU16: () => op.simd(0xaa),
  i32x4LowI16: () => op.simd(0xa7),
  i32x4HighI16: () => op.simd(0xa8),
  f32x4FromI32: () => op.simd(0xfa),
};

/** `for (; a < limit; ) { body }` where the caller's body advances `a`. */
const whileLt = (a: Bytes, limit: Bytes, body: Bytes): Bytes => [
  op.block,
  op.loop,
  a,
  limit,
  op.i32GeU,
  op.brIf(1),
  body,
  op.br(0),
  op.end,
  op.end,
];

/** Horizontal sum of a v128 local into the f32 stack. */
const hsum = (l: number): Bytes => [
  op.get(l), v.f32x4Lane(0),
  op.get(l), v.f32x4Lane(1), op.f32Add,
  op.get(l), v.f32x4Lane(2), op.f32Add,
  op.get(l), v.f32x4Lane(3), op.f32Add,
];

/**
 * matmul_f32(w, wStride, x, xStride, y, yStride, nRows, nCols, T):
 * y[t*yStride + 4r] = Σ_c w[r*wStride + 4c] · x[t*xStride + 4c]  (strides in bytes).
 */
function matmulF32Body(): Bytes {
  // params 0..8; locals: 9 r, 10 t, 11 wrow, 12 xp, 13 c, 14 n16, 15 p, 16 s(f32), 17..20 acc(v128)
  const [W, WS, X, XS, Y, YS, NR, NC, T] = [0, 1, 2, 3, 4, 5, 6, 7, 8];
  const [R, TT, WROW, XP, C, N16, P, S] = [9, 10, 11, 12, 13, 14, 15, 16];
  const A = [17, 18, 19, 20];
  const fma = (acc: number, off: number) => [
    op.get(acc),
    op.get(WROW), op.get(P), op.i32Add, v.load(off),
    op.get(XP), op.get(P), op.i32Add, v.load(off),
    v.f32x4Mul(), v.f32x4Add(), op.set(acc),
  ];
  const inner = [
    A.map((a) => [v.zero(), op.set(a)]),
    op.i32(0), op.set(C),
    whileLt(op.get(C), op.get(N16), [
      op.get(C), op.i32(2), op.i32Shl, op.set(P),
      fma(A[0], 0), fma(A[1], 16), fma(A[2], 32), fma(A[3], 48),
      op.get(C), op.i32(16), op.i32Add, op.set(C),
    ]),
    op.get(A[0]), op.get(A[1]), v.f32x4Add(), op.get(A[2]), v.f32x4Add(), op.get(A[3]), v.f32x4Add(), op.set(A[0]),
    hsum(A[0]), op.set(S),
    whileLt(op.get(C), op.get(NC), [
      op.get(C), op.i32(2), op.i32Shl, op.set(P),
      op.get(S),
      op.get(WROW), op.get(P), op.i32Add, op.f32Load(),
      op.get(XP), op.get(P), op.i32Add, op.f32Load(),
      op.f32Mul, op.f32Add, op.set(S),
      op.get(C), op.i32(1), op.i32Add, op.set(C),
    ]),
    // y + t*yStride + r*4
    op.get(Y), op.get(TT), op.get(YS), op.i32Mul, op.i32Add, op.get(R), op.i32(2), op.i32Shl, op.i32Add,
    op.get(S), op.f32Store(),
  ];
  const body = [
    op.get(NC), op.i32(-16), op.i32And, op.set(N16),
    op.i32(0), op.set(R),
    whileLt(op.get(R), op.get(NR), [
      op.get(W), op.get(R), op.get(WS), op.i32Mul, op.i32Add, op.set(WROW),
      op.i32(0), op.set(TT),
      whileLt(op.get(TT), op.get(T), [
        op.get(X), op.get(TT), op.get(XS), op.i32Mul, op.i32Add, op.set(XP),
        inner,
        op.get(TT), op.i32(1), op.i32Add, op.set(TT),
      ]),
      op.get(R), op.i32(1), op.i32Add, op.set(R),
    ]),
  ];
  return [vec([[7, I32], [1, F32], [4, V128]].map(([n, t]) => [n, t])), body, op.end];
}

/**
 * matmul4_f32(w, wStride, x, xStride, y, yStride, nRows, nCols, G): like matmul_f32 for T = 4G tokens,
 * four tokens per pass over a weight row, so each weight vector loaded feeds four dot products (prefill).
 */
function matmul4F32Body(): Bytes {
  const [W, WS, X, XS, Y, YS, NR, NC, G] = [0, 1, 2, 3, 4, 5, 6, 7, 8];
  const [R, GG, WROW, C, N8, P, CC] = [9, 10, 11, 12, 13, 14, 15];
  const XK = [16, 17, 18, 19];
  const S = 20; // f32
  const [W0, W1] = [21, 22];
  const ACC = [23, 24, 25, 26, 27, 28, 29, 30]; // token k: ACC[2k], ACC[2k+1]
  const fma = (acc: number, wv: number, xk: number, off: number) => [
    op.get(acc), op.get(wv),
    op.get(xk), op.get(P), op.i32Add, v.load(off),
    v.f32x4Mul(), v.f32x4Add(), op.set(acc),
  ];
  const finish = (k: number) => [
    op.get(ACC[2 * k]), op.get(ACC[2 * k + 1]), v.f32x4Add(), op.set(ACC[2 * k]),
    hsum(ACC[2 * k]), op.set(S),
    op.get(N8), op.set(CC),
    whileLt(op.get(CC), op.get(NC), [
      op.get(CC), op.i32(2), op.i32Shl, op.set(P),
      op.get(S),
      op.get(WROW), op.get(P), op.i32Add, op.f32Load(),
      op.get(XK[k]), op.get(P), op.i32Add, op.f32Load(),
      op.f32Mul, op.f32Add, op.set(S),
      op.get(CC), op.i32(1), op.i32Add, op.set(CC),
    ]),
    // y + (4g + k) * yStride + r * 4
    op.get(Y), op.get(GG), op.i32(2), op.i32Shl, op.i32(k), op.i32Add, op.get(YS), op.i32Mul, op.i32Add,
    op.get(R), op.i32(2), op.i32Shl, op.i32Add,
    op.get(S), op.f32Store(),
  ];
  const group = [
    op.get(X), op.get(GG), op.i32(2), op.i32Shl, op.get(XS), op.i32Mul, op.i32Add, op.set(XK[0]),
    op.get(XK[0]), op.get(XS), op.i32Add, op.set(XK[1]),
    op.get(XK[1]), op.get(XS), op.i32Add, op.set(XK[2]),
    op.get(XK[2]), op.get(XS), op.i32Add, op.set(XK[3]),
    ACC.map((a) => [v.zero(), op.set(a)]),
    op.i32(0), op.set(C),
    whileLt(op.get(C), op.get(N8), [
      op.get(C), op.i32(2), op.i32Shl, op.set(P),
      op.get(WROW), op.get(P), op.i32Add, v.load(0), op.set(W0),
      op.get(WROW), op.get(P), op.i32Add, v.load(16), op.set(W1),
      [0, 1, 2, 3].map((k) => [fma(ACC[2 * k], W0, XK[k], 0), fma(ACC[2 * k + 1], W1, XK[k], 16)]),
      op.get(C), op.i32(8), op.i32Add, op.set(C),
    ]),
    [0, 1, 2, 3].map(finish),
  ];
  const body = [
    op.get(NC), op.i32(-8), op.i32And, op.set(N8),
    op.i32(0), op.set(R),
    whileLt(op.get(R), op.get(NR), [
      op.get(W), op.get(R), op.get(WS), op.i32Mul, op.i32Add, op.set(WROW),
      op.i32(0), op.set(GG),
      whileLt(op.get(GG), op.get(G), [
        group,
        op.get(GG), op.i32(1), op.i32Add, op.set(GG),
      ]),
      op.get(R), op.i32(1), op.i32Add, op.set(R),
    ]),
  ];
  return [vec([[11, I32], [1, F32], [10, V128]].map(([n, t]) => [n, t])), body, op.end];
}

/**
 * F16 (w, wStride, x, xStride, y, yStride, nRows, nCols, T, table), one token per pass. Halves widen
 * in SIMD: f32 bits of |h| are (h & 0x7fff) << 13 scaled by 2^112 (exact for normals and subnormals;
 * weights hold no inf/nan), then the sign bit is or-ed back.
 */
function matmulF16Body(): Bytes {
  const [W, WS, X, XS, Y, YS, NR, NC, T, TAB] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9];
  const [R, TT, WROW, XP, C, N8] = [10, 11, 12, 13, 14, 15];
  const S = 16; // f32
  const [ACC, H, V] = [17, 18, 19]; // v128
  const widen = (hi: boolean) => [
    op.get(H), (hi ? v.i32x4HighU16() : v.i32x4LowU16()), op.set(V),
    op.get(V), op.i32(0x7fff), v.i32x4Splat(), v.and(), op.i32(13), v.i32x4Shl(),
    op.f32(2 ** 112), v.f32x4Splat(), v.f32x4Mul(),
    op.get(V), op.i32(0x8000), v.i32x4Splat(), v.and(), op.i32(16), v.i32x4Shl(),
    v.or(),
  ];
  const fma = (hi: boolean) => [
    op.get(ACC), widen(hi),
    op.get(XP), op.get(C), op.i32(2), op.i32Shl, op.i32Add, v.load(hi ? 16 : 0),
    v.f32x4Mul(), v.f32x4Add(), op.set(ACC),
  ];
  const body = [
    op.get(NC), op.i32(-8), op.i32And, op.set(N8),
    op.i32(0), op.set(R),
    whileLt(op.get(R), op.get(NR), [
      op.get(W), op.get(R), op.get(WS), op.i32Mul, op.i32Add, op.set(WROW),
      op.i32(0), op.set(TT),
      whileLt(op.get(TT), op.get(T), [
        op.get(X), op.get(TT), op.get(XS), op.i32Mul, op.i32Add, op.set(XP),
        v.zero(), op.set(ACC),
        op.i32(0), op.set(C),
        whileLt(op.get(C), op.get(N8), [
          op.get(WROW), op.get(C), op.i32(1), op.i32Shl, op.i32Add, v.load(0), op.set(H),
          fma(false), fma(true),
          op.get(C), op.i32(8), op.i32Add, op.set(C),
        ]),
        hsum(ACC), op.set(S),
        whileLt(op.get(C), op.get(NC), [
          op.get(S),
          op.get(TAB), op.get(WROW), op.get(C), op.i32(1), op.i32Shl, op.i32Add, op.i32Load16U(), op.i32(2), op.i32Shl, op.i32Add, op.f32Load(),
          op.get(XP), op.get(C), op.i32(2), op.i32Shl, op.i32Add, op.f32Load(),
          op.f32Mul, op.f32Add, op.set(S),
          op.get(C), op.i32(1), op.i32Add, op.set(C),
        ]),
        op.get(Y), op.get(TT), op.get(YS), op.i32Mul, op.i32Add, op.get(R), op.i32(2), op.i32Shl, op.i32Add,
        op.get(S), op.f32Store(),
        op.get(TT), op.i32(1), op.i32Add, op.set(TT),
      ]),
      op.get(R), op.i32(1), op.i32Add, op.set(R),
    ]),
  ];
  return [vec([[6, I32], [1, F32], [3, V128]].map(([n, t]) => [n, t])), body, op.end];
}

const I32S = (n: number) => new Array(n).fill(I32);

/** `shared`: the memory import is a shared memory (the worker pool's). */
function moduleBytes(shared = false): Uint8Array<ArrayBuffer> {
  const fns: [string, number, () => Bytes][] = [
    ['matmul_f32', 9, matmulF32Body],
    ['matmul4_f32', 9, matmul4F32Body],
    ['matmul_f16', 10, matmulF16Body],
    ...Object.values(QDOT_KERNELS).map(({ name, body }): [string, number, () => Bytes] => [name, 10, body]),
    ...Object.values(QACT_KERNELS).map(({ name, body }): [string, number, () => Bytes] => [name, 3, body]),
    ...Object.values(QGEMM_KERNELS).map(({ name, body }): [string, number, () => Bytes] => [name, 10, body]),
    [QGEMM_WIDEN.name, 3, QGEMM_WIDEN.body],
    [SILU_MUL_KERNEL.name, 3, SILU_MUL_KERNEL.body],
    [RMS_SCALE.name, 3, RMS_SCALE.body],
    [ADD_KERNEL.name, 3, ADD_KERNEL.body],
    [ROPE.name, 3, ROPE.body],
  ];
  return kernelModuleBytes(fns.map(([name, params, body]) => ({ name, params: I32S(params), body: flatten(body()) })), shared);
}

function wasmModule(shared = false): WebAssembly.Module | null {
  const name = relaxedIntegerDots() ? 'matmul-rdot' : 'matmul'; // ./qdot.ts's kernels differ with it
  return shared ? kernelModule(`${name}-shared`, () => moduleBytes(true)) : kernelModule(name, moduleBytes);
}

export function wasmSimdAvailable(): boolean {
  return wasmModule() !== null;
}

type MatmulFn = (...args: number[]) => void;

/** The formats with wasm kernels (the others run on the JS kernels). */
export type WasmFormat = 'F32' | 'F16' | QdotFormat;
export const WASM_FORMATS: readonly string[] = ['F32', 'F16', ...QDOT_FORMATS];

const TABLE_BYTES = 65536 * 4;
/** A float64 after the f16 table: RMSNorm's factor for ./norm.ts's rms_scale (the x scratch starts a cache line on). */
export const NORM_R_SLOT = TABLE_BYTES;
const RMS_SCALE = rmsScaleKernel(NORM_R_SLOT);
/** An i32 after it: half a head's size for ./epilogue.ts's rope_f32. */
const ROPE_HALF_SLOT = NORM_R_SLOT + 8;
const ROPE = ropeKernel(ROPE_HALF_SLOT);
const PAGE = 65536;
/** Bytes for each of the x and y scratch buffers: prefill runs in chunks of tokens that fit. */
const SCRATCH_BYTES = 8 << 20;
/** Tokens per kernel call: more tokens per pass over a weight row means less weight traffic. */
const chunkFor = (maxDim: number) => Math.max(4, Math.min(64, Math.floor(SCRATCH_BYTES / 4 / maxDim)));
/**
 * Bytes of quantized x for a chunk of tokens: q8_K blocks take more per value (308 / 256) than q8_0's
 * (36 / 32); sized for q8_0 alone, a chunk of 64 tokens of maxDim values in q8_K ran 60 bytes a token
 * past the region (into the weights, where maxDim was a K-quant weight's width).
 */
const qScratchFor = (maxDim: number) => chunkFor(maxDim) * Math.max(Math.ceil(maxDim / 32) * Q8_0_BYTES, Math.ceil(maxDim / 256) * Q8_K_BYTES);
/** Bytes of the tiled kernels' pre-widened x (./qgemm.ts) for a chunk of tokens. */
const x16ScratchFor = (maxDim: number) => chunkFor(maxDim) * Math.ceil(maxDim / 32) * QX16_BYTES;
let quantizedTiles = true;
/** Turn the tiled integer kernels off (the one-token kernels then run every T; the same bits): for A/B benches and tests. */
export function useQuantizedTiles(on: boolean): void {
  quantizedTiles = on;
}
/** Whether a tiled integer kernel (./qgemm.ts) serves `format` at n tokens. */
const tiledQ = (format: WasmFormat, n: number): format is QgemmFormat => quantizedTiles && n >= QGEMM_TILE.tokens && format in QGEMM_KERNELS;

/** Where an arena's regions start: f16 table, x and y scratch, quantized x, widened x, then the weights (64-byte aligned). */
function arenaLayout(maxDim: number) {
  const chunk = chunkFor(maxDim);
  const scratch = chunk * maxDim * 4;
  const xBase = TABLE_BYTES + 64;
  const yBase = xBase + scratch;
  const qBase = yBase + scratch;
  const x16Base = Math.ceil((qBase + qScratchFor(maxDim)) / 64) * 64;
  const weightsBase = Math.ceil((x16Base + x16ScratchFor(maxDim)) / 64) * 64;
  return { chunk, xBase, yBase, qBase, x16Base, weightsBase };
}

/**
 * RoPE for matmulGroupNormed's first `matrices` outputs (q, k: heads of 2·half rows), one position:
 * its `half` cos and sin values from cos / sin at `row`·half.
 */
export interface GroupRope {
  matrices: number;
  half: number;
  cos: Float32Array;
  sin: Float32Array;
  row: number;
}

/** One output of WasmArena.matmulGroup: all rows of the weight at byte `ptr` into y. */
export interface GroupOut {
  ptr: number;
  nRows: number;
  y: Float32Array;
  yStride: number;
}

/** One model's wasm memory: f16 table, x/y scratch, and the weights. */
export class WasmArena {
  readonly memory: WebAssembly.Memory;
  readonly weightsBase: number;
  private readonly f32: MatmulFn;
  private readonly f32x4tok: MatmulFn;
  private readonly f16: MatmulFn;
  /** x quantizers (./qact.ts): (x, out, nBlocks), on the calling thread. */
  private readonly quantQ8_0: MatmulFn;
  private readonly quantQ8_K: MatmulFn;
  private readonly xBase: number;
  /** Quantized x (./qdot.ts's layout, written by ./qact.ts's quantizers). */
  private readonly qBase: number;
  /** The tiled kernels' x: the quantized x widened to i16 (./qgemm.ts's widen_q8_0), 16-byte aligned. */
  private readonly x16Base: number;
  private readonly qgemm: Record<QgemmFormat, MatmulFn>;
  private readonly widenQ8_0: MatmulFn;
  private readonly yBase: number;
  private heap: Float32Array;
  /** The memory as float64s (RMSNorm's factor at NORM_R_SLOT). */
  private readonly f64: Float64Array;
  private readonly chunk: number;
  /** Matrix–matrix kernels for T ≥ 4 tokens (./gemm.ts); null: the four-token kernels below. */
  private readonly gemm: GemmKernels | null;
  /** The module's exports themselves (not through the pool). */
  private readonly exports: WebAssembly.Exports;

  private constructor(
    private readonly mod: WebAssembly.Module,
    weightsBytes: number,
    /** Largest vector length a matmul reads or writes (max of every tensor dimension). */
    readonly maxDim: number,
    shared: boolean,
  ) {
    ({ chunk: this.chunk, xBase: this.xBase, yBase: this.yBase, qBase: this.qBase, x16Base: this.x16Base, weightsBase: this.weightsBase } = arenaLayout(maxDim));
    const pages = Math.ceil((this.weightsBase + weightsBytes) / PAGE);
    this.memory = new WebAssembly.Memory({ initial: pages, maximum: pages, shared });
    const inst = new WebAssembly.Instance(mod, { env: { memory: this.memory } });
    this.exports = inst.exports;
    // In a shared memory every kernel goes through the worker pool once one is started (startPool).
    const k = (name: string): MatmulFn => {
      const fn = inst.exports[name] as MatmulFn;
      return shared ? (...a: number[]) => (this.pool ? this.pool.call(name, fn, a) : fn(...a)) : fn;
    };
    this.f32 = k('matmul_f32');
    this.f32x4tok = k('matmul4_f32');
    this.f16 = k('matmul_f16');
    this.quantQ8_0 = inst.exports[QACT_KERNELS.q8_0.name] as MatmulFn;
    this.quantQ8_K = inst.exports[QACT_KERNELS.q8_K.name] as MatmulFn;
    this.qgemm = Object.fromEntries(Object.entries(QGEMM_KERNELS).map(([f, { name }]) => [f, k(name)])) as Record<QgemmFormat, MatmulFn>;
    this.widenQ8_0 = inst.exports[QGEMM_WIDEN.name] as MatmulFn;
    // The F32 tile kernel runs on the pool cut between tiles (gemmRows); the integer tiles on the
    // calling thread (the pool's cuts would fall inside them and change the sums' order); their
    // leftover rows and tokens go through the pooled kernels above.
    this.gemm = gemmKernels(this.memory, shared);
    this.heap = new Float32Array(this.memory.buffer);
    this.f64 = new Float64Array(this.memory.buffer, 0, NORM_R_SLOT / 8 + 1);
  }

  private hasF16Table = false;
  /** Fill the f16 → f32 table the quantized and F16 kernels read (once, when such a weight arrives). */
  useF16Table(): void {
    if (this.hasF16Table) return;
    this.heap.set(f16Table(), 0);
    this.hasF16Table = true;
  }

  private pool: MatmulPool | null = null;

  /**
   * Split the kernels' rows over `threads` threads (this one and threads − 1 workers); the arena must
   * have been created `shared`. Outputs are bit-identical to one thread.
   */
  async startPool(threads: number, opts: PoolOptions): Promise<void> {
    if (this.pool || threads < 2) return;
    const names = WebAssembly.Module.exports(this.mod).map((e) => e.name);
    this.pool = await MatmulPool.start(this.mod, this.memory, names, threads, opts);
  }

  /** The worker pool (null without one): KV caches run their attention on it. */
  get workerPool(): MatmulPool | null {
    return this.pool;
  }

  /** Threads the kernels run on (1 without a pool). */
  get threads(): number {
    return this.pool?.threads ?? 1;
  }

  /** The pool's counts (null without a pool): see MatmulPool.stats. */
  poolStats(): ReturnType<MatmulPool['stats']> | null {
    return this.pool?.stats() ?? null;
  }

  /** End the pool's workers; the kernels run on this thread after. */
  closePool(): void {
    this.pool?.close();
    this.pool = null;
  }

  /**
   * null when WebAssembly SIMD is unavailable or the weights do not fit a 32-bit memory. `shared`: the
   * memory is a SharedArrayBuffer, for a worker pool (where the platform has SharedArrayBuffer).
   */
  static create(weightsBytes: number, maxDim: number, shared = false): WasmArena | null {
    const mod = wasmModule(shared);
    if (!mod) return null;
    if (arenaLayout(maxDim).weightsBase + weightsBytes > 4 * 1024 ** 3 - PAGE) return null;
    try {
      return new WasmArena(mod, weightsBytes, maxDim, shared);
    } catch {
      return null; // e.g. the memory cannot be allocated
    }
  }

  /** The weights region as bytes (copy weights.bin here). */
  weights(size: number): Uint8Array {
    return new Uint8Array(this.memory.buffer, this.weightsBase, size);
  }

  /**
   * y[t*yStride + r] = W[rowStart + r, :nCols] · x[t*xStride ..] for t < T, W at byte `ptr` with rows of
   * `rowBytes`. F32 / F16: any nCols; Q8_0 / Q4_0 / Q5_0: nCols a multiple of 32, the K-quants of 256 (the caller adds a cut block's tail).
   * Quantized weights take x quantized as llama.cpp does (./qdot.ts), prefill included: the int8 one-token
   * kernel beat an f32 tiled Q8_0 kernel (28 vs 22 GFLOP/s, [1376 × 512], 64 tokens), since removed; Q8_0 and
   * Q4_0 at T ≥ QGEMM_TILE.tokens take ./qgemm.ts's integer tiles, with the one-token kernel's bits.
   */
  matmul(format: WasmFormat, ptr: number, rowBytes: number, rowStart: number, nRows: number, nCols: number, x: Float32Array, T: number, xStride: number, y: Float32Array, yStride: number, rowwise = false): void {
    const wp = ptr + rowStart * rowBytes;
    for (let t0 = 0; t0 < T; t0 += this.chunk) {
      const n = Math.min(this.chunk, T - t0);
      this.stageX(x, t0, n, xStride, nCols);
      if (format !== 'F32' && format !== 'F16') {
        this.qdotCall(format, wp, rowBytes, nRows, nCols, n);
        this.unstageY(y, t0, n, nRows, yStride);
        continue;
      }
      if (!rowwise && this.gemm && this.tiles(format, wp, rowBytes, nRows, nCols, n)) {
        this.unstageY(y, t0, n, nRows, yStride);
        continue;
      }
      // Groups of four tokens share each weight load (prefill); the rest go one by one (all of them when rowwise).
      const g = rowwise ? 0 : n >> 2;
      const rest = n - 4 * g;
      const xs = this.xBase + 4 * g * nCols * 4;
      const ys = this.yBase + 4 * g * nRows * 4;
      if (format === 'F32') {
        if (g) this.f32x4tok(wp, rowBytes, this.xBase, nCols * 4, this.yBase, nRows * 4, nRows, nCols, g);
        if (rest) this.f32(wp, rowBytes, xs, nCols * 4, ys, nRows * 4, nRows, nCols, rest);
      } else {
        this.f16(wp, rowBytes, this.xBase, nCols * 4, this.yBase, nRows * 4, nRows, nCols, n, 0);
      }
      this.unstageY(y, t0, n, nRows, yStride);
    }
  }

  /** Tokens t0 .. t0+n of x (nCols values each) into the x scratch, back to back. */
  private stageX(x: Float32Array, t0: number, n: number, xStride: number, nCols: number): void {
    const xo = this.xBase >> 2;
    for (let t = 0; t < n; t++) this.heap.set(x.subarray((t0 + t) * xStride, (t0 + t) * xStride + nCols), xo + t * nCols);
  }

  /** The y scratch's n tokens of nRows outputs each out to y from token t0. */
  private unstageY(y: Float32Array, t0: number, n: number, nRows: number, yStride: number): void {
    const yo = this.yBase >> 2;
    for (let t = 0; t < n; t++) y.set(this.heap.subarray(yo + t * nRows, yo + (t + 1) * nRows), (t0 + t) * yStride);
  }

  /** The staged x's `blocks` activation blocks (all tokens back to back) quantized into the q scratch (./qact.ts). */
  private quantizeX(act: { block: number }, blocks: number): void {
    (act.block === 32 ? this.quantQ8_0 : this.quantQ8_K)(this.xBase, this.qBase, blocks);
  }

  /**
   * matmul over 2..MAX_GROUP weights of one format and row size that read the same x (q, k, v; gate,
   * up): x is copied and quantized once per pass of tokens, and a worker pool runs them as one job
   * (one wake-up, one chunk queue). The outputs sit side by side in the y scratch, each row computed
   * by the same kernel on the same bytes as matmul's (bit-identical). F32 / F16 over several tokens
   * go to matmul one weight at a time (its tiled and four-token kernels).
   */
  matmulGroup(format: WasmFormat, rowBytes: number, nCols: number, x: Float32Array, T: number, xStride: number, outs: readonly GroupOut[], rowwise = false): void {
    const quantized = format !== 'F32' && format !== 'F16';
    if (outs.length < 2 || outs.length > MAX_GROUP || (!quantized && T > 1)) {
      for (const o of outs) this.matmul(format, o.ptr, rowBytes, 0, o.nRows, nCols, x, T, xStride, o.y, o.yStride, rowwise);
      return;
    }
    const heap = this.heap;
    let R = 0;
    for (const o of outs) R += o.nRows;
    const act = quantized ? QDOT_ACT[format] : null;
    const perPass = Math.max(1, Math.min(this.chunk, Math.floor((this.chunk * this.maxDim) / R))); // tokens whose R outputs fit the y scratch (R ≤ 3·maxDim: one always does)
    for (let t0 = 0; t0 < T; t0 += perPass) {
      const n = Math.min(perPass, T - t0);
      this.stageX(x, t0, n, xStride, nCols);
      const tiled = quantized && tiledQ(format, n);
      const name = tiled ? QGEMM_KERNELS[format].name : quantized ? QDOT_KERNELS[format].name : format === 'F32' ? 'matmul_f32' : 'matmul_f16';
      const kernel = this.exports[name] as MatmulFn;
      const more: [number, number, number][] = [];
      for (let i = 1, off = outs[0].nRows; i < outs.length; off += outs[i++].nRows) more.push([outs[i].ptr, this.yBase + 4 * off, outs[i].nRows]);
      if (act && !tiled) {
        const nb = nCols / act.block;
        this.runQuantized(format as QdotFormat, [outs[0].ptr, rowBytes, this.qBase, nb * act.bytes, this.yBase, 4 * R, outs[0].nRows, nb, n, 0], more, nb * n, null);
      } else {
        const [xArg, xs, cols] = act ? this.quantizedX(format as QdotFormat, nCols, n, tiled) : [this.xBase, nCols * 4, nCols];
        const a = [outs[0].ptr, rowBytes, xArg, xs, this.yBase, 4 * R, outs[0].nRows, cols, n, 0];
        if (this.pool) this.pool.callGroup(name, kernel, a, more);
        else runEach(kernel, a, more);
      }
      const yo = this.yBase >> 2;
      for (let t = 0; t < n; t++) {
        for (let i = 0, off = 0; i < outs.length; off += outs[i++].nRows) {
          const o = outs[i];
          o.y.set(heap.subarray(yo + t * R + off, yo + t * R + off + o.nRows), (t0 + t) * o.yStride);
        }
      }
    }
  }

  /**
   * matmulGroup for one token whose x is RMSNorm's input (the norm's weight `norm`, `eps`): the norm
   * runs inside the job (./norm.ts: this thread sums the squares, then the threads scale x piece by
   * piece and quantize it before their rows; the norm's weight waits in the y scratch, which the rows
   * write only after every piece). The same bits as the interpreter's rmsNorm then matmulGroup.
   * `format` quantized with an activation kernel (not tiled at one token), nCols whole blocks. With
   * `rope`, the job is cut at whole heads (every output's rows a multiple of 2·half) and each thread
   * rotates the q and k heads it computed (./epilogue.ts's rope_f32): the same bits as the
   * interpreter's rope steps after.
   */
  matmulGroupNormed(format: QdotFormat, rowBytes: number, nCols: number, x: Float32Array, norm: Float32Array, eps: number, outs: readonly GroupOut[], rope: GroupRope | null = null): void {
    let R = 0;
    for (const o of outs) R += o.nRows;
    this.stageX(x, 0, 1, nCols, nCols);
    this.f64[NORM_R_SLOT / 8] = rmsFactor(x, 0, nCols, eps);
    this.heap.set(norm.subarray(0, nCols), this.yBase >> 2);
    const more: [number, number, number][] = [];
    for (let i = 1, off = outs[0].nRows; i < outs.length; off += outs[i++].nRows) more.push([outs[i].ptr, this.yBase + 4 * off, outs[i].nRows]);
    const act = QDOT_ACT[format];
    const nb = nCols / act.block;
    const post = rope && this.stageRope(rope, outs, nCols);
    this.runQuantized(format, [outs[0].ptr, rowBytes, this.qBase, nb * act.bytes, this.yBase, 4 * R, outs[0].nRows, nb, 1, 0], more, nb, 'norm', post, rope ? 2 * rope.half : 1);
    const yo = this.yBase >> 2;
    for (let i = 0, off = 0; i < outs.length; off += outs[i++].nRows) outs[i].y.set(this.heap.subarray(yo + off, yo + off + outs[i].nRows));
  }

  /**
   * Quantize the n tokens of the x scratch (./qact.ts), then run `format`'s integer-activation kernel:
   * the tiled one (./qgemm.ts) where there is one and enough tokens, else the one-token kernel. Both
   * give every output the same bits.
   */
  private qdotCall(format: QdotFormat, wp: number, rowBytes: number, nRows: number, nCols: number, n: number, silu = false, post: Post | null = null): void {
    const tiled = tiledQ(format, n);
    if (!tiled) {
      const act = QDOT_ACT[format];
      const nb = nCols / act.block;
      this.runQuantized(format, [wp, rowBytes, this.qBase, nb * act.bytes, this.yBase, nRows * 4, nRows, nb, n, 0], [], nb * n, silu ? 'silu' : null, post);
      return;
    }
    if (silu) this.siluMulX(n * nCols);
    const [xq, stride, nb] = this.quantizedX(format, nCols, n, tiled);
    const a = [wp, rowBytes, xq, stride, this.yBase, nRows * 4, nRows, nb, n, 0];
    this.qgemm[format](...a);
    if (post) runPost(post, a, []);
  }

  /**
   * `format`'s one-token kernel over the x scratch's `blocks` activation blocks, quantized (after
   * silu(x)·u, u staged in the y scratch, where `pre` is 'silu'; after RMSNorm's scaling by the
   * weight staged there, where 'norm') in the same job: on a worker pool the threads
   * quantize x piece by piece before their rows (one wake-up, and the calling thread no longer
   * quantizes alone while the others wait); the same bytes as quantizeX's one call.
   */
  private runQuantized(format: QdotFormat, a: number[], more: [number, number, number][], blocks: number, pre: 'silu' | 'norm' | null, post: Post | null = null, unit = 1): void {
    const { name } = QDOT_KERNELS[format];
    const act = QDOT_ACT[format];
    const quant = act.block === 32 ? QACT_KERNELS.q8_0.name : QACT_KERNELS.q8_K.name;
    const prep: Prep = {
      pre: pre && { name: pre === 'silu' ? SILU_MUL_KERNEL.name : RMS_SCALE.name, fn: this.exports[pre === 'silu' ? SILU_MUL_KERNEL.name : RMS_SCALE.name] as MatmulFn },
      quant: { name: quant, fn: act.block === 32 ? this.quantQ8_0 : this.quantQ8_K },
      src: this.xBase,
      u: this.yBase,
      q: this.qBase,
      vals: act.block,
      qBytes: act.bytes,
      nb: blocks,
    };
    const kernel = this.exports[name] as MatmulFn;
    if (this.pool) this.pool.callGroup(name, kernel, a, more, prep, post, unit);
    else {
      runPrep(prep);
      runEach(kernel, a, more);
      if (post) runPost(post, a, more);
    }
  }

  /**
   * y = W·x + r for one token, W a quantized weight (all its rows, columns [0, nCols) whole blocks):
   * o_proj and the residual add after it. The add runs in the matmul job's epilogue
   * (./epilogue.ts's add_f32 on each piece of rows as a thread finishes it), not on the calling
   * thread alone after the job: the same bits as matmul, then the interpreter's add.
   */
  matmulResidual(format: QdotFormat, ptr: number, rowBytes: number, nRows: number, nCols: number, x: Float32Array, r: Float32Array, y: Float32Array): void {
    this.stageX(x, 0, 1, nCols, nCols);
    this.qdotCall(format, ptr, rowBytes, nRows, nCols, 1, false, this.stageResidual(r, nCols, nRows));
    this.unstageY(y, 0, 1, nRows, nRows);
  }

  /** The position's cos and sin beside each head of rope's outputs (as y's rows lie), in the x scratch after its first `xValues` values; half a head at ROPE_HALF_SLOT. */
  private stageRope(rope: GroupRope, outs: readonly GroupOut[], xValues: number): Post {
    const at = this.xBase + Math.ceil((xValues * 4) / 64) * 64;
    const h = rope.half;
    const cos = rope.cos.subarray(rope.row * h, rope.row * h + h);
    const sin = rope.sin.subarray(rope.row * h, rope.row * h + h);
    let rows = 0;
    for (let i = 0; i < rope.matrices; i++) rows += outs[i].nRows;
    for (let o = at >> 2, end = o + rows; o < end; o += 2 * h) {
      this.heap.set(cos, o);
      this.heap.set(sin, o + h);
    }
    new Int32Array(this.memory.buffer, ROPE_HALF_SLOT, 1)[0] = h;
    return { name: ROPE.name, fn: this.exports[ROPE.name] as MatmulFn, r: at, tokens: 1, matrices: rope.matrices };
  }

  /** One token's residual (nRows values) into the x scratch after its first `xValues` values (x's, or g's), as a job's epilogue (add_f32) reads it. */
  private stageResidual(r: Float32Array, xValues: number, nRows: number): Post {
    const at = this.xBase + Math.ceil((xValues * 4) / 64) * 64;
    this.heap.set(r.subarray(0, nRows), at >> 2);
    return { name: ADD_KERNEL.name, fn: this.exports[ADD_KERNEL.name] as MatmulFn, r: at, tokens: 1 };
  }

  /** silu(x)·u over the x scratch's first `n` values (u staged in the y scratch), in place. */
  private siluMulX(n: number): void {
    (this.exports[SILU_MUL_KERNEL.name] as MatmulFn)(this.xBase, this.yBase, ((n + 3) & ~3) * 4);
  }

  /**
   * y = W · (silu(g)·u) for T tokens (the MLP's down projection over its fused activation), W a
   * quantized weight (all of its rows, columns [0, nCols)): g and u are staged side by side and
   * silu·mul runs inside the matmul's job (on a pool: piece by piece with x's quantization, before
   * the rows), with SiluMul's kernel and so its bits. nCols must be a whole number of blocks. With
   * `r` (one token only): y = W·(silu(g)·u) + r, the residual add in the job's epilogue as matmulResidual.
   */
  matmulSiluMul(format: QdotFormat, ptr: number, rowBytes: number, nRows: number, nCols: number, g: Float32Array, u: Float32Array, T: number, xStride: number, y: Float32Array, yStride: number, r: Float32Array | null = null): void {
    if (r && T !== 1) throw new Error('internal: matmulSiluMul adds a residual to one token only');
    const chunk = Math.min(this.chunk, Math.floor((this.chunk * this.maxDim) / Math.max(nRows, nCols)));
    const yo = this.yBase >> 2;
    for (let t0 = 0; t0 < T; t0 += chunk) {
      const n = Math.min(chunk, T - t0);
      this.stageX(g, t0, n, xStride, nCols);
      for (let t = 0; t < n; t++) this.heap.set(u.subarray((t0 + t) * xStride, (t0 + t) * xStride + nCols), yo + t * nCols);
      this.qdotCall(format, ptr, rowBytes, nRows, nCols, n, true, r && this.stageResidual(r, nCols, nRows));
      this.unstageY(y, t0, n, nRows, yStride);
    }
  }

  /**
   * The staged n tokens quantized for `format`'s kernels (and widened for the tiled ones): the x
   * argument, its per-token stride and the blocks per token.
   */
  private quantizedX(format: QdotFormat, nCols: number, n: number, tiled: boolean): [number, number, number] {
    const act = QDOT_ACT[format];
    const nb = nCols / act.block;
    // the n tokens' values and blocks are back to back: one call quantizes (and widens) them all
    this.quantizeX(act, nb * n);
    if (!tiled) return [this.qBase, nb * act.bytes, nb];
    this.widenQ8_0(this.qBase, this.x16Base, nb * n);
    return [this.x16Base, nb * QX16_BYTES, nb];
  }

  private gemmSlot = -1;

  /** The F32 tile kernel over rows a[6] (whole tiles), on the pool where there is one, cut only between tiles (the same bits). */
  private gemmRows(a: number[]): void {
    const pool = this.pool;
    const gemm = this.gemm!;
    if (!pool) return gemm.f32(...a);
    if (this.gemmSlot < 0 || !pool.isAttached(this.gemmSlot, this)) this.gemmSlot = pool.attach(gemm.module, this.memory, this, 'gemm_f32');
    pool.callAttachedRows(this.gemmSlot, gemm.f32, a, GEMM_TILE.rows);
  }

  /**
   * The register-tiled F32 kernel over the n tokens in the x scratch (nCols % 4 = 0): whole tiles of
   * GEMM_TILE rows × tokens there, the leftover rows and tokens one token per pass. False (nothing
   * done) where the tile kernel does not apply.
   */
  private tiles(format: WasmFormat, wp: number, rowBytes: number, nRows: number, nCols: number, n: number): boolean {
    if (format !== 'F32' || nCols % 4 !== 0 || n < GEMM_TILE.tokens) return false;
    const rows = nRows - (nRows % GEMM_TILE.rows);
    const toks = n - (n % GEMM_TILE.tokens);
    const [xs, ys] = [nCols * 4, nRows * 4];
    if (rows) this.gemmRows([wp, rowBytes, this.xBase, xs, this.yBase, ys, rows, nCols, toks]);
    if (rows < nRows) this.f32(wp + rows * rowBytes, rowBytes, this.xBase, xs, this.yBase + rows * 4, ys, nRows - rows, nCols, n);
    if (toks < n && rows) this.f32(wp, rowBytes, this.xBase + toks * xs, xs, this.yBase + toks * ys, ys, rows, nCols, n - toks);
    return true;
  }

}
