/**
 * Integer-activation matmul kernels, llama.cpp's vec_dot: the activation x is quantized once per call
 * (ggml's quantize_row_q8_0_ref per 32 values for Q8_0 / Q4_0 / Q5_0 weights, quantize_row_q8_K_ref
 * per 256 with its block sums for Q2_K / Q3_K / Q4_K / Q6_K), then each block's dot product is int8 × int8 in
 * i16 lanes summed into i32 (exact), and the scales apply per block in f32. So the runtime's results
 * for these weights are llama.cpp's, up to the order of the f32 sums. Where relaxed SIMD validates
 * (./relaxed.ts), every format but Q8_0 multiplies unsigned codes by x's int8 in relaxed SIMD's exact
 * integer dot instead (16 products an instruction, neither side widened): the same integers in the
 * same lanes, so the same bits.
 *
 * The quantized x lives in the arena's memory (WasmArena.matmul writes it before any kernel runs, so
 * a worker pool's threads all read the same bytes). Layout per token, blocks back to back:
 * - q8_0 (36 bytes): f32 d (the f16-rounded scale ggml stores), 32 × int8;
 * - q8_K (308 bytes): f32 d, 16 × i16 sums of 16 values (ggml's bsums), 8 × i16 sums of 32, 256 × int8.
 *
 * The kernels take the others' parameters (w, wStride, xq, xqStride, y, yStride, nRows, nBlocks, T,
 * table): y[t·yStride + 4r] = Σ over nBlocks whole blocks of row r and token t. Some formats take
 * several rows a pass (their x loads shared); each row's operations are the same either way, so a
 * row's output does not depend on the row range it is computed in (the worker pool's cuts).
 * Browser-safe.
 */
import { uleb } from '../../core/util/wasm-asm.js';
import {
  block, bShl, bSplat, br, brIf, f32Store, hNarrowS, hRelaxedDot, hShl, hShrS, f32Load, f32Mul, fAdd, fFromI32, fMul, fSplat, fSub, get, i32Add, i32And, i32c, i32GeU, i32Load, i32Mul, i32Or, i32Shl, i32ShrU, iAdd, iSplat, loop, set, simd, vAnd, vload, vOr, vZero,
} from '../../core/util/wasm-ops.js';
import { relaxedIntegerDots } from './relaxed.js';

/** Weight formats with an integer-activation kernel, and the activation blocks each reads. */
export type QdotFormat = 'Q8_0' | 'Q4_0' | 'Q5_0' | 'Q2_K' | 'Q3_K' | 'Q4_K' | 'Q6_K';
export const QDOT_FORMATS: readonly string[] = ['Q8_0', 'Q4_0', 'Q5_0', 'Q2_K', 'Q3_K', 'Q4_K', 'Q6_K'];
export const Q8_0_BYTES = 36;
export const Q8_K_BYTES = 308;
/** Activation layout by weight format: values per block and bytes per block. */
export const QDOT_ACT: Record<QdotFormat, { block: number; bytes: number }> = {
  Q8_0: { block: 32, bytes: Q8_0_BYTES },
  Q4_0: { block: 32, bytes: Q8_0_BYTES },
  Q5_0: { block: 32, bytes: Q8_0_BYTES },
  Q2_K: { block: 256, bytes: Q8_K_BYTES },
  Q3_K: { block: 256, bytes: Q8_K_BYTES },
  Q4_K: { block: 256, bytes: Q8_K_BYTES },
  Q6_K: { block: 256, bytes: Q8_K_BYTES },
};

// Instructions not in wasm-ops.ts.
const mem = (code: number, align: number, off: number) => [code, align, ...uleb(off)];
const i32Load8S = (off: number) => mem(0x2c, 0, off);
const i32Load16U = (off: number) => mem(0x2f, 1, off);
const i32Store = (off: number) => mem(0x36, 2, off);
const i32DivU = [0x6e];
const load8x8S = (off: number) => simd(0x01, 0, ...uleb(off));
const load8x8U = (off: number) => simd(0x02, 0, ...uleb(off));
const load32Splat = (off: number) => simd(0x09, 0, ...uleb(off));
const vConst = (bytes: number[]) => simd(0x0c, ...bytes);
const bSwizzle = simd(0x0e);
const bExtractU = (lane: number) => simd(0x16, lane);
const iReplace = (lane: number) => simd(0x1c, lane);
const bEq = simd(0x23);
const vAndNot = simd(0x4f); // a & ~b
const bShrU = simd(0x6d);
const bSub = simd(0x71);
const hExtLowS = simd(0x87); // i16x8.extend_low_i8x16_s
const hExtHighS = simd(0x88);
const hExtLowU = simd(0x89); // i16x8.extend_low_i8x16_u
const hExtHighU = simd(0x8a); // i16x8.extend_high_i8x16_u
const hShrU = simd(0x8d);
const hSub = simd(0x91);
const hSplat = simd(0x10);
const hAdd = simd(0x8e);
const iExtLowS = simd(0xa7); // i32x4.extend_low_i16x8_s
const iExtHighS = simd(0xa8);
const iMul = simd(0xb5);
const iDot = simd(0xba); // i32x4.dot_i16x8_s

// Locals: parameters 0..9, then i32 10..29, f32 30..33, v128 34..65.
const [W, WS, X, XS, Y, YS, NR, NB, T, TAB] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9];
const [R, TT, XB, B, U0, U1, U2, YP, H, HW, H4] = [10, 11, 12, 13, 14, 15, 16, 17, 22, 23, 24];
const DX = 30; // f32: the x block's scale
const V = (i: number) => 34 + i;
/** A row of a pass: its weight block at `bp`; f32x4 `acc`, i32x4 `iacc`, and `sc` (Q4_K's scales). */
interface Row { bp: number; acc: number; iacc: number; sc: number }
const ROWS: Row[] = [0, 1, 2, 3].map((g) => ({ bp: 18 + g, acc: V(g), iacc: V(4 + g), sc: V(8 + g) }));
/** x's widened int8 of a block (or sub-block), loaded once for the rows of a pass. */
const XV = [12, 13, 14, 15, 16, 17, 18, 19].map(V);
/** Free v128 locals for a kernel's own use. */
const TMP = [20, 21, 22, 23, 24, 25, 26, 27, 28, 29].map(V);
const LOCALS = [...uleb(3), ...uleb(20), 0x7f, ...uleb(4), 0x7d, ...uleb(32), 0x7b];

const whileLt = (a: number[], limit: number[], body: number[]) => block(loop([...a, ...limit, ...i32GeU, ...brIf(1), ...body, ...br(0)]));
const inc = (l: number, by: number) => [...get(l), ...i32c(by), ...i32Add, ...set(l)];
const splatB = (v: number) => [...i32c(v), ...bSplat];
/** The f16 at bp + off as f32, through the table. */
const f16At = (bp: number, off: number) => [...get(TAB), ...get(bp), ...i32Load16U(off), ...i32c(2), ...i32Shl, ...i32Add, ...f32Load()];
/** x's f32 block scale into DX (once per block, for every row of the pass). */
const loadDx = [...get(XB), ...f32Load(), ...set(DX)];
/** row.acc += f32(vector local `src`) · splat(f16 weight scale at bp + off · x's scale); `minus` subtracts. */
const scaleInto = (row: Row, src: number, off: number, minus = false) => [
  ...get(row.acc), ...get(src), ...fFromI32, ...f16At(row.bp, off), ...get(DX), ...f32Mul, ...fSplat, ...fMul, ...(minus ? fSub : fAdd), ...set(row.acc),
];
/**
 * A row's accumulator stored (lane 0) into the y slot of the pass's first row, which its final sum
 * overwrites: the store orders the rows' work. Without it V8 placed every row's loads of a block
 * before the arithmetic, keeping all rows' widened weights live at once (spilled): Q4_K ran 1.07×
 * the one-row kernel with 2 rows a pass instead of 1.36×.
 */
const sink = (r: Row) => [...get(YP), ...get(r.acc), ...simd(0x1f, 0), ...f32Store(0)];
/** The same for an i32x4 accumulator. */
const sinkI = (r: Row) => [...get(YP), ...get(r.iacc), ...simd(0x1b, 0), ...i32Store(0)];
/** XV[first + i] = x's int8 at XB + off + 8i widened to i16, i < n. */
const loadX = (off: number, n: number, first = 0) => Array.from({ length: n }, (_, i) => [...get(XB), ...load8x8S(off + 8 * i), ...set(XV[first + i])]).flat();
/** i32x4 Σ of the products of the i16 lanes of `w` (8 values) with XV[k]. */
const dotX = (w: number[], k: number) => [...w, ...get(XV[k]), ...iDot];
/** i32x4 Σ of the 16 int8 lanes of `w` times XV[k], XV[k + 1] (both sides widened to i16, then i32x4.dot_i16x8_s). */
const dot16 = (w: number[], k: number) => [
  ...w, ...set(TMP[9]),
  ...get(TMP[9]), ...hExtLowS, ...get(XV[k]), ...iDot,
  ...get(TMP[9]), ...hExtHighS, ...get(XV[k + 1]), ...iDot,
  ...iAdd,
];
/** Nibbles as i16 lanes: bytes widened by their load, then the low (`& MASK`, 15 in each byte) or high (`>> 4`) half. */
const lowNib = (l: number, mask: number) => [...get(l), ...get(mask), ...vAnd];
const highNib = (l: number) => [...get(l), ...i32c(4), ...hShrU];

/*
 * Relaxed SIMD's exact integer dot (the kernels' `relaxed` variants): i16x8.relaxed_dot_i8x16_i7x16_s
 * multiplies x's int8 by 16 weight codes in 0..127 (unsigned: an offset such as Q4_0's −8 is taken
 * off afterwards as offset · x's pair sums) and sums adjacent pairs into i16 lanes, one pmaddubsw on
 * x86: 16 products without widening either side. Lane j of a 16-byte vector holds elements 2j, 2j+1;
 * the i16 kernels' i32 lane l holds 2l, 2l+1, 8+2l, 9+2l (dot_i16x8_s on 8 widened values), so each
 * variant regroups its lanes to exactly those integers before any f32 step: both give the same bits.
 */
/** i16 lanes: the pair sums of x's int8 (vector local `x`) times the codes (0..127) of `w`. */
const rdot = (x: number, w: number[]) => [...get(x), ...w, ...hRelaxedDot];
const shuffle = (lanes: number[]) => simd(0x0d, ...lanes);
const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
/** i16 lanes 0..3 of a, 0..3 of b (and `HIGH_HALVES`: 4..7 of each). */
const LOW_HALVES = shuffle([...range(0, 8), ...range(16, 8)]);
const HIGH_HALVES = shuffle([...range(8, 8), ...range(24, 8)]);
/** i16 lanes of a and b interleaved: a0 b0 a1 b1 a2 b2 a3 b3 (`ZIP_HIGH`: lanes 4..7). */
const ZIP_LOW = shuffle([0, 1, 2, 3].flatMap((k) => [2 * k, 2 * k + 1, 16 + 2 * k, 17 + 2 * k]));
const ZIP_HIGH = shuffle([4, 5, 6, 7].flatMap((k) => [2 * k, 2 * k + 1, 16 + 2 * k, 17 + 2 * k]));
/** i32 lane l = i16 lanes l and l + 4 of vector local `l16`: the i16 kernels' lane. */
const foldHalves = (l16: number) => [...get(l16), ...iExtLowS, ...get(l16), ...iExtHighS, ...iAdd];

/**
 * A kernel: for each row r and token t, y[t·yStride + 4r] = the lanes of the row's acc summed after
 * `blk` ran for each of the nBlocks blocks (it reads each row's weight block at row.bp and the
 * activation block at XB; then every bp += wBytes, XB += xBytes). Rows go `group` to a pass, the
 * rest one by one: each row's operations and their order are the same either way, so a row's result
 * does not depend on where a row range starts (the worker pool's cuts). `setup` runs once.
 */
function kernel(wBytes: number, xBytes: number, blk: (rows: Row[]) => number[], setup: number[] = [], group = 1): number[] {
  const pass = (n: number) => {
    const rows = ROWS.slice(0, n);
    const hsum = (acc: number) => [0, 1, 2, 3].flatMap((l) => [...get(acc), ...simd(0x1f, l), ...(l ? [0x92] : [])]);
    return [
      ...i32c(0), ...set(TT),
      ...whileLt(get(TT), get(T), [
        ...get(W), ...get(R), ...get(WS), ...i32Mul, ...i32Add, ...set(rows[0].bp),
        ...rows.slice(1).flatMap((r, g) => [...get(rows[g].bp), ...get(HW), ...i32Add, ...set(r.bp)]),
        ...get(X), ...get(TT), ...get(XS), ...i32Mul, ...i32Add, ...set(XB),
        ...rows.flatMap((r) => [...vZero, ...set(r.acc)]),
        ...get(Y), ...get(TT), ...get(YS), ...i32Mul, ...i32Add, ...get(R), ...i32c(2), ...i32Shl, ...i32Add, ...set(YP),
        ...i32c(0), ...set(B),
        ...whileLt(get(B), get(NB), [...blk(rows), ...rows.flatMap((r) => inc(r.bp, wBytes)), ...inc(XB, xBytes), ...inc(B, 1)]),
        ...rows.flatMap((r) => [...get(YP), ...hsum(r.acc), ...f32Store(0), ...get(YP), ...get(H4), ...i32Add, ...set(YP)]),
        ...inc(TT, 1),
      ]),
      ...inc(R, 1),
    ];
  };
  // Row g of a pass is R + g·H, H = ⌊nRows / group⌋: adjacent rows are interleaved streams within a
  // page, and with them Q8_0 ran at half the one-row kernel's speed over a whole model's weights
  // (the hardware prefetcher not following them, presumably); rows far apart ran 1.05×.
  const grouped = [
    ...get(NR), ...i32c(group), ...i32DivU, ...set(H),
    ...get(H), ...get(WS), ...i32Mul, ...set(HW), ...get(H), ...i32c(2), ...i32Shl, ...set(H4),
    ...whileLt(get(R), get(H), pass(group)),
    ...get(H), ...i32c(group), ...i32Mul, ...set(R),
  ];
  return [...LOCALS, ...setup, ...i32c(0), ...set(R), ...(group > 1 ? grouped : []), ...whileLt(get(R), get(NR), pass(1)), 0x0b];
}

/**
 * Q8_0 × q8_0: 34-byte blocks (f16 d, 32 × int8); i16 products summed by i32x4.dot_i16x8_s. No relaxed
 * variant: ggml's AVX2 sign trick (|w| against x with w's sign, two relaxed dots) ran 0.85–0.90× this
 * kernel (docs/lab/speed-history.md, "Relaxed integer dots"): x widens once for the pass's rows, the sign costs
 * every row three more operations per 16 values. Four rows a pass: 1.05–1.09× two over one matrix,
 * in cache or streamed, and 1.07× a whole llama-100M decode on one thread (docs/lab/speed-history.md, "Q8_0: four
 * rows a pass").
 */
function q8_0Body(): number[] {
  const row = (r: Row) => [
    ...[0, 1, 2, 3].flatMap((k) => [...dotX([...get(r.bp), ...load8x8S(2 + 8 * k)], k), ...(k ? iAdd : [])]),
    ...set(r.iacc), ...scaleInto(r, r.iacc, 0), ...sink(r),
  ];
  return kernel(34, Q8_0_BYTES, (rows) => [...loadDx, ...loadX(4, 4), ...rows.flatMap(row)], [], 4);
}

/**
 * Q4_0 / Q5_0 × q8_0: signed 4- or 5-bit values as two i8x16 (`lo`: elements 0..15, `hi`: 16..31) against
 * x's 32. With `offset` (the relaxed variant) `lo` and `hi` are the unsigned codes, value + offset, and
 * offset · x's pair sums (once per block, shared by the pass's rows) come off in i16 lanes.
 */
function legacyBody(wBytes: number, lo: (r: Row) => number[], hi: (r: Row) => number[], setup: number[] = [], group = 1, offset = 0): number[] {
  if (offset) {
    const [OFF, D, K] = [TMP[6], TMP[7], TMP[8]];
    const row = (r: Row) => [
      ...rdot(XV[0], lo(r)), ...rdot(XV[1], hi(r)), ...hAdd, ...get(OFF), ...hSub, ...set(D),
      ...foldHalves(D), ...set(r.iacc), ...scaleInto(r, r.iacc, 0), ...sink(r),
    ];
    const blk = (rows: Row[]) => [
      ...loadDx, ...get(XB), ...vload(4), ...set(XV[0]), ...get(XB), ...vload(20), ...set(XV[1]),
      ...rdot(XV[0], get(K)), ...rdot(XV[1], get(K)), ...hAdd, ...set(OFF),
      ...rows.flatMap(row),
    ];
    return kernel(wBytes, Q8_0_BYTES, blk, [...setup, ...splatB(offset), ...set(K)], group);
  }
  const row = (r: Row) => [...dot16(lo(r), 0), ...dot16(hi(r), 2), ...iAdd, ...set(r.iacc), ...scaleInto(r, r.iacc, 0), ...sink(r)];
  return kernel(wBytes, Q8_0_BYTES, (rows) => [...loadDx, ...loadX(4, 4), ...rows.flatMap(row)], setup, group);
}

/** Q4_0 (18 bytes: f16 d, 16 bytes of nibbles): q − 8, in i16 lanes (bytes 0..7 and 8..15 widened by their loads). */
function q4_0Body(relaxed: boolean): number[] {
  const [C0, C1, MASK, EIGHT] = [TMP[0], TMP[1], TMP[2], TMP[3]];
  if (relaxed) {
    const lo = (r: Row) => [...get(r.bp), ...vload(2), ...set(C0), ...get(C0), ...get(MASK), ...vAnd];
    const hi = () => [...get(C0), ...i32c(4), ...hShrU, ...get(MASK), ...vAnd];
    return legacyBody(18, lo, hi, [...splatB(15), ...set(MASK)], 2, 8);
  }
  const m8 = (nib: number[]) => [...nib, ...get(EIGHT), ...hSub];
  const row = (r: Row) => [
    ...get(r.bp), ...load8x8U(2), ...set(C0), ...get(r.bp), ...load8x8U(10), ...set(C1),
    ...dotX(m8(lowNib(C0, MASK)), 0), ...dotX(m8(lowNib(C1, MASK)), 1), ...iAdd,
    ...dotX(m8(highNib(C0)), 2), ...iAdd, ...dotX(m8(highNib(C1)), 3), ...iAdd,
    ...set(r.iacc), ...scaleInto(r, r.iacc, 0), ...sink(r),
  ];
  const setup = [...splatB(15), ...set(MASK), ...i32c(8), ...hSplat, ...set(EIGHT)];
  return kernel(18, Q8_0_BYTES, (rows) => [...loadDx, ...loadX(4, 4), ...rows.flatMap(row)], setup, 2);
}

/**
 * Q5_0 (22 bytes: f16 d, 32 high bits, 16 bytes of nibbles): q = (nibble | bit << 4) − 16. The high
 * bits of elements 0..15 (16..31) are bits of bytes 0, 1 (2, 3) of the u32: each byte spread over 8
 * lanes by a swizzle, one bit kept per lane, lanes with it set become 0x10.
 */
function q5_0Body(relaxed: boolean): number[] {
  const [SW0, SW1, BITS, HB, M15, F0] = [TMP[0], TMP[1], TMP[2], TMP[3], TMP[4], TMP[5]];
  const bitSet = (sw: number) => [...get(HB), ...get(sw), ...bSwizzle, ...get(BITS), ...vAnd, ...get(BITS), ...bEq];
  // 0xf0 (−16 as int8) in the lanes whose high bit is clear: (nibble | 16) − 16 or nibble − 16, in one or.
  // Relaxed: the unsigned code, nibble | 16 where the bit is set (F0 then holds 0x10).
  const highBit = (sw: number) => (relaxed ? [...bitSet(sw), ...get(F0), ...vAnd] : [...get(F0), ...bitSet(sw), ...vAndNot]);
  const raw = (r: Row) => [...get(r.bp), ...vload(6)];
  const setup = [
    ...vConst([0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]), ...set(SW0),
    ...vConst([2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3]), ...set(SW1),
    ...vConst([1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128]), ...set(BITS),
    ...splatB(15), ...set(M15), ...splatB(relaxed ? 0x10 : 0xf0), ...set(F0),
  ];
  return legacyBody(
    22,
    (r) => [...get(r.bp), ...load32Splat(2), ...set(HB), ...raw(r), ...get(M15), ...vAnd, ...highBit(SW0), ...vOr],
    (r) => [...raw(r), ...i32c(4), ...bShrU, ...highBit(SW1), ...vOr],
    setup,
    2,
    relaxed ? 16 : 0,
  );
}

/**
 * Q4_K × q8_K (144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles):
 * Σ_s d·sc_s·(q·x)_s − dmin·m_s·(Σx)_s. The 12 bytes unpack (ggml's kmask trick) into the lanes of
 * row.sc: bytes 0..7 the scales, 8..15 the mins; the mins meet x's sums of 32 in one
 * i32x4.dot_i16x8_s. Sub-blocks 2j and 2j+1 are the low and high nibbles of bytes 32j..32j+31, read
 * as four i16 vectors of 8 against x's 64 values of the pair (XV, loaded once for the pass's rows).
 * Relaxed: as two 16-byte vectors against x's four, the pair sums regrouped (LOW_HALVES + HIGH_HALVES:
 * lanes of elements 0..3 and 4..7 mod 8 side by side) into the same i16 vector as the narrow gives.
 */
function q4_KBody(relaxed: boolean): number[] {
  const [C, HI, M, MASK, C1] = [TMP[0], TMP[1], TMP[2], TMP[3], TMP[4]];
  const u = (l: number, sh: number, mask: number) => [...get(l), ...i32c(sh), ...i32ShrU, ...i32c(mask), ...i32And];
  const scales = (r: Row) => [
    ...get(r.bp), ...i32Load(4), ...set(U0),
    ...get(r.bp), ...i32Load(8), ...set(U1),
    ...get(r.bp), ...i32Load(12), ...set(U2),
    ...get(U0), ...i32c(0x3f3f3f3f), ...i32And, ...iSplat,
    ...get(U2), ...i32c(0x0f0f0f0f), ...i32And, ...u(U0, 6, 0x03030303), ...i32c(4), ...i32Shl, ...i32Or, ...iReplace(1),
    ...get(U1), ...i32c(0x3f3f3f3f), ...i32And, ...iReplace(2),
    ...u(U2, 4, 0x0f0f0f0f), ...u(U1, 6, 0x03030303), ...i32c(4), ...i32Shl, ...i32Or, ...iReplace(3),
    ...set(r.sc),
    ...vZero, ...set(r.iacc),
  ];
  // i16 lanes sc_2j ×4, sc_2j+1 ×4 from the scale bytes (a shuffle with zero bytes).
  const scalePair = (j: number) => [0, 1, 2, 3, 4, 5, 6, 7].flatMap((k) => [2 * j + (k >> 2), 16]);
  // The low nibbles' sum stays on the stack, the high ones' in HI. Each lane of either is at most
  // 4 · 2 · 15 · 128 in magnitude, so both narrow to i16 exactly, and one dot_i16x8_s with the two
  // scales gives sc_2j · lo + sc_2j+1 · hi.
  const relaxedPair = (j: number) => (r: Row) => [
    ...get(r.bp), ...vload(16 + 32 * j), ...set(C), ...get(r.bp), ...vload(32 + 32 * j), ...set(C1),
    ...rdot(XV[0], lowNib(C, MASK)), ...rdot(XV[1], lowNib(C1, MASK)), ...hAdd, ...set(M),
    ...rdot(XV[2], [...highNib(C), ...get(MASK), ...vAnd]), ...rdot(XV[3], [...highNib(C1), ...get(MASK), ...vAnd]), ...hAdd, ...set(HI),
    ...regroupInto(r, M, HI, [...get(r.sc), ...vZero, ...simd(0x0d, ...scalePair(j))]), ...sinkI(r),
  ];
  const pair = (j: number) => (r: Row) => [
    ...[0, 1, 2, 3].flatMap((i) => [
      ...get(r.bp), ...load8x8U(16 + 32 * j + 8 * i), ...set(C),
      ...dotX(lowNib(C, MASK), i), ...(i ? iAdd : []),
      ...(i ? get(HI) : []), ...dotX(highNib(C), 4 + i), ...(i ? iAdd : []), ...set(HI),
    ]),
    ...get(HI), ...hNarrowS, ...get(r.sc), ...vZero, ...simd(0x0d, ...scalePair(j)), ...iDot,
    ...get(r.iacc), ...iAdd, ...set(r.iacc), ...sinkI(r),
  ];
  const finish = (r: Row) => [
    ...get(r.sc), ...hExtHighU, ...get(XB), ...vload(36), ...iDot, ...set(M),
    ...scaleInto(r, r.iacc, 0), ...scaleInto(r, M, 2, true),
  ];
  const blk = (rows: Row[]) => [
    ...loadDx,
    ...rows.flatMap(scales),
    ...[0, 1, 2, 3].flatMap((j) =>
      relaxed
        ? [...[0, 1, 2, 3].flatMap((i) => [...get(XB), ...vload(52 + 64 * j + 16 * i), ...set(XV[i])]), ...rows.flatMap(relaxedPair(j))]
        : [...loadX(52 + 64 * j, 8), ...rows.flatMap(pair(j))],
    ),
    ...rows.flatMap(finish),
  ];
  return kernel(144, Q8_K_BYTES, blk, [...splatB(15), ...set(MASK)], 4);
}

/**
 * row.iacc += sc_a · Σ lanes of `lo` + sc_b · Σ lanes of `hi` (i32x4 on the stack, lo under hi; every
 * lane within i16): both narrowed to i16 exactly, then one dot_i16x8_s with the scale vector `scales`
 * leaves (as i16 lanes sc_a ×4, sc_b ×4).
 */
const scalePairInto = (r: Row, scales: number[]) => [...hNarrowS, ...scales, ...iDot, ...get(r.iacc), ...iAdd, ...set(r.iacc)];
/** i16 lanes (byte a ×4, byte b ×4) of vector local `l`, zero-extended: a shuffle with zero bytes. */
const bytePairU = (l: number, a: number, b: number) => [...get(l), ...vZero, ...simd(0x0d, ...[0, 1, 2, 3, 4, 5, 6, 7].flatMap((k) => [k < 4 ? a : b, 16]))];
/** The same, sign-extended: each byte into the high half, then an arithmetic shift. */
const bytePairS = (l: number, a: number, b: number) => [
  ...get(l), ...vZero, ...simd(0x0d, ...[0, 1, 2, 3, 4, 5, 6, 7].flatMap((k) => [16, k < 4 ? a : b])), ...i32c(8), ...hShrS,
];

/**
 * The relaxed variants' scalePairInto: `ra`, `rb` (vector locals) the i16 pair sums of sub-blocks a, b
 * (16 values each, or 32 as two halves added), regrouped into the i16 vector the narrow above gets
 * (lanes of elements 0..3 and 4..7 mod 8 of a, then of b: LOW_HALVES + HIGH_HALVES, within i16).
 */
const regroupInto = (r: Row, ra: number, rb: number, scales: number[]) => [
  ...get(ra), ...get(rb), ...LOW_HALVES, ...get(ra), ...get(rb), ...HIGH_HALVES, ...hAdd,
  ...scales, ...iDot, ...get(r.iacc), ...iAdd, ...set(r.iacc),
];

/**
 * Q2_K × q8_K (84 bytes: 16 scale bytes (low nibble the scale, high the min of 16 values), 64 bytes of
 * 2-bit values, f16 d, f16 dmin): ggml_vec_dot_q2_K_q8_K: d·Σ_s sc_s·(q·x)_s − dmin·Σ_s m_s·(Σx)_s.
 * Value 128k + 32j + l is bits 2j of byte 32k + l; its sub-block 8k + 2j + (l ≥ 16). The mins meet
 * x's 16 bsums in two dot_i16x8_s. Relaxed: the codes of a half as two 16-byte vectors (l < 16, l ≥ 16).
 */
function q2_KBody(relaxed: boolean): number[] {
  const [SCL, M, MASK] = [TMP[1], TMP[2], TMP[3]];
  const Q = [TMP[4], TMP[5], TMP[6], TMP[7]];
  const [RA, RB] = [TMP[8], TMP[0]];
  const relaxedHalf = (k: number) => (r: Row) => [
    ...[0, 1].flatMap((i) => [...get(r.bp), ...vload(16 + 32 * k + 16 * i), ...set(Q[i])]),
    ...[0, 1, 2, 3].flatMap((j) => {
      // bytes shifted in i16 lanes: the mask drops what the neighbour byte shifted in
      const code = (i: number) => [...get(Q[i]), ...(j ? [...i32c(2 * j), ...hShrU] : []), ...get(MASK), ...vAnd];
      const sub = (i: number, out: number) => [...get(XB), ...vload(52 + 128 * k + 32 * j + 16 * i), ...set(XV[i]), ...rdot(XV[i], code(i)), ...set(out)];
      return [...sub(0, RA), ...sub(1, RB), ...regroupInto(r, RA, RB, bytePairU(r.sc, 8 * k + 2 * j, 8 * k + 2 * j + 1))];
    }),
    ...sinkI(r),
  ];
  const start = (r: Row) => [
    ...get(r.bp), ...vload(0), ...splatB(15), ...vAnd, ...set(r.sc),
    ...vZero, ...set(r.iacc),
  ];
  // Per half k: its 32 bytes as four i16 vectors (kept in Q across the four shifts: one row at a time).
  const half = (k: number) => (r: Row) => [
    ...[0, 1, 2, 3].flatMap((i) => [...get(r.bp), ...load8x8U(16 + 32 * k + 8 * i), ...set(Q[i])]),
    ...[0, 1, 2, 3].flatMap((j) => {
      const w = (i: number) => [...get(Q[i]), ...(j ? [...i32c(2 * j), ...hShrU] : []), ...(j < 3 ? [...get(MASK), ...vAnd] : [])];
      const xv = (i: number) => [...get(XB), ...load8x8S(52 + 128 * k + 32 * j + 8 * i)];
      const d = (i: number) => [...w(i), ...xv(i), ...iDot];
      return [...d(0), ...d(1), ...iAdd, ...d(2), ...d(3), ...iAdd, ...scalePairInto(r, bytePairU(r.sc, 8 * k + 2 * j, 8 * k + 2 * j + 1))];
    }),
    ...sinkI(r),
  ];
  const finish = (r: Row) => [
    ...get(r.bp), ...vload(0), ...i32c(4), ...bShrU, ...set(SCL),
    ...get(SCL), ...hExtLowU, ...get(XB), ...vload(4), ...iDot,
    ...get(SCL), ...hExtHighU, ...get(XB), ...vload(20), ...iDot, ...iAdd, ...set(M),
    ...scaleInto(r, r.iacc, 80), ...scaleInto(r, M, 82, true),
  ];
  const body = relaxed ? relaxedHalf : half;
  const row = (r: Row) => [...start(r), ...body(0)(r), ...body(1)(r), ...finish(r)];
  return kernel(84, Q8_K_BYTES, (rows) => [...loadDx, ...rows.flatMap(row)], [...splatB(3), ...set(MASK)]);
}

/**
 * Q3_K × q8_K (110 bytes: 32 bytes of high bits, 64 of 2-bit values, 12 bytes of 6-bit scales, f16 d):
 * ggml_vec_dot_q3_K_q8_K: q = low 2 bits − (high bit clear ? 4 : 0), d·Σ_s (sc_s − 32)·(q·x)_s.
 * Value 128h + 32j + l: bits 2j of qs byte 32h + l, high bit 4h + j of hmask byte l; sub-block
 * 8h + 2j + (l ≥ 16). The 12 scale bytes unpack as ggml's kmask code does, into the lanes of row.sc.
 * Relaxed: the codes 0..7 (low bits | high bit · 4) of l < 16 and l ≥ 16 as two 16-byte vectors, less
 * 4 · x's pair sums.
 */
function q3_KBody(relaxed: boolean): number[] {
  const [MASK, FOUR] = [TMP[0], TMP[1]];
  const Q = [TMP[2], TMP[3], TMP[4], TMP[5]];
  const HM = [TMP[6], TMP[7], TMP[8], XV[0]];
  const m = (l: number, sh: number, mask: number) => [...get(l), ...(sh ? [...i32c(sh), ...i32ShrU] : []), ...i32c(mask), ...i32And];
  const lane = (lo: number[], hi: number[]) => [...lo, ...hi, ...i32c(4), ...i32Shl, ...i32Or];
  const scales = (r: Row) => [
    ...get(r.bp), ...i32Load(96), ...set(U0),
    ...get(r.bp), ...i32Load(100), ...set(U1),
    ...get(r.bp), ...i32Load(104), ...set(U2),
    ...lane(m(U0, 0, 0x0f0f0f0f), m(U2, 0, 0x03030303)), ...iSplat,
    ...lane(m(U1, 0, 0x0f0f0f0f), m(U2, 2, 0x03030303)), ...iReplace(1),
    ...lane(m(U0, 4, 0x0f0f0f0f), m(U2, 4, 0x03030303)), ...iReplace(2),
    ...lane(m(U1, 4, 0x0f0f0f0f), m(U2, 6, 0x03030303)), ...iReplace(3),
    ...splatB(32), ...bSub, ...set(r.sc),
    ...vZero, ...set(r.iacc),
    ...(relaxed
      ? [0, 1].flatMap((i) => [...get(r.bp), ...vload(16 * i), ...set(HM[i])])
      : [0, 1, 2, 3].flatMap((i) => [...get(r.bp), ...load8x8U(8 * i), ...set(HM[i])])),
  ];
  const [RA, RB] = [TMP[4], TMP[5]];
  const relaxedHalf = (h: number) => (r: Row) => [
    ...[0, 1].flatMap((i) => [...get(r.bp), ...vload(32 + 32 * h + 16 * i), ...set(Q[i])]),
    ...[0, 1, 2, 3].flatMap((j) => {
      const bit = 4 * h + j;
      const hb = (i: number) => [...get(HM[i]), ...(bit > 2 ? [...i32c(bit - 2), ...hShrU] : bit < 2 ? [...i32c(2 - bit), ...hShl] : []), ...get(FOUR), ...vAnd];
      const code = (i: number) => [...get(Q[i]), ...(j ? [...i32c(2 * j), ...hShrU] : []), ...get(MASK), ...vAnd, ...hb(i), ...vOr];
      const sub = (i: number, out: number) => [
        ...get(XB), ...vload(52 + 128 * h + 32 * j + 16 * i), ...set(XV[i]),
        ...rdot(XV[i], code(i)), ...rdot(XV[i], get(FOUR)), ...hSub, ...set(out),
      ];
      return [...sub(0, RA), ...sub(1, RB), ...regroupInto(r, RA, RB, bytePairS(r.sc, 8 * h + 2 * j, 8 * h + 2 * j + 1))];
    }),
    ...sinkI(r),
  ];
  const half = (h: number) => (r: Row) => [
    ...[0, 1, 2, 3].flatMap((i) => [...get(r.bp), ...load8x8U(32 + 32 * h + 8 * i), ...set(Q[i])]),
    ...[0, 1, 2, 3].flatMap((j) => {
      const bit = 4 * h + j; // the high bit's position; moved to bit 2 (the value 4)
      const hb = (i: number) => [...get(HM[i]), ...(bit > 2 ? [...i32c(bit - 2), ...hShrU] : bit < 2 ? [...i32c(2 - bit), ...hShl] : []), ...get(FOUR), ...vAnd];
      const w = (i: number) => [
        ...get(Q[i]), ...(j ? [...i32c(2 * j), ...hShrU] : []), ...get(MASK), ...vAnd,
        ...hb(i), ...vOr, ...get(FOUR), ...hSub,
      ];
      const d = (i: number) => [...w(i), ...get(XB), ...load8x8S(52 + 128 * h + 32 * j + 8 * i), ...iDot];
      return [...d(0), ...d(1), ...iAdd, ...d(2), ...d(3), ...iAdd, ...scalePairInto(r, bytePairS(r.sc, 8 * h + 2 * j, 8 * h + 2 * j + 1))];
    }),
    ...sinkI(r),
  ];
  const body = relaxed ? relaxedHalf : half;
  const row = (r: Row) => [...scales(r), ...body(0)(r), ...body(1)(r), ...scaleInto(r, r.iacc, 108)];
  // FOUR: 4 in each i16 lane, or (relaxed) in each byte
  const four = relaxed ? splatB(4) : [...i32c(4), ...hSplat];
  return kernel(110, Q8_K_BYTES, (rows) => [...loadDx, ...rows.flatMap(row)], [...splatB(3), ...set(MASK), ...four, ...set(FOUR)]);
}

/**
 * Q6_K × q8_K (210 bytes: 128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales, f16 d): each
 * 16 values share a scale; q = (nibble | high << 4) − 32. Per half (128 values): ql bytes 0..63 and qh
 * bytes 0..31; value 16k + l of the half takes its nibble from ql[16(k mod 4) + l] (low for k < 4) and
 * its high bits from qh[16(k mod 2) + l] at bits 2·⌊k/2⌋. Relaxed: the codes 0..63 in relaxed dots, less 32 ·
 * x's pair sums, then sub-blocks k, k + 1 zipped and scaled by one dot_i16x8_s with (sc_k, sc_k+1) ×4.
 */
function q6_KBody(relaxed: boolean): number[] {
  const QL = [TMP[0], TMP[1], TMP[2], TMP[3]];
  const QH = [TMP[4], TMP[5]];
  const [D0, D1, K32, SC] = [TMP[6], TMP[7], TMP[8], XV[2]];
  const half = (h: number) => (r: Row) => {
    const code = (k: number) => {
      const lo = k < 4 ? [...get(QL[k]), ...splatB(15), ...vAnd] : [...get(QL[k - 4]), ...i32c(4), ...bShrU];
      const sh = [4, 4, 2, 2, 0, 0, -2, -2][k];
      const hi = [...get(QH[k & 1]), ...(sh > 0 ? [...i32c(sh), ...bShl] : sh < 0 ? [...i32c(-sh), ...bShrU] : []), ...splatB(0x30), ...vAnd];
      return [...lo, ...hi, ...vOr];
    };
    // i16 lanes: Σ (q − 32)·x over elements 2j, 2j + 1 of sub-block k (within ±2·32·127)
    const diff = (k: number, out: number) => [
      ...get(XB), ...vload(52 + 128 * h + 16 * k), ...set(XV[0]),
      ...rdot(XV[0], code(k)), ...rdot(XV[0], get(K32)), ...hSub, ...set(out),
    ];
    // i32 lane l = sc_k·(lanes l, l + 4 of D0) + sc_k+1·(the same of D1): zipped, the halves added (within i16), one dot
    const pairOf = (k: number) => [
      ...diff(k, D0), ...diff(k + 1, D1),
      ...get(D0), ...get(D1), ...ZIP_LOW, ...get(D0), ...get(D1), ...ZIP_HIGH, ...hAdd,
      ...get(SC), ...get(SC), ...shuffle([0, 1, 2, 3].flatMap(() => range(2 * k, 4))), ...iDot,
      ...get(r.iacc), ...iAdd, ...set(r.iacc),
    ];
    const sub = (k: number) => [
      ...get(r.iacc),
      ...get(XB), ...load8x8S(52 + 128 * h + 16 * k), ...set(XV[0]),
      ...get(XB), ...load8x8S(60 + 128 * h + 16 * k), ...set(XV[1]),
      ...dot16([...code(k), ...splatB(32), ...bSub], 0),
      ...get(r.bp), ...i32Load8S(192 + 8 * h + k), ...iSplat, ...iMul, ...iAdd, ...set(r.iacc),
    ];
    return [
      ...[0, 1, 2, 3].flatMap((i) => [...get(r.bp), ...vload(64 * h + 16 * i), ...set(QL[i])]),
      ...[0, 1].flatMap((i) => [...get(r.bp), ...vload(128 + 32 * h + 16 * i), ...set(QH[i])]),
      ...(relaxed
        ? [...get(r.bp), ...load8x8S(192 + 8 * h), ...set(SC), ...[0, 2, 4, 6].flatMap(pairOf)]
        : [0, 1, 2, 3, 4, 5, 6, 7].flatMap(sub)),
    ];
  };
  const row = (r: Row) => [...vZero, ...set(r.iacc), ...half(0)(r), ...half(1)(r), ...scaleInto(r, r.iacc, 208)];
  return kernel(210, Q8_K_BYTES, (rows) => [...loadDx, ...rows.flatMap(row)], relaxed ? [...splatB(32), ...set(K32)] : []);
}

/** The kernels by export name, for ./wasm.ts's module (10 i32 parameters each). */
/**
 * The kernels by export name, for ./wasm.ts's module (10 i32 parameters each). `body(relaxed)`: with
 * relaxed SIMD's exact integer dots (by default where ./relaxed.ts allows them); same results either way.
 */
export const QDOT_KERNELS: Record<QdotFormat, { name: string; body: (relaxed?: boolean) => number[] }> = {
  Q8_0: { name: 'qdot_q8_0', body: () => q8_0Body() },
  Q4_0: { name: 'qdot_q4_0', body: (relaxed = relaxedIntegerDots()) => q4_0Body(relaxed) },
  Q5_0: { name: 'qdot_q5_0', body: (relaxed = relaxedIntegerDots()) => q5_0Body(relaxed) },
  Q4_K: { name: 'qdot_q4_k', body: (relaxed = relaxedIntegerDots()) => q4_KBody(relaxed) },
  Q2_K: { name: 'qdot_q2_k', body: (relaxed = relaxedIntegerDots()) => q2_KBody(relaxed) },
  Q3_K: { name: 'qdot_q3_k', body: (relaxed = relaxedIntegerDots()) => q3_KBody(relaxed) },
  Q6_K: { name: 'qdot_q6_k', body: (relaxed = relaxedIntegerDots()) => q6_KBody(relaxed) },
};
