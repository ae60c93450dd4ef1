/**
 * Matrix–matrix integer-activation kernels for T > 1 tokens (prefill, chunked prefill), exports of the
 * matmul module (./wasm.ts) beside the one-token kernels of ./qdot.ts, with their arguments (w, wStride,
 * xq, xqStride, y, yStride, nRows, nBlocks, T, table) and their x layout (./qact.ts's quantizers).
 *
 * A register tile of RB weight rows × TB tokens: each weight block is loaded (and widened) once for TB
 * tokens and each x block once for RB rows, where the one-token kernels load both for every (row,
 * token). Every output is computed with the one-token kernel's operations in its order (the same
 * per-block integer sums in the same i32 lanes, then acc + f32(sum) · (d_w · d_x) per block, then the
 * lanes ((0 + 1) + 2) + 3), so its bits equal that kernel's: prefill, decode, row ranges and a worker
 * pool's cuts (anywhere: the kernel itself runs the rows and tokens left outside whole tiles on smaller
 * tiles) all agree. x comes pre-widened to i16 (widen_q8_0, once per call), so the tile's x loads
 * are plain loads; the weights are widened by their loads, once per tile. Browser-safe.
 */
import { uleb } from '../../core/util/wasm-asm.js';
import {
  block, br, brIf, f32Add, f32Load, f32Store, fAdd, fExtract, fFromI32, fMul, get, i32Add, i32c, i32GeU, i32Mul, i32Shl, i32Sub, hSplat, iAdd, loop, set, simd, vAnd, vload, vstore, vZero,
} from '../../core/util/wasm-ops.js';
import { Q8_0_BYTES, type QdotFormat } from './qdot.js';

const i32RemU = [0x70];
const i32Load16U = (off: number) => [0x2f, 1, ...uleb(off)];
const load8x8S = (off: number) => simd(0x01, 0, ...uleb(off));
const load8x8U = (off: number) => simd(0x02, 0, ...uleb(off));
const hShrU = simd(0x8d);
const hSub = simd(0x91);
const iDot = simd(0xba); // i32x4.dot_i16x8_s
const load32Splat = (off: number) => simd(0x09, 2, ...uleb(off));
/**
 * Whether token j of a tile of tb stores its accumulators' lane 0 (into their own y slots, which the
 * final sums overwrite): every second token and the last. V8 keeps loads in program order but
 * schedules arithmetic late, so without a store every token's x vectors of a block were loaded first and
 * spilled. Measured against this choice (1 × 3 tile, loaded machine): no store 0.87–0.98×, a store
 * after every token ~0.95×.
 */
const sinkAfter = (j: number, tb: number) => j % 2 === 1 || j === tb - 1;

/** Rows × tokens of the Q8_0 tile (measured: docs/lab/speed-history.md, "Quantized prefill tiles"). */
export const QGEMM_TILE = { rows: 1, tokens: 3 } as const;
/** Bytes of a pre-widened q8_0 block (widen_q8_0's output): f32 d, 12 bytes of padding, 32 × i16. */
export const QX16_BYTES = 80;

const range = (n: number) => Array.from({ length: n }, (_, i) => i);
const whileLt = (a: number, limit: number[], body: number[]) => block(loop([...get(a), ...limit, ...i32GeU, ...brIf(1), ...body, ...br(0)]));
const inc = (l: number, by: number[]) => [...get(l), ...by, ...i32Add, ...set(l)];

// Parameters, as ./qdot.ts's kernels.
const [W, WS, X, XS, Y, YS, NR, NB, T, TAB] = range(10);

/** The locals of a kernel whose tiles are at most RB × TB. */
function locals(RB: number, TB: number) {
  let n = 10;
  const take = () => n++;
  const i32 = {
    R: take(), TT: take(), B: take(), RE: take(), TE: take(), WP: range(RB).map(take), XP: range(TB).map(take),
    YP: range(RB).map(() => range(TB).map(take)),
  };
  const nI32 = n - 10;
  const v = {
    ACC: range(RB).map(() => range(TB).map(take)),
    IACC: range(RB).map(take),
    WV: range(RB).map(() => range(4).map(take)),
    X16: take(),
    /** d_w splat per row, d_x splat per token (f32x4: their product is the one-token kernel's f32 d_w · d_x in every lane). */
    DW: range(RB).map(take),
    DXS: take(),
    /** Constants a format's weights need (set once per call). */
    K0: take(),
    K1: take(),
  };
  const nV = RB * TB + 6 * RB + 4;
  return { ...i32, ...v, decl: [...uleb(2), ...uleb(nI32), 0x7f, ...uleb(nV), 0x7b] };
}
type Locals = ReturnType<typeof locals>;

/**
 * A q8_0-activation block for tiles of rb × tb: each row's 32 weights of the block as 4 i16 vectors
 * (`weights` sets WV[i][k] to elements 8k..8k+7, as the one-token kernel pairs them with x), once for
 * tb tokens; x read pre-widened (QX16_BYTES blocks, plain loads); then per (row, token) the one-token
 * kernel's integer and f32 steps. The weight block's f16 scale is its first 2 bytes.
 */
const q8Block = (wBytes: number, weights: (L: Locals, i: number) => number[]) => (L: Locals, rb: number, tb: number): number[] => {
  const { WP, XP, WV, IACC, ACC, DW, DXS, X16 } = L;
  const token = (j: number) => [
    ...get(XP[j]), ...load32Splat(0), ...set(DXS),
    ...range(4).flatMap((k) => [
      ...get(XP[j]), ...vload(16 + 16 * k), ...set(X16),
      ...range(rb).flatMap((i) => [...get(WV[i][k]), ...get(X16), ...iDot, ...(k ? [...get(IACC[i]), ...iAdd] : []), ...set(IACC[i])]),
    ]),
    // acc + f32(sum) · splat(d_w · d_x): the one-token kernel's scaleInto
    ...range(rb).flatMap((i) => [
      ...get(ACC[i][j]), ...get(IACC[i]), ...fFromI32, ...get(DW[i]), ...get(DXS), ...fMul, ...fMul, ...fAdd, ...set(ACC[i][j]),
      ...(sinkAfter(j, tb) ? [...get(L.YP[i][j]), ...get(ACC[i][j]), ...fExtract(0), ...f32Store()] : []),
    ]),
  ];
  return [
    ...range(rb).flatMap((i) => [
      ...weights(L, i),
      ...get(TAB), ...get(WP[i]), ...i32Load16U(0), ...i32c(2), ...i32Shl, ...i32Add, ...load32Splat(0), ...set(DW[i]),
    ]),
    ...range(tb).flatMap(token),
    ...range(rb).flatMap((i) => inc(WP[i], i32c(wBytes))),
    ...range(tb).flatMap((j) => inc(XP[j], i32c(QX16_BYTES))),
  ];
};

/** Q8_0 (34 bytes: f16 d, 32 × int8): widened by their loads. */
const q8_0Weights = (L: Locals, i: number) => range(4).flatMap((k) => [...get(L.WP[i]), ...load8x8S(2 + 8 * k), ...set(L.WV[i][k])]);

/**
 * Q4_0 (18 bytes: f16 d, 16 bytes of nibbles): q − 8; bytes 0..7 and 8..15 widened by their loads,
 * low nibbles elements 0..15, high nibbles 16..31 (K0: 15 in every i16 lane, K1: 8).
 */
const q4_0Weights = (L: Locals, i: number) => {
  const { WP, WV, K0, K1 } = L;
  return [0, 1].flatMap((h) => [
    ...get(WP[i]), ...load8x8U(2 + 8 * h), ...set(WV[i][h]),
    ...get(WV[i][h]), ...i32c(4), ...hShrU, ...get(K1), ...hSub, ...set(WV[i][2 + h]),
    ...get(WV[i][h]), ...get(K0), ...vAnd, ...get(K1), ...hSub, ...set(WV[i][h]),
  ]);
};

/** One rb × tb tile at rows R.., tokens TT..: pointers set, accumulators zeroed, every block, outputs stored. */
function tile(L: Locals, rb: number, tb: number, blk: (L: Locals, rb: number, tb: number) => number[]): number[] {
  const { R, TT, B, WP, XP, ACC } = L;
  const hsum = (a: number) => range(4).flatMap((l) => [...get(a), ...fExtract(l), ...(l ? f32Add : [])]);
  const yp = (i: number, j: number) => [
    ...get(Y), ...get(TT), ...i32c(j), ...i32Add, ...get(YS), ...i32Mul, ...i32Add, ...get(R), ...i32c(i), ...i32Add, ...i32c(2), ...i32Shl, ...i32Add, ...set(L.YP[i][j]),
  ];
  const store = (i: number, j: number) => [...get(L.YP[i][j]), ...hsum(ACC[i][j]), ...f32Store()];
  return [
    ...range(rb).flatMap((i) => [...get(W), ...get(R), ...i32c(i), ...i32Add, ...get(WS), ...i32Mul, ...i32Add, ...set(WP[i])]),
    ...range(tb).flatMap((j) => [...get(X), ...get(TT), ...i32c(j), ...i32Add, ...get(XS), ...i32Mul, ...i32Add, ...set(XP[j])]),
    ...range(rb).flatMap((i) => range(tb).flatMap((j) => [...vZero, ...set(ACC[i][j]), ...yp(i, j)])),
    ...i32c(0), ...set(B),
    ...whileLt(B, get(NB), [...blk(L, rb, tb), ...inc(B, i32c(1))]),
    ...range(rb).flatMap((i) => range(tb).flatMap((j) => store(i, j))),
  ];
}

/**
 * A kernel of RB × TB tiles over rows [0, RE) × tokens [0, TE) (RE, TE: nRows, T cut to whole tiles),
 * then RB × 1 tiles for the tokens past TE, 1 × TB and 1 × 1 tiles for the rows past RE.
 */
export function qgemmBody(format: QgemmFormat, RB: number = QGEMM_TILE.rows, TB: number = QGEMM_TILE.tokens): number[] {
  const L = locals(RB, TB);
  const { block: blk, setup } = QGEMM_BLOCKS[format];
  const { R, TT, RE, TE } = L;
  // Tokens outer, rows inner: a tile's x (tb tokens) stays in L1 while the rows stream by (rows outer,
  // every row walked all the call's x from L2: ~5 % slower).
  const tiles = (rb: number, tb: number, r0: number[], r1: number[], t0: number[], t1: number[]) => [
    ...t0, ...set(TT),
    ...whileLt(TT, t1, [...r0, ...set(R), ...whileLt(R, r1, [...tile(L, rb, tb, blk), ...inc(R, i32c(rb))]), ...inc(TT, i32c(tb))]),
  ];
  const cut = (n: number, by: number) => [...get(n), ...get(n), ...i32c(by), ...i32RemU, ...i32Sub];
  return [
    ...L.decl,
    ...setup(L),
    ...cut(NR, RB), ...set(RE), ...cut(T, TB), ...set(TE),
    ...tiles(RB, TB, i32c(0), get(RE), i32c(0), get(TE)),
    ...(TB > 1 ? tiles(RB, 1, i32c(0), get(RE), get(TE), get(T)) : []),
    ...(RB > 1 ? tiles(1, TB, get(RE), get(NR), i32c(0), get(TE)) : []),
    ...(RB > 1 && TB > 1 ? tiles(1, 1, get(RE), get(NR), get(TE), get(T)) : []),
    0x0b,
  ];
}

/** Weight formats with a tiled kernel. */
export type QgemmFormat = Extract<QdotFormat, 'Q8_0' | 'Q4_0'>;
const QGEMM_BLOCKS: Record<QgemmFormat, { block: (L: Locals, rb: number, tb: number) => number[]; setup: (L: Locals) => number[] }> = {
  Q8_0: { block: q8Block(34, q8_0Weights), setup: () => [] },
  Q4_0: { block: q8Block(18, q4_0Weights), setup: (L) => [...i32c(15), ...hSplat, ...set(L.K0), ...i32c(8), ...hSplat, ...set(L.K1)] },
};

/** widen_q8_0(xq, out, nBlocks): q8_0 blocks (./qdot.ts's layout) into QX16_BYTES blocks (f32 d at 0, the int8 as i16 from 16). */
function widenQ8_0Body(): number[] {
  const [XQ, OUT, N] = [0, 1, 2];
  return [
    ...uleb(0),
    ...block(loop([
      ...get(N), ...i32c(0), ...[0x4c] /* i32.le_s */, ...brIf(1),
      ...get(OUT), ...get(XQ), ...f32Load(), ...f32Store(),
      ...range(4).flatMap((k) => [...get(OUT), ...get(XQ), ...load8x8S(4 + 8 * k), ...vstore(16 + 16 * k)]),
      ...inc(XQ, i32c(Q8_0_BYTES)), ...inc(OUT, i32c(QX16_BYTES)), ...get(N), ...i32c(1), ...i32Sub, ...set(N),
      ...br(0),
    ])),
    0x0b,
  ];
}

/** The kernels by export name, for ./wasm.ts's module (10 i32 parameters each, as QDOT_KERNELS). */
export const QGEMM_KERNELS: Record<QgemmFormat, { name: string; body: () => number[] }> = {
  Q8_0: { name: 'qgemm_q8_0', body: () => qgemmBody('Q8_0') },
  Q4_0: { name: 'qgemm_q4_0', body: () => qgemmBody('Q4_0') },
};
/** The x widener (3 i32 parameters: xq, out, nBlocks), for ./wasm.ts's module. */
export const QGEMM_WIDEN = { name: 'widen_q8_0', body: widenQ8_0Body };
