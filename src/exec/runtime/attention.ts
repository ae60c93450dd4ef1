/**
 * Attention over the KV cache in WebAssembly SIMD: the scores q·k, the softmax and the weighted sum
 * of the values for one query head, over a list of cache slots (causal: a run of slots; a tree: the
 * slots a token sees). The module is assembled here per head size (the head's lanes stay in
 * registers) and instantiated once per KV cache over that cache's own memory, which holds the keys
 * and values of every layer, so the kernel reads the cache in place. Browser-safe.
 *
 * One kernel for causal and tree attention: the same keys in the same order give the same bits, which
 * speculative verification relies on (a token's row equals plain decoding's).
 */
import type { AttentionMask } from '../../core/ir/ir.js';
import { firstVisible } from '../../core/ir/mask.js';
import type { KvType } from '../../core/pipeline/target.js';
import { F32, I32, uleb, V128, vec } from '../../core/util/wasm-asm.js';
import { expLanes } from './activation.js';
import { kernelModuleBytes } from './kernel-module.js';
import { kernelModule } from './kernel-store.js';
import { attendGroups } from './attend-groups.js';
import type { MatmulPool } from './pool.js';
import {
  block, br, brIf, f32c, f32Load, f32Max, f32Mul, f32Reinterpret, fAbs, fAdd, fDiv, fExtract, fFromI32, fGe, fMax, fMul, fShuffle, fSplat, fSub, get,
  i32Add, i32And, i32c, i32GeS, i32Load, i32LtS, i32Mul, i32Or, i32Reinterpret, i32Shl, i32Sub, iConst, iLtS, iShl, iSplat, loop, select,
  set, simd, tee, vAnd, vBitselect, vload, vOr, vstore, vZero,
} from '../../core/util/wasm-ops.js';

/**
 * Which cached keys each new token attends to when the new tokens are a tree (speculative
 * verification, or a draft decoding branches) instead of a causal run.
 */
export interface TreeAttention {
  /** Cache slots [0, shared) every new token sees (the committed context). */
  shared: number;
  /** Per new token t: the slots ≥ shared it sees, ascending; its own slot (pos0 + t) included. */
  visible: Int32Array[];
  /** Per new token: its position (RoPE, sliding window). */
  positions: Int32Array;
  /** Position of every slot in [shared, pos0 + T) (sliding window). */
  keyPositions: Int32Array;
}

/** Bytes one head's hd values take in a cache row. */
export function headBytes(type: KvType, hd: number): number {
  return type === 'f32' ? 4 * hd : type === 'f16' ? 2 * hd : (hd / 32) * 34;
}

const memarg = (off: number) => [0, ...uleb(off)];
const i32Load16U = (off: number) => [0x2f, ...memarg(off)];
const splat4 = (x: number): [number, number, number, number] => [x, x, x, x];
const hExtLowS8 = simd(0x87); // i16x8.extend_low_i8x16_s
const iExtLowS16 = simd(0xa7); // i32x4.extend_low_i16x8_s
const iExtHighS16 = simd(0xa8); // i32x4.extend_high_i16x8_s
const hExtHighS8 = simd(0x88); // i16x8.extend_high_i8x16_s
const TWO_112 = 0x77800000; // 2^112 as float32 bits
const i32GtS = [0x4a];

/**
 * Q8_0: the float32 d of the block holding lanes 4c… of the head row at `row`, splat into `dv`
 * (nothing unless c starts a block). Half → float as `widenBody` does it, in scalar.
 */
function blockScale(row: number, c: number, dv: number): number[] {
  const bits = [...get(row), ...i32Load16U(34 * (c / 8))];
  return [
    ...bits, ...i32c(0x7fff), ...i32And, ...i32c(13), ...i32Shl, ...f32Reinterpret, ...f32c(2 ** 112), ...f32Mul, ...i32Reinterpret,
    ...bits, ...i32c(0x7fff), ...i32And, ...i32c(0x7bff), ...i32GtS, ...i32c(0x7f800000), ...i32Mul, ...i32Or,
    ...bits, ...i32c(0x8000), ...i32And, ...i32c(16), ...i32Shl, ...i32Or,
    ...f32Reinterpret, ...fSplat, ...set(dv),
  ];
}

/**
 * widen(src, stride, n, dst): n rows of one head's hd values kept as `type` (row i at src + i·stride)
 * into float32 rows at dst + i·4hd, each value exactly as dequantize_row_* gives it, so attention over
 * them has the bits of attention over a widened copy. Half → float (eight per load): the sign-extended
 * half shifted by 13 and masked to sign | magnitude in float32's places, times 2^112 (exact for normals
 * and subnormals); exponent 31 (inf, NaN) comes out ≥ 2^16, past every finite half, and gets float32's
 * all-ones exponent. Q8_0 (sixteen per load): q · d, d the block's half widened in scalar.
 */
function widenBody(hd: number, type: Exclude<KvType, 'f32'>): number[] {
  const [SRC, STRIDE, N, DST, I] = [0, 1, 2, 3, 4];
  const [H, X, T, DV] = [5, 6, 7, 8];
  const half = (lanes: number[]) => [
    ...lanes, ...i32c(13), ...iShl, ...iConst(splat4(0x8fffe000)), ...vAnd, ...iConst(splat4(TWO_112)), ...fMul,
    ...tee(T), ...get(T), ...fAbs, ...iConst(splat4(0x47800000)), ...fGe, ...iConst(splat4(0x7f800000)), ...vAnd, ...vOr,
  ];
  const row: number[] = [];
  if (type === 'f16') {
    for (let j = 0; j < hd / 8; j++) {
      row.push(...get(SRC), ...vload(16 * j), ...set(H));
      row.push(...get(DST), ...half([...get(H), ...iExtLowS16]), ...vstore(32 * j));
      row.push(...get(DST), ...half([...get(H), ...iExtHighS16]), ...vstore(32 * j + 16));
    }
  } else {
    for (let b = 0; b < hd / 32; b++) {
      row.push(...blockScale(SRC, 8 * b, DV));
      for (let k = 0; k < 2; k++) {
        row.push(...get(SRC), ...vload(34 * b + 2 + 16 * k), ...set(H));
        for (const [lo, ext] of [[0, hExtLowS8], [1, hExtHighS8]] as const) {
          row.push(...get(H), ...ext, ...set(X));
          for (const [m, ext32] of [[0, iExtLowS16], [1, iExtHighS16]] as const) {
            row.push(...get(DST), ...get(X), ...ext32, ...fFromI32, ...get(DV), ...fMul, ...vstore(4 * (32 * b + 16 * k + 8 * lo + 4 * m)));
          }
        }
      }
    }
  }
  const body = [
    ...i32c(0), ...set(I),
    ...block(loop([
      ...get(I), ...get(N), ...i32GeS, ...brIf(1),
      ...row,
      ...get(SRC), ...get(STRIDE), ...i32Add, ...set(SRC),
      ...get(DST), ...i32c(4 * hd), ...i32Add, ...set(DST),
      ...get(I), ...i32c(1), ...i32Add, ...set(I),
      ...br(0),
    ])),
  ];
  return [...vec([[1, I32], [4, V128]].map(([n, t]) => [...uleb(n), t])), ...body, 0x0b];
}

/**
 * attend(q, k, v, stride, keys, n, scores, out, scale): for the n cache slots keys[0..n) (i32),
 * s_j = (q · K[slot_j]) · scale, p = softmax(s), out = Σ_j p_j V[slot_j]; K and V rows of the head
 * start at k + slot·stride and v + slot·stride (bytes); q and out hold hd floats; scores has room for
 * n rounded up to 4. Scores are computed four keys at a time, their lanes summed by a transpose.
 */
function attendBody(hd: number): number[] {
  const H4 = hd / 4;
  const [QP, KP, VP, STRIDE, KEYS, N, SCORES, OUT, SCALE] = [0, 1, 2, 3, 4, 5, 6, 7, 8];
  const [K, A0, A1, A2, A3, LAST] = [9, 10, 11, 12, 13, 14];
  const [MAX, SUM] = [15, 16];
  let l = 17;
  const Q = Array.from({ length: H4 }, () => l++);
  const ACC = [l++, l++, l++, l++];
  const [R, MAXV, SUMV, E, SCALEV, X, FX] = [l++, l++, l++, l++, l++, l++, l++];
  const OUT_ = Array.from({ length: H4 }, () => l++);
  const A = [A0, A1, A2, A3];
  const nV128 = l - 17;

  /** Lanes of the group of four keys at K that are real keys (K + lane < n). */
  const liveMask = [...iConst([0, 1, 2, 3]), ...get(N), ...get(K), ...i32Sub, ...iSplat, ...iLtS];
  const scoreAt = [...get(SCORES), ...get(K), ...i32c(2), ...i32Shl, ...i32Add];
  /** forEachKey(step, body): for (K = 0; K < n; K += step) body. */
  const forKeys = (step: number, body: number[]) => [
    ...i32c(0), ...set(K),
    ...block(loop([...get(K), ...get(N), ...i32GeS, ...brIf(1), ...body, ...get(K), ...i32c(step), ...i32Add, ...set(K), ...br(0)])),
  ];
  /** e^X for X ≤ 0 (Cephes expf: 2^n · p(r), |error| ≤ 2 ulp; below −87.3 it is ~1e-38, never 0). */
  const exp = expLanes(X, FX);
  const hsum = (v: number, op: number[]) => [...get(v), ...fExtract(0), ...get(v), ...fExtract(1), ...op, ...get(v), ...fExtract(2), ...op, ...get(v), ...fExtract(3), ...op];
  const f32AddScalar = [0x92];

  const scores = forKeys(4, [
    // the rows of four keys (a key past n repeats the last one; its lane is masked below)
    ...A.flatMap((a, i) => [
      ...get(KP),
      ...get(KEYS), ...get(K), ...i32c(2), ...i32Shl, ...i32Add, ...i32Load(4 * i),
      ...get(LAST),
      ...get(K), ...i32c(i), ...i32Add, ...get(N), ...i32LtS,
      ...select, ...get(STRIDE), ...i32Mul, ...i32Add, ...set(a),
    ]),
    ...ACC.flatMap((acc, i) => [
      ...Q.flatMap((q, c) => [...get(q), ...get(A[i]), ...vload(16 * c), ...fMul, ...(c ? fAdd : [])]),
      ...set(acc),
    ]),
    // transpose-add: [Σacc0, Σacc1, Σacc2, Σacc3]
    ...get(ACC[0]), ...get(ACC[1]), ...fShuffle([0, 4, 1, 5]), ...get(ACC[0]), ...get(ACC[1]), ...fShuffle([2, 6, 3, 7]), ...fAdd, ...set(ACC[0]),
    ...get(ACC[2]), ...get(ACC[3]), ...fShuffle([0, 4, 1, 5]), ...get(ACC[2]), ...get(ACC[3]), ...fShuffle([2, 6, 3, 7]), ...fAdd, ...set(ACC[2]),
    ...get(ACC[0]), ...get(ACC[2]), ...fShuffle([0, 1, 4, 5]), ...get(ACC[0]), ...get(ACC[2]), ...fShuffle([2, 3, 6, 7]), ...fAdd,
    ...get(SCALEV), ...fMul,
    ...f32c(-Infinity), ...fSplat, ...liveMask, ...vBitselect, ...set(R),
    ...scoreAt, ...get(R), ...vstore(0),
    ...get(MAXV), ...get(R), ...fMax, ...set(MAXV),
  ]);
  const softmax = forKeys(4, [
    ...scoreAt, ...vload(0), ...get(MAXV), ...fSub, ...set(X),
    ...exp, ...vZero, ...liveMask, ...vBitselect, ...set(E),
    ...scoreAt, ...get(E), ...vstore(0),
    ...get(SUMV), ...get(E), ...fAdd, ...set(SUMV),
  ]);
  const weighted = forKeys(1, [
    ...get(VP), ...get(KEYS), ...get(K), ...i32c(2), ...i32Shl, ...i32Add, ...i32Load(0), ...get(STRIDE), ...i32Mul, ...i32Add, ...set(A0),
    ...scoreAt, ...f32Load(0), ...fSplat, ...set(E),
    ...OUT_.flatMap((o, c) => [...get(o), ...get(E), ...get(A0), ...vload(16 * c), ...fMul, ...fAdd, ...set(o)]),
  ]);
  const body = [
    ...Q.flatMap((q, c) => [...get(QP), ...vload(16 * c), ...set(q)]),
    ...get(SCALE), ...fSplat, ...set(SCALEV),
    ...f32c(-Infinity), ...fSplat, ...set(MAXV),
    ...get(KEYS), ...get(N), ...i32c(1), ...i32Sub, ...i32c(2), ...i32Shl, ...i32Add, ...i32Load(0), ...set(LAST),
    ...scores,
    ...hsum(MAXV, f32Max), ...set(MAX),
    ...get(MAX), ...fSplat, ...set(MAXV),
    ...softmax,
    ...hsum(SUMV, f32AddScalar), ...set(SUM),
    ...weighted,
    ...get(SUM), ...fSplat, ...set(E),
    ...OUT_.flatMap((o, c) => [...get(OUT), ...get(o), ...get(E), ...fDiv, ...vstore(16 * c)]),
  ];
  return [...vec([[6, I32], [2, F32], [nV128, V128]].map(([n, t]) => [...uleb(n), t])), ...body, 0x0b];
}

/**
 * f32: attend over float32 rows. Compact types: the same float32 attend, over one head's rows that
 * `widen` writes into a float32 scratch once per KV head and call (its query heads share them):
 * converting lanes inside attend repeated the work per query head and ran 2–3× slower.
 */
function moduleBytes(hd: number, type: KvType, shared: boolean): Uint8Array<ArrayBuffer> {
  const attend = { name: 'attend', params: [...new Array(8).fill(I32), F32], body: attendBody(hd) };
  if (type === 'f32') return kernelModuleBytes([attend], shared);
  return kernelModuleBytes([attend, { name: 'widen', params: [I32, I32, I32, I32], body: widenBody(hd, type) }], shared);
}

/** The compiled module for head size hd (a multiple of 4, at most 256; of 8 for f16, 32 for q8_0) over `type` rows, or null without WebAssembly SIMD. */
function attentionModule(hd: number, type: KvType, shared = false): WebAssembly.Module | null {
  // widen reads halves eight at a time, Q8_0 a block at a time
  if (hd % 4 !== 0 || hd > 256 || (type === 'f16' && hd % 8 !== 0) || (type === 'q8_0' && hd % 32 !== 0)) return null;
  const name = (type === 'f32' ? `attention-hd${hd}` : `attention-hd${hd}-${type}`) + (shared ? '-shared' : '');
  return kernelModule(name, () => moduleBytes(hd, type, shared));
}

type AttendFn = (q: number, k: number, v: number, stride: number, keys: number, n: number, scores: number, out: number, scale: number) => void;
type WidenFn = (src: number, stride: number, n: number, dst: number) => void;

const PAGE = 65536;
/** Query rows staged per kernel round (the scratch for q and out holds this many tokens). */
const ROWS = 16;
/** Bytes of the pooled job's parameter block (./attend-groups.ts): 18 slots and two per staged row. */
const PARAM_BYTES = (18 + 2 * ROWS) * 4;

/**
 * One KV cache's memory: per layer a K and a V region of `capacity` rows of kvDim values kept as
 * `type` (float32; or compact, as ./kv-store.ts's KvPlane lays a row out, read by the kernel in
 * place), and the kernel's scratch (query and output rows, scores, the slot lists). Grows by
 * relayout (the views of the old buffer are replaced: take them from `k` / `v` / `bytesOf` after
 * `reserve`).
 */
export class KvMemory {
  private memory: WebAssembly.Memory;
  private readonly attendFn: AttendFn;
  private qOff = 0;
  private outOff = 0;
  private scoresOff = 0;
  /** 0, 1, 2 … capacity − 1: a causal run of slots is a window of this list. */
  private runOff = 0;
  /** A tree token's slots. */
  private listOff = 0;
  private layerOff: number[] = [];
  private f32 = new Float32Array(0);
  private i32 = new Int32Array(0);
  /** Bytes of one cache row (kvDim values). */
  readonly rowBytes: number;
  /** Bytes of the float32 scratch compact types widen one head into. */
  get scratchBytes(): number {
    return this.type === 'f32' ? 0 : 2 * this.capacity * (this.pool ? this.kvDim : this.headDim) * 4;
  }
  capacity = 0;
  /** f32: each layer's keys and values as float32 rows (empty for compact types: see `bytesOf`). */
  k: Float32Array[] = [];
  v: Float32Array[] = [];

  /** Compact types: one head's keys and values widened to float32 (capacity rows of hd each). */
  private wideOff = 0;
  private readonly widenFn: WidenFn | null;
  /** Pooled: the pool, this memory's slot on it and this thread's job (attendGroups). */
  private readonly pool: MatmulPool | null;
  private slot = -1;
  private job: ((...a: number[]) => void) | null = null;
  private paramOff = 0;

  private constructor(
    private readonly module: WebAssembly.Module,
    readonly numLayers: number,
    readonly kvDim: number,
    readonly qDim: number,
    readonly headDim: number,
    readonly type: KvType,
    pool: MatmulPool | null,
  ) {
    this.rowBytes = (kvDim / headDim) * headBytes(type, headDim);
    this.pool = pool;
    this.memory = new WebAssembly.Memory(pool ? { initial: 1, maximum: 65536, shared: true } : { initial: 1 });
    const exports = new WebAssembly.Instance(module, { env: { memory: this.memory } }).exports;
    if (pool) this.job = attendGroups(exports, this.memory);
    this.attendFn = exports.attend as AttendFn;
    this.widenFn = type === 'f32' ? null : (exports.widen as WidenFn);
    this.relayout(0, 0);
  }

  /** null when WebAssembly SIMD is missing or the head size does not suit the kernel. */
  /** `pool`: causal attention runs on it, its KV groups split over the threads (the memory is shared). */
  static create(numLayers: number, kvDim: number, qDim: number, headDim: number, type: KvType = 'f32', pool: MatmulPool | null = null): KvMemory | null {
    const mod = attentionModule(headDim, type, pool !== null && kvDim / headDim > 1);
    if (!mod) return null;
    try {
      return new KvMemory(mod, numLayers, kvDim, qDim, headDim, type, pool !== null && kvDim / headDim > 1 ? pool : null);
    } catch {
      return null;
    }
  }

  /** Layer `layer`'s K and V regions as bytes (rows of rowBytes). */
  bytesOf(layer: number): { k: Uint8Array; v: Uint8Array } {
    const n = this.capacity * this.rowBytes;
    return { k: new Uint8Array(this.memory.buffer, this.layerOff[2 * layer], n), v: new Uint8Array(this.memory.buffer, this.layerOff[2 * layer + 1], n) };
  }

  /** Room for `cap` positions; the first `keep` positions of every layer survive. */
  relayout(cap: number, keep: number): void {
    const old = this.layerOff;
    const pad = (cap + 4) * 4;
    let at = 0;
    const take = (bytes: number) => {
      const o = at;
      at += Math.ceil(bytes / 64) * 64;
      return o;
    };
    this.paramOff = this.pool ? take(PARAM_BYTES) : 0;
    this.qOff = take(ROWS * this.qDim * 4);
    this.outOff = take(ROWS * this.qDim * 4);
    // pooled: a scores row and a widen scratch per KV group (the groups run at once)
    const groups = this.pool ? this.kvDim / this.headDim : 1;
    this.scoresOff = take(pad * groups);
    this.runOff = take(pad);
    this.listOff = take(pad);
    this.wideOff = this.type === 'f32' ? 0 : take(2 * cap * this.headDim * 4 * groups);
    const layerOff = Array.from({ length: 2 * this.numLayers }, () => take(cap * this.rowBytes));
    const need = at + 64;
    if (need > this.memory.buffer.byteLength) this.memory.grow(Math.ceil((need - this.memory.buffer.byteLength) / PAGE));
    this.f32 = new Float32Array(this.memory.buffer);
    this.i32 = new Int32Array(this.memory.buffer);
    // Regions only move up: copy the last first (copyWithin is a memmove).
    const bytes = keep * this.rowBytes;
    const u8 = new Uint8Array(this.memory.buffer);
    for (let i = old.length - 1; i >= 0 && bytes > 0; i--) u8.copyWithin(layerOff[i], old[i], old[i] + bytes);
    this.layerOff = layerOff;
    this.capacity = cap;
    for (let j = 0; j < cap; j++) this.i32[(this.runOff >> 2) + j] = j;
    if (this.type !== 'f32') return;
    this.k = Array.from({ length: this.numLayers }, (_, l) => new Float32Array(this.memory.buffer, layerOff[2 * l], cap * this.kvDim));
    this.v = Array.from({ length: this.numLayers }, (_, l) => new Float32Array(this.memory.buffer, layerOff[2 * l + 1], cap * this.kvDim));
  }

  /**
   * Causal attention of the T new rows of q ([T, qDim], positions pos0 …) into att, for the first qpg
   * heads of each of the first G KV groups (head h = g·nrep + hh reads group g); a sliding window
   * keeps the last `window` positions (the keys from firstVisible(mask, p) on). `tokens`: row r of q is new token tokens[r] (a layer that
   * needs only some positions' outputs); default row r is token r.
   */
  attendCausal(layer: number, q: Float32Array, att: Float32Array, T: number, pos0: number, G: number, qpg: number, nrep: number, scale: number, mask: AttentionMask, tokens: ArrayLike<number> | null = null): void {
    let lo = pos0;
    let hi = pos0 + T;
    if (tokens) {
      for (let r = 0; r < T; r++) lo = Math.min(lo, pos0 + tokens[r]);
      hi = 0;
      for (let r = 0; r < T; r++) hi = Math.max(hi, pos0 + tokens[r] + 1);
    }
    const keys = (r: number) => {
      const p = pos0 + (tokens ? tokens[r] : r);
      const first = Math.max(0, firstVisible(mask, p));
      this.nKeys = p - first + 1;
      return this.runOff + 4 * first;
    };
    if (this.pool && G > 1) return this.pooledRows(layer, q, att, T, G, qpg, nrep, scale, Math.max(0, firstVisible(mask, lo)), hi, keys);
    this.rows(layer, q, att, T, G, qpg, nrep, scale, Math.max(0, firstVisible(mask, lo)), hi, (r) => {
      const p = pos0 + (tokens ? tokens[r] : r);
      const first = Math.max(0, firstVisible(mask, p));
      this.nKeys = p - first + 1;
      return this.runOff + 4 * first;
    });
  }

  /** Tree attention (see TreeAttention): token t sees the shared slots, then its visible ones, in slot order. */
  attendTree(layer: number, q: Float32Array, att: Float32Array, T: number, tree: TreeAttention, G: number, qpg: number, nrep: number, scale: number, mask: AttentionMask, tokens: ArrayLike<number> | null = null): void {
    const i32 = this.i32;
    const list = this.listOff >> 2;
    this.rows(layer, q, att, T, G, qpg, nrep, scale, 0, tree.shared + tree.keyPositions.length, (r) => {
      const t = tokens ? tokens[r] : r;
      const p = tree.positions[t];
      const first = firstVisible(mask, p);
      let n = 0;
      for (let j = Math.max(0, first); j < tree.shared; j++) i32[list + n++] = j;
      for (const j of tree.visible[t]) if (tree.keyPositions[j - tree.shared] >= first) i32[list + n++] = j;
      this.nKeys = n;
      return this.listOff;
    });
  }

  private nKeys = 0;

  /**
   * `rows` on the pool: per staged pass of rows one job whose lanes are the KV groups (attendGroups:
   * each group widened into its own scratch, its query heads in one thread's order: the same bits).
   */
  private pooledRows(layer: number, q: Float32Array, att: Float32Array, T: number, G: number, qpg: number, nrep: number, scale: number, lo: number, hi: number, keys: (t: number) => number): void {
    const pool = this.pool!;
    if (this.slot < 0 || !pool.isAttached(this.slot, this)) this.slot = pool.attach(this.module, this.memory, this);
    const { qDim, headDim: hd } = this;
    const f32 = this.f32;
    const i32 = this.i32;
    const P = this.paramOff >> 2;
    i32[P] = this.layerOff[2 * layer];
    i32[P + 1] = this.layerOff[2 * layer + 1];
    i32[P + 2] = this.rowBytes;
    i32[P + 3] = headBytes(this.type, hd);
    i32[P + 4] = this.widenFn ? this.wideOff : 0;
    i32[P + 5] = this.capacity;
    i32[P + 6] = lo;
    i32[P + 7] = hi;
    i32[P + 9] = this.qOff;
    i32[P + 10] = this.outOff;
    i32[P + 11] = this.scoresOff;
    i32[P + 12] = (this.capacity + 4) * 4;
    i32[P + 13] = qDim;
    i32[P + 14] = nrep;
    i32[P + 15] = qpg;
    i32[P + 16] = hd;
    f32[P + 17] = scale;
    for (let t0 = 0; t0 < T; t0 += ROWS) {
      const n = Math.min(ROWS, T - t0);
      i32[P + 8] = n;
      for (let r = 0; r < n; r++) {
        i32[P + 18 + 2 * r] = keys(t0 + r);
        i32[P + 19 + 2 * r] = this.nKeys;
      }
      f32.set(q.subarray(t0 * qDim, (t0 + n) * qDim), this.qOff >> 2);
      pool.callAttached(this.slot, this.job!, this.paramOff, G);
      // the widened rows stay valid for the next pass
      i32[P + 6] = i32[P + 7];
      const outs = f32.subarray(this.outOff >> 2, (this.outOff >> 2) + n * qDim);
      if (qpg === nrep && G * nrep * hd === qDim) att.set(outs, t0 * qDim);
      else {
        for (let r = 0; r < n; r++) {
          for (let g = 0; g < G; g++) {
            const o = r * qDim + g * nrep * hd;
            att.set(outs.subarray(o, o + qpg * hd), (t0 + r) * qDim + g * nrep * hd);
          }
        }
      }
    }
  }

  /**
   * Rows of q staged ROWS at a time; `keys(r)` gives the byte address of row r's slot list and sets
   * nKeys; every slot listed lies in [lo, hi). A compact cache runs one KV group at a time, its rows
   * [lo, hi) widened first (the same float32 arithmetic per head, in another order of heads).
   */
  private rows(layer: number, q: Float32Array, att: Float32Array, T: number, G: number, qpg: number, nrep: number, scale: number, lo: number, hi: number, keys: (t: number) => number): void {
    const { qDim, headDim: hd, rowBytes } = this;
    const hb = headBytes(this.type, hd);
    const f32 = this.f32;
    const kBase = this.layerOff[2 * layer];
    const vBase = this.layerOff[2 * layer + 1];
    const fn = this.attendFn;
    const widen = this.widenFn;
    const wideK = this.wideOff;
    const wideV = this.wideOff + this.capacity * hd * 4;
    for (let pass = 0; pass < (widen ? G : 1); pass++) {
      const [g0, g1] = widen ? [pass, pass + 1] : [0, G];
      if (widen && hi > lo) {
        widen(kBase + pass * hb + lo * rowBytes, rowBytes, hi - lo, wideK + lo * hd * 4);
        widen(vBase + pass * hb + lo * rowBytes, rowBytes, hi - lo, wideV + lo * hd * 4);
      }
      for (let t0 = 0; t0 < T; t0 += ROWS) {
        const n = Math.min(ROWS, T - t0);
        f32.set(q.subarray(t0 * qDim, (t0 + n) * qDim), this.qOff >> 2);
        for (let r = 0; r < n; r++) {
          const list = keys(t0 + r);
          const nKeys = this.nKeys;
          for (let g = g0; g < g1; g++) {
            const [k, v, stride] = widen ? [wideK, wideV, 4 * hd] : [kBase + g * hb, vBase + g * hb, rowBytes];
            for (let hh = 0; hh < qpg; hh++) {
              const o = 4 * (r * qDim + (g * nrep + hh) * hd);
              fn(this.qOff + o, k, v, stride, list, nKeys, this.scoresOff, this.outOff + o, scale);
            }
          }
        }
        const outs = f32.subarray(this.outOff >> 2, (this.outOff >> 2) + n * qDim);
        if (qpg === nrep && !widen) att.set(outs, t0 * qDim);
        else {
          for (let r = 0; r < n; r++) {
            for (let g = g0; g < g1; g++) {
              const o = r * qDim + g * nrep * hd;
              att.set(outs.subarray(o, o + qpg * hd), (t0 + r) * qDim + g * nrep * hd);
            }
          }
        }
      }
    }
  }
}
