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
import { F32, I32, uleb, V128, vec } from '../../core/util/wasm-asm.js';
import { expLanes } from './activation.js';
import { kernelModuleBytes } from './kernel-module.js';
import { kernelModule } from './kernel-store.js';
import {
  block, br, brIf, f32c, f32Load, f32Max, fAdd, fDiv, fExtract, fMax, fMul, fShuffle, fSplat, fSub, get, i32Add, i32c, i32GeS,
  i32Load, i32LtS, i32Mul, i32Shl, i32Sub, iConst, iLtS, iSplat, loop, select, set, vBitselect, vload, vstore, vZero,
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

function moduleBytes(hd: number): Uint8Array<ArrayBuffer> {
  return kernelModuleBytes([{ name: 'attend', params: [...new Array(8).fill(I32), F32], body: attendBody(hd) }]);
}

/** The compiled module for head size hd (a multiple of 4, at most 256), or null without WebAssembly SIMD. */
function attentionModule(hd: number): WebAssembly.Module | null {
  return hd % 4 === 0 && hd <= 256 ? kernelModule(`attention-hd${hd}`, () => moduleBytes(hd)) : null;
}

type AttendFn = (q: number, k: number, v: number, stride: number, keys: number, n: number, scores: number, out: number, scale: number) => void;

const PAGE = 65536;
/** Query rows staged per kernel round (the scratch for q and out holds this many tokens). */
const ROWS = 16;

/**
 * One KV cache's memory: per layer a K and a V region of `capacity` rows of kvDim floats, and the
 * kernel's scratch (query and output rows, scores, the slot lists). Grows by relayout (the views of
 * the old buffer are replaced: take them from `k` / `v` after `reserve`).
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
  capacity = 0;
  k: Float32Array[] = [];
  v: Float32Array[] = [];

  private constructor(
    mod: WebAssembly.Module,
    readonly numLayers: number,
    readonly kvDim: number,
    readonly qDim: number,
    readonly headDim: number,
  ) {
    this.memory = new WebAssembly.Memory({ initial: 1 });
    this.attendFn = new WebAssembly.Instance(mod, { env: { memory: this.memory } }).exports.attend as AttendFn;
    this.relayout(0, 0);
  }

  /** null when WebAssembly SIMD is missing or the head size does not suit the kernel. */
  static create(numLayers: number, kvDim: number, qDim: number, headDim: number): KvMemory | null {
    const mod = attentionModule(headDim);
    if (!mod) return null;
    try {
      return new KvMemory(mod, numLayers, kvDim, qDim, headDim);
    } catch {
      return null;
    }
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
    this.qOff = take(ROWS * this.qDim * 4);
    this.outOff = take(ROWS * this.qDim * 4);
    this.scoresOff = take(pad);
    this.runOff = take(pad);
    this.listOff = take(pad);
    const layerOff = Array.from({ length: 2 * this.numLayers }, () => take(cap * this.kvDim * 4));
    const need = at + 64;
    if (need > this.memory.buffer.byteLength) this.memory.grow(Math.ceil((need - this.memory.buffer.byteLength) / PAGE));
    this.f32 = new Float32Array(this.memory.buffer);
    this.i32 = new Int32Array(this.memory.buffer);
    // Regions only move up: copy the last first (copyWithin is a memmove).
    const rows = keep * this.kvDim;
    for (let i = old.length - 1; i >= 0 && rows > 0; i--) this.f32.copyWithin(layerOff[i] >> 2, old[i] >> 2, (old[i] >> 2) + rows);
    this.layerOff = layerOff;
    this.capacity = cap;
    for (let j = 0; j < cap; j++) this.i32[(this.runOff >> 2) + j] = j;
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
    this.rows(layer, q, att, T, G, qpg, nrep, scale, (r) => {
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
    this.rows(layer, q, att, T, G, qpg, nrep, scale, (r) => {
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

  /** Rows of q staged ROWS at a time; `keys(r)` gives the byte address of row r's slot list and sets nKeys. */
  private rows(layer: number, q: Float32Array, att: Float32Array, T: number, G: number, qpg: number, nrep: number, scale: number, keys: (t: number) => number): void {
    const { qDim, kvDim, headDim: hd } = this;
    const f32 = this.f32;
    const kBase = this.layerOff[2 * layer];
    const vBase = this.layerOff[2 * layer + 1];
    const fn = this.attendFn;
    for (let t0 = 0; t0 < T; t0 += ROWS) {
      const n = Math.min(ROWS, T - t0);
      f32.set(q.subarray(t0 * qDim, (t0 + n) * qDim), this.qOff >> 2);
      for (let r = 0; r < n; r++) {
        const list = keys(t0 + r);
        const nKeys = this.nKeys;
        for (let g = 0; g < G; g++) {
          for (let hh = 0; hh < qpg; hh++) {
            const o = 4 * (r * qDim + (g * nrep + hh) * hd);
            fn(this.qOff + o, kBase + 4 * g * hd, vBase + 4 * g * hd, 4 * kvDim, list, nKeys, this.scoresOff, this.outOff + o, scale);
          }
        }
      }
      const outs = f32.subarray(this.outOff >> 2, (this.outOff >> 2) + n * qDim);
      if (qpg === nrep) att.set(outs, t0 * qDim);
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
}
