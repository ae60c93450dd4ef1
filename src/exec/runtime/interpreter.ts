/**
 * The TS runtime's executor of the model IR (src/core/ir): the graph is compiled once into a list of
 * steps, closures over their weights and value buffers (reused from call to call), then run per
 * forward pass. Coarse ops keep it fast: linear runs the dequantizing matmul kernels, attention
 * reads the KV cache in place, moe dispatches each token to its top-k experts, and a silu feeding
 * one mul runs fused.
 *
 * Elastic widths are a feature of the interpreter: ops whose axes the IR marks elastic compute only
 * the units a level keeps (prefixes of KV groups, of query heads inside each group, of an MLP's
 * neurons); the weights are the full ones, read in place.
 * Browser-safe: no Node imports.
 */
import { biasOf } from '../../core/arch/names.js';
import type { ArchSpec } from '../../core/arch/spec.js';
import { LlmcError } from '../../core/errors.js';
import { IO } from '../../core/ir/build.js';
import type { AttentionMask, ElasticAxis, ModelGraph, MoeMlp, Op, V } from '../../core/ir/ir.js';
import { firstVisible, type MaskKind } from '../../core/ir/mask.js';
import { localRopeSpec, ropeRows, ropeTables } from '../../core/ir/rope.js';
import { opInputs } from '../../core/ir/values.js';
import { checkWidths, keptExtent, keptHeads, keptNeurons, type Extent, type LayerWidth } from '../../core/ir/width.js';
import { dequantRow, matmul, matmulGroup, matmulGroupNormed, matmulResidual, matmulSiluMul, type GroupOutput, type Weight } from './kernels.js';
import type { GroupRope } from './wasm.js';
import { addLowRank, type LevelAdapters } from './lowrank.js';
import type { ExpertStore } from './offload.js';
import { KvMemory, type TreeAttention } from './attention.js';
import { KvPlane, kvTypeProblem } from './kv-store.js';
import type { KvType } from '../../core/pipeline/target.js';

export type { TreeAttention };
import { RopeCache } from './rope-cache.js';
import { MAX_GROUP, type MatmulPool } from './pool.js';
import { SiluMul } from './activation.js';

export type { LayerWidth };

/** The attention masks this interpreter applies (every kind of the IR). */
export const RUNTIME_MASKS: ReadonlySet<MaskKind> = new Set(['causal', 'sliding', 'chunk', 'tree']);

/** Tensor lookup the interpreter binds weights from (the loader provides it). */
export interface WeightTable {
  weight(name: string): Weight;
  vector(name: string): Float32Array;
  has(name: string): boolean;
  /** Routed experts kept in the file and read on demand (./offload.ts); forward passes are then async (runAsync). */
  experts?: ExpertStore;
  /** Every kernel in JavaScript (the weights were loaded with `wasm: false`): attention too. */
  jsOnly?: boolean;
  /**
   * The executor's own kernel for a linear (the qnn simulation's integer pipeline), or undefined for
   * the interpreter's matmul over `weight(op.weight)`. A table with this hook runs linears one by one.
   */
  linearKernel?(op: Extract<Op, { op: 'linear' }>): LinearKernel | undefined;
}

/** y[n, outFeatures] = linear(x[n, inFeatures]), bias included. */
export type LinearKernel = (x: Float32Array, n: number, y: Float32Array) => void;

/**
 * How the interpreter rounds. 'ort': as onnxruntime's CPU kernels run the ONNX graphs of
 * src/exec/onnx (each float32 op rounded on its own: RMSNorm's Pow/ReduceMean/Sqrt/Div, RoPE's
 * Mul/Add, SiLU as Sigmoid·x, attention's scores in float64 then rounded, normalized weights rounded),
 * so an executor can reproduce onnxruntime bit for bit (the qnn simulation); no SIMD and no fusion.
 */
export interface InterpreterOptions {
  rounding?: 'ort';
  /** Values the graph reads that no op writes, fed per call (`RunOptions.feeds`): name and channels. */
  inputs?: readonly { name: V; channels: number }[];
}

/** Adapter sets by identity (a level's adapters are one object per level). */
const adapterIds = new WeakMap<object, number>();
let nextAdapterId = 1;

/** Each widths array's key, made once: levelKey runs on every decode step. */
const widthKeys = new WeakMap<readonly LayerWidth[], string>();

/** What a KV cache's contents depend on beyond the weights: each layer's widths and the adapter set. */
function levelKey(s: ArchSpec, widths: readonly LayerWidth[] | undefined, adapters: object | undefined): string {
  const R = s.numHeads / s.numKvHeads;
  const ffn = s.moe ? s.moe.expertIntermediateSize : s.intermediateSize;
  const full = (x: LayerWidth) =>
    x.kvGroups === s.numKvHeads && (x.qHeadsPerGroup ?? R) === R && (x.ffn ?? ffn) >= ffn && !x.expertFfn && x.denseFfn === undefined && x.sharedFfn === undefined;
  let w = !widths ? 'full' : widthKeys.get(widths);
  if (w === undefined) widthKeys.set(widths!, (w = widths!.every(full) ? 'full' : JSON.stringify(widths)));
  if (!adapters) return w;
  if (!adapterIds.has(adapters)) adapterIds.set(adapters, nextAdapterId++);
  return `${w}+adapters#${adapterIds.get(adapters)}`;
}

const describeKey = (k: string) => `${k.startsWith('full') ? 'full widths' : 'a narrower level'}${k.includes('+adapters') ? ' with recovery adapters' : ''}`;

/**
 * Per-layer keys and values of the positions seen so far. Make one with `model.newCache(type)`.
 * 'f32' (the default) keeps float32 rows in `k` / `v`; 'f16' and 'q8_0' keep them compact in `packed`
 * (in the attention kernel's memory, which widens one KV head at a time into a float32 scratch;
 * without that kernel, plain arrays that `expand` widens a layer of for the JS loops).
 */
export class KvCache {
  length = 0;
  capacity = 0;
  /**
   * The widths and adapters the cached keys and values were computed at (an elastic level): another
   * level's keys differ (its layers see other hidden states), so a call at another level is refused.
   */
  filledAt: string | undefined;
  /** f32: per layer; compact types: none (see `packed`). */
  k: Float32Array[];
  v: Float32Array[];
  /** Compact types: per layer its K and V planes; null for f32. */
  readonly packed: { k: KvPlane; v: KvPlane }[] | null;
  /** Compact types read by the JS loops (soft-capped attention, no kernel): one layer widened to float32. */
  private wide: { k: Float32Array; v: Float32Array } | null = null;
  constructor(
    readonly numLayers: number,
    readonly kvDim: number,
    /** The keys and values in the attention kernel's WebAssembly memory (kept as `type`); null: plain arrays, attention in JS. */
    readonly memory: KvMemory | null = null,
    readonly type: KvType = 'f32',
  ) {
    if (memory && memory.type !== type) throw new LlmcError(`internal: a ${type} KV cache over a ${memory.type} kernel memory`);
    this.packed = type === 'f32' ? null : Array.from({ length: numLayers }, () => ({ k: new KvPlane(type, kvDim), v: new KvPlane(type, kvDim) }));
    const arrays = this.packed ? 0 : numLayers;
    this.k = Array.from({ length: arrays }, () => new Float32Array(0));
    this.v = Array.from({ length: arrays }, () => new Float32Array(0));
  }

  reserve(n: number): void {
    if (n <= this.capacity) return;
    const cap = Math.max(n, this.capacity * 2, 16);
    const keep = this.length;
    if (this.memory) {
      this.memory.relayout(cap, keep);
      if (this.packed) {
        this.packed.forEach((p, l) => {
          const { k, v } = this.memory!.bytesOf(l);
          p.k.bytes = k;
          p.v.bytes = v;
        });
      } else {
        this.k = this.memory.k;
        this.v = this.memory.v;
      }
    } else if (this.packed) {
      for (const p of this.packed) (p.k.grow(cap, keep), p.v.grow(cap, keep));
    } else {
      for (let l = 0; l < this.k.length; l++) {
        const k = new Float32Array(cap * this.kvDim);
        const v = new Float32Array(cap * this.kvDim);
        k.set(this.k[l].subarray(0, keep * this.kvDim));
        v.set(this.v[l].subarray(0, keep * this.kvDim));
        this.k[l] = k;
        this.v[l] = v;
      }
    }
    this.capacity = cap;
  }

  /**
   * Rows t < rows of k and v ([rows, kvDim] from offset 0), their first `width` values, into slots
   * slot0 + t of `layer`.
   */
  store(layer: number, slot0: number, k: Float32Array, v: Float32Array, rows: number, width = this.kvDim): void {
    const D = this.kvDim;
    if (this.packed) {
      const { k: pk, v: pv } = this.packed[layer];
      for (let t = 0; t < rows; t++) (pk.put(slot0 + t, k, t * D, width), pv.put(slot0 + t, v, t * D, width));
      return;
    }
    const kc = this.k[layer];
    const vc = this.v[layer];
    if (width === D) {
      kc.set(k.subarray(0, rows * D), slot0 * D);
      vc.set(v.subarray(0, rows * D), slot0 * D);
      return;
    }
    for (let t = 0; t < rows; t++) {
      kc.set(k.subarray(t * D, t * D + width), (slot0 + t) * D);
      vc.set(v.subarray(t * D, t * D + width), (slot0 + t) * D);
    }
  }

  /**
   * The float32 rows [0, n) of `layer` for the JS attention loops: f32 the cache's own; compact types
   * widened into a one-layer scratch (made on first use: the kernel reads compact rows in place).
   */
  expand(layer: number, n: number): { k: Float32Array; v: Float32Array } {
    if (!this.packed) return { k: this.k[layer], v: this.v[layer] };
    const size = this.capacity * this.kvDim;
    if (!this.wide || this.wide.k.length < size) this.wide = { k: new Float32Array(size), v: new Float32Array(size) };
    this.packed[layer].k.expand(n, this.wide.k);
    this.packed[layer].v.expand(n, this.wide.v);
    return this.wide;
  }

  /** Bytes the keys and values of `capacity` positions take (compact types: their planes and the float32 scratch of one head, or of one layer where a JS loop made it). */
  get bytes(): number {
    if (!this.packed) return 2 * this.k.length * this.capacity * this.kvDim * 4;
    const scratch = (this.wide ? 8 * this.wide.k.length : 0) + (this.memory?.scratchBytes ?? 0);
    return this.packed.reduce((s, p) => s + p.k.bytes.length + p.v.bytes.length, scratch);
  }

  /**
   * KV compaction after a speculative step: slots `slots` (ascending, ≥ from) move to from, from+1, …
   * and everything after them is dropped.
   */
  keep(from: number, slots: readonly number[]): void {
    for (let l = 0; l < this.numLayers; l++) {
      slots.forEach((s, i) => {
        if (s === from + i) return;
        if (this.packed) {
          this.packed[l].k.move(s, from + i);
          this.packed[l].v.move(s, from + i);
          return;
        }
        this.k[l].copyWithin((from + i) * this.kvDim, s * this.kvDim, (s + 1) * this.kvDim);
        this.v[l].copyWithin((from + i) * this.kvDim, s * this.kvDim, (s + 1) * this.kvDim);
      });
    }
    this.length = from + slots.length;
  }
}

/** Options of one forward call beyond the causal default. */
export interface RunOptions {
  tree?: TreeAttention;
  /**
   * Compute each token's row with the one-token kernels, so its values do not depend on how many
   * tokens share the call (the four-token kernels sum in another order). Speculative verification
   * uses it to reproduce plain decoding bit for bit.
   */
  rowwise?: boolean;
  /** An elastic level's low-rank adapters (by weight name), added to its linears' outputs. */
  adapters?: LevelAdapters;
  /**
   * The cache slot of the first new token (default: the cache's length). Chunked prefill runs chunk i
   * at pos0 = i·c while the chunks before it may still be running (see `stage`).
   */
  pos0?: number;
  /**
   * Write the logits into this array and return it (a subarray when it is longer) instead of a new
   * array: a decode loop that passes one buffer allocates no ArrayBuffer per token (in Chromium each
   * such allocation costs ~20 µs and page faults; docs/lab/speed-history.md, "Chromium vs Node").
   */
  into?: Float32Array;
  /** Values of `InterpreterOptions.inputs`, [T, channels] each. */
  feeds?: ReadonlyMap<V, Float32Array>;
  /** The rope row (position) of each new token (default pos0 + t). */
  positionIds?: Int32Array;
  /** Per cache slot (0..pos0+T): 0 where the key is padding, masked out of every query ('ort' rounding only). */
  keyMask?: ArrayLike<number>;
}

/** A forward call run op range by op range (`Interpreter.stage`). */
export interface StagedCall {
  /** Run graph.ops[from, to): the ranges of one call must come in order and cover every op once. */
  runOps(from: number, to: number): void;
  /** A value's rows computed so far ([rows, channels] row-major, a view of the interpreter's buffer). */
  value(v: V): Float32Array;
  /** The logits of the call's positions once every op ran. */
  logits(): Float32Array;
}

/** What one forward call runs over. */
interface Frame {
  /** New tokens. */
  T: number;
  /** Positions already in the cache. */
  pos0: number;
  /** Rows whose logits are wanted (indices into the T new tokens). */
  positions: number[];
  ids: ArrayLike<number>;
  cache: KvCache;
  cos: Float32Array;
  sin: Float32Array;
  /** The sliding layers' own tables (spec.localRope), rows as cos/sin's; null without. */
  local: { cos: Float32Array; sin: Float32Array } | null;
  /** Row of cos/sin for new token t: ropeRow[t], or ropeBase + t when ropeRow is null. */
  ropeBase: number;
  ropeRow: Int32Array | null;
  widths: LayerWidth[] | undefined;
  /** A level's low-rank adapters (by weight name), added to its linears' outputs. */
  adapters: LevelAdapters | undefined;
  tree?: TreeAttention;
  rowwise?: boolean;
  keyMask?: ArrayLike<number>;
  /** Run range by range (`stage`): the caller may read any value between ranges. */
  staged?: boolean;
}

/** A step returns a promise only where it waits for I/O (offloaded experts). */
type Step = (f: Frame) => void | Promise<void>;

/**
 * A residual add whose one operand is a linear's output that only it reads (o_proj's, down_proj's):
 * at one token the linear's step computes out = W·x + res itself (in its matmul job) and marks its
 * frame `done`; the add's step then skips.
 */
interface ResidualAdd {
  res: Buffer2D;
  out: Buffer2D;
  done: Frame | null;
  /** The residual has every new token's rows, the add's output the logit positions' alone: fused only in frames of one token. */
  oneToken: boolean;
}

/** A frame whose linears may take a fused residual add: one token at full width, none of the frame kinds that run ops one by one. */
const residualFrame = (f: Frame, n: number) => n === 1 && !f.widths && !f.adapters && !f.rowwise && !f.staged;

/** A value's buffer: rows × channels, grown on demand and reused across calls. */
class Buffer2D {
  data = new Float32Array(0);
  constructor(readonly channels: number) {}
  /** The first `rows` rows, (re)allocated when too small. */
  rows(rows: number): Float32Array {
    const n = rows * this.channels;
    if (this.data.length < n) this.data = new Float32Array(n);
    return this.data;
  }
}

export class Interpreter {
  private readonly steps: Step[] = [];
  private readonly buffers = new Map<V, Buffer2D>();
  /** Rows each value has in the current call (T, or the gathered positions' count). */
  private readonly rowsOf = new Map<V, 'T' | 'N'>();
  private readonly nrep: number;
  /** The op that writes each value (rope reads which heads its input's producer kept). */
  private readonly producer = new Map<V, Op>();
  /** The step that runs each op (a fused silu·mul pair shares one). */
  private readonly stepOf: number[] = [];
  private readonly rope: RopeCache;
  /** The sliding layers' tables (gemma3's local base), or null. */
  private readonly localRope: RopeCache | null;
  /** The SIMD silu·mul, shared by every MLP (null: the JS loop). */
  private readonly simdSilu: SiluMul | null;
  private readonly ort: boolean;

  constructor(
    readonly spec: ArchSpec,
    readonly graph: Pick<ModelGraph, 'ops'>,
    private readonly table: WeightTable,
    opts: InterpreterOptions = {},
  ) {
    this.nrep = spec.numHeads / spec.numKvHeads;
    this.rope = new RopeCache(spec);
    const local = localRopeSpec(spec);
    this.localRope = local ? new RopeCache(local) : null;
    this.ort = opts.rounding === 'ort';
    this.simdSilu = table.jsOnly || this.ort ? null : SiluMul.create();
    for (const i of opts.inputs ?? []) this.define(i.name, i.channels);
    const uses = new Map<V, number>();
    for (const op of graph.ops) for (const v of opInputs(op)) uses.set(v, (uses.get(v) ?? 0) + 1);
    const ops = graph.ops;
    for (const op of ops) if ('out' in op) this.producer.set(op.out, op);
    const atPositions = positionRows(ops);
    const fusedDown: { silu: number; down: number; operands: [Buffer2D, Buffer2D] }[] = [];
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i];
      const next = ops[i + 1];
      // silu(g) read only by the next op, a mul with u: one fused loop (and its rounding).
      this.stepOf[i] = this.steps.length;
      if (!this.ort && op.op === 'silu' && next?.op === 'mul' && next.a === op.out && uses.get(op.out) === 1) {
        this.stepOf[i + 1] = this.steps.length;
        let operands: [Buffer2D, Buffer2D] | null = null;
        this.steps.push(this.gathering(atPositions.has(next.out) ? [op.x, next.b] : [], () => {
          operands = [this.buffer(op.x), this.buffer(next.b)];
          return this.siluMul(op.x, next.b, next.out);
        }));
        const down = ops[i + 2];
        if (down?.op === 'linear' && down.x === next.out && uses.get(next.out) === 1 && (!atPositions.has(next.out) || this.onlyPositionRows(op.x, next.b))) fusedDown.push({ silu: this.steps.length - 1, down: i + 2, operands: operands! });
        i++;
        continue;
      }
      this.steps.push(this.gathering('out' in op && atPositions.has(op.out) ? rowInputs(op) : [], () => this.compile(op)));
    }
    const grouped = this.groupLinears(ops, atPositions, uses);
    const residuals = this.residualAdds(ops, uses, atPositions, grouped);
    for (const d of fusedDown) this.fuseSiluIntoDown(ops[d.down] as Extract<Op, { op: 'linear' }>, d.silu, this.stepOf[d.down], d.operands, residuals.get(d.down) ?? null);
    for (const [at, r] of residuals) if (!fusedDown.some((d) => d.down === at)) this.fuseResidualIntoLinear(ops[at] as Extract<Op, { op: 'linear' }>, this.stepOf[at], r);
    ops.forEach((op, at) => {
      if (op.op === 'linear' && !grouped.has(at) && !residuals.has(at) && !fusedDown.some((d) => d.down === at)) this.fuseNormIntoLinear(ops, at, uses, atPositions);
    });
  }

  /** Whether every value of `vs` holds the logit positions' rows alone (a step reading only them gathers nothing first). */
  private onlyPositionRows(...vs: V[]): boolean {
    return vs.every((v) => this.rowsOf.get(v) === 'N');
  }

  /**
   * The residual adds that a linear's matmul job can do (kernels.ts's matmulResidual and
   * matmulSiluMul with a residual: on a worker pool each thread adds the residual to the rows it
   * computed, not the calling thread alone after the job), by the linear's op index: an add of a
   * linear's output that nothing else reads (no bias, not grouped, not at the logit positions) and
   * of a value of the same width computed before that linear. The add's step skips in a frame where
   * the linear did it.
   */
  private residualAdds(ops: readonly Op[], uses: Map<V, number>, atPositions: Set<V>, grouped: Set<number>): Map<number, ResidualAdd> {
    const out = new Map<number, ResidualAdd>();
    if (this.ort || this.table.jsOnly || this.table.linearKernel) return out;
    const index = new Map<Op, number>(ops.map((op, i) => [op, i]));
    ops.forEach((add, i) => {
      if (add.op !== 'add') return;
      const rows = this.rowsOf.get(add.out);
      for (const [y, r] of [[add.a, add.b], [add.b, add.a]]) {
        const lin = this.producer.get(y);
        if (lin?.op !== 'linear' || uses.get(y) !== 1 || (atPositions.has(y) && rows !== 'N') || (lin.bias && this.table.has(lin.bias))) continue;
        const at = index.get(lin)!;
        const from = this.producer.get(r);
        // at the logit positions' rows (the last layer) y and r hold those rows alone (its MLP), or r every
        // token's (its attention's residual): then only a frame of one token has r's row as the position's
        const oneToken = rows === 'N' && this.rowsOf.get(r) === 'T';
        if (grouped.has(at) || out.has(at) || (from && index.get(from)! > at) || (this.rowsOf.get(r) !== rows && !oneToken) || this.rowsOf.get(y) !== rows) continue;
        if (this.buffer(r).channels !== lin.outFeatures || this.buffer(add.out).channels !== lin.outFeatures || this.stepOf[at] === this.stepOf[i]) continue;
        const fused: ResidualAdd = { res: this.buffer(r), out: this.buffer(add.out), done: null, oneToken };
        const addStep = this.steps[this.stepOf[i]];
        this.steps[this.stepOf[i]] = (f) => {
          if (fused.done !== f) return addStep(f);
          fused.done = null; // holds no frame past the call
        };
        out.set(at, fused);
        return;
      }
    });
    return out;
  }

  /** o_proj's step with the residual add after it in its job (residualAdds), where the frame and the weight allow; else the linear alone. */
  private fuseResidualIntoLinear(op: Extract<Op, { op: 'linear' }>, at: number, r: ResidualAdd): void {
    if (!this.table.has(op.weight)) return;
    const W = this.table.weight(op.weight);
    if (W.rows !== op.outFeatures || W.cols !== op.inFeatures) return;
    const x = this.buffer(op.x);
    const count = this.counter(op.x);
    const own = this.steps[at];
    this.steps[at] = (f) => {
      if (!residualFrame(f, count(f)) || (r.oneToken && f.T !== 1) || !matmulResidual(W, x.data, r.res.data, r.out.rows(1))) return own(f);
      r.done = f;
    };
  }

  /**
   * silu(g)·u computed inside the down projection's matmul job (kernels.ts's matmulSiluMul: on a
   * worker pool the threads run it piece by piece with x's quantization, not the calling thread
   * alone): the silu·mul step only marks its frame, and the down step, seeing the mark, runs both.
   * Frames with elastic widths, adapters, rowwise kernels or staged ranges (whose caller may read the
   * activation between them), weights matmulSiluMul does not take, and the last layer's MLP (its
   * silu·mul step gathers the logit positions' rows first) run the two steps as before.
   */
  private fuseSiluIntoDown(down: Extract<Op, { op: 'linear' }>, siluAt: number, downAt: number, [G, U]: [Buffer2D, Buffer2D], residual: ResidualAdd | null): void {
    if (this.table.jsOnly || this.table.linearKernel || !this.table.has(down.weight)) return;
    const W = this.table.weight(down.weight);
    if (!W.arena || W.format === 'F32' || W.format === 'F16' || G.channels !== down.inFeatures || U.channels !== down.inFeatures || W.cols !== down.inFeatures) return;
    const bias = down.bias && this.table.has(down.bias) ? this.table.vector(down.bias) : null;
    const out = this.buffer(down.out);
    const count = this.counter(down.x);
    const siluStep = this.steps[siluAt];
    const downStep = this.steps[downAt];
    let pending: Frame | null = null;
    this.steps[siluAt] = (f) => {
      if (f.widths || f.adapters || f.rowwise || f.staged) return siluStep(f);
      pending = f;
    };
    this.steps[downAt] = (f) => {
      if (pending !== f) return downStep(f);
      pending = null;
      const n = count(f);
      // one token: y = W·(silu(g)·u) + the residual in one job (residualAdds), the add's step then skips
      if (residual && residualFrame(f, n) && (!residual.oneToken || f.T === 1) && matmulSiluMul(W, G.data, U.data, 1, down.inFeatures, residual.out.rows(1), down.outFeatures, bias, residual.res.data)) {
        residual.done = f;
        return;
      }
      if (n > 0 && !matmulSiluMul(W, G.data, U.data, n, down.inFeatures, out.rows(n), down.outFeatures, bias)) {
        siluStep(f);
        downStep(f);
      }
    };
  }

  /**
   * Consecutive linears that read the same x (q, k, v; gate, up) run as one matmulGroup: x is copied
   * and quantized once, and a worker pool wakes once for them all. The first one's step computes
   * every output; the others' steps skip in a frame where it did (staged ranges run in order, and
   * nothing between them writes x). A linear whose output is the logit positions' rows of an x with
   * every token's (the last layer's q) joins only in frames of one token at one position (decode);
   * elsewhere, as in a frame with elastic widths or low-rank adapters on any of them, they run one by
   * one.
   */
  private groupLinears(ops: readonly Op[], atPositions: Set<V>, uses: Map<V, number>): Set<number> {
    type Linear = Extract<Op, { op: 'linear' }>;
    const grouped = new Set<number>();
    // an output at the logit positions is read off x's rows without a gathering step only where x has those rows alone
    if (this.table.linearKernel) return grouped;
    const plain = (op: Op | undefined): op is Linear => op?.op === 'linear' && (!atPositions.has(op.out) || this.rowsOf.get(op.x) === 'N');
    // an output at the logit positions over every token's x (the last layer's q beside its k and v): its rows are x's in a frame of one token
    const oneRow = (op: Op | undefined): op is Linear => op?.op === 'linear' && atPositions.has(op.out) && this.rowsOf.get(op.x) === 'T';
    const member = (op: Op | undefined): op is Linear => plain(op) || oneRow(op);
    for (let i = 0; i < ops.length; ) {
      const first = ops[i];
      let j = i + 1;
      if (member(first)) while (j - i < MAX_GROUP && member(ops[j]) && (ops[j] as Linear).x === first.x && (ops[j] as Linear).inFeatures === first.inFeatures) j++;
      const members = ops.slice(i, j) as Linear[];
      const oneToken = members.some(oneRow);
      if (j - i < 2 || !member(first)) {
        i = j;
        continue;
      }
      for (let k = i; k < j; k++) grouped.add(k);
      const own = members.map((_, k) => this.steps[this.stepOf[i + k]]);
      const W = members.map((op) => this.table.weight(op.weight));
      const outs = members.map((op) => ({ buf: this.buffer(op.out), bias: op.bias && this.table.has(op.bias) ? this.table.vector(op.bias) : null, stride: op.outFeatures }));
      const x = this.buffer(first.x);
      const count = this.counter(first.x);
      let doneFor: Frame | null = null;
      const single = oneToken ? (f: Frame) => f.T === 1 && f.positions.length === 1 : null;
      const normed = this.fuseNormIntoGroup(ops, i, W, uses, atPositions, single);
      this.steps[this.stepOf[i]] = (f) => {
        doneFor = f;
        if ((f.widths && members.some((op) => op.elastic)) || (f.adapters && members.some((op) => f.adapters!.get(op.weight))) || (single && !single(f))) {
          for (const step of own) step(f);
          return;
        }
        const n = count(f);
        const ys = outs.map((o) => ({ y: o.buf.rows(n), yStride: o.stride, bias: o.bias }));
        if (normed?.(f, ys)) return;
        if (n > 0) matmulGroup(W, x.data, n, first.inFeatures, ys, first.inFeatures, f.rowwise);
      };
      const last = members.length - 1;
      for (let k = 1; k <= last; k++) {
        this.steps[this.stepOf[i + k]] = (f) => {
          if (doneFor !== f) return own[k](f);
          if (k === last) doneFor = null; // holds no frame (and its cache) past the call
        };
      }
      i = j;
    }
    return grouped;
  }

  /**
   * The RMSNorm right before a group of linears that alone read it (the norms before q/k/v and
   * gate/up) computed inside the group's matmul job (kernels.ts's matmulGroupNormed: on a worker
   * pool the threads scale and quantize x piece by piece, not the calling thread alone between two
   * jobs): the norm step only marks its frame, and the group's step, seeing the mark, runs both.
   * One token at full width only (decode); other frames, weights matmulGroupNormed does not take and
   * onnxruntime rounding run the two steps as before.
   */
  private fuseNormIntoGroup(ops: readonly Op[], first: number, W: Weight[], uses: Map<V, number>, atPositions: Set<V>, only: ((f: Frame) => boolean) | null = null): ((f: Frame, ys: GroupOutput[]) => boolean) | null {
    const norm = ops[first - 1];
    const lin = ops[first] as Extract<Op, { op: 'linear' }>;
    if (this.ort || this.table.jsOnly || norm?.op !== 'rmsnorm' || lin.x !== norm.out || uses.get(norm.out) !== W.length) return null;
    // a norm at the logit positions' rows qualifies where its input holds those rows alone (its step gathers nothing)
    if (atPositions.has(norm.out) && !this.onlyPositionRows(norm.x)) return null;
    if ((norm.heads ?? 1) !== 1 || norm.dim !== lin.inFeatures || this.producer.get(norm.x)?.op === 'linear') return null;
    const stored = this.table.vector(norm.weight);
    const w = norm.offset ? stored.map((v) => v + 1) : stored;
    const x = this.buffer(norm.x);
    const count = this.counter(norm.x);
    const normAt = this.stepOf[first - 1];
    const normStep = this.steps[normAt];
    let pending: Frame | null = null;
    this.steps[normAt] = (f) => {
      if (f.widths || f.adapters || f.rowwise || f.staged || count(f) !== 1 || (only && !only(f))) return normStep(f);
      pending = f;
    };
    const rope = this.fuseRopeIntoGroup(ops, first, W, uses, only !== null);
    return (f, ys) => {
      if (pending !== f) return false;
      pending = null;
      if (matmulGroupNormed(W, x.data, norm.dim, w, norm.eps, ys, rope?.at(f) ?? null)) {
        if (rope) rope.done = f;
        return true;
      }
      normStep(f);
      return false;
    };
  }

  /**
   * A linear that alone reads the RMSNorm right before it (the final norm and lm_head) run as a group
   * of one (fuseNormIntoGroup): the norm's scaling and x's quantization inside the linear's job.
   */
  private fuseNormIntoLinear(ops: readonly Op[], at: number, uses: Map<V, number>, atPositions: Set<V>): void {
    const lin = ops[at] as Extract<Op, { op: 'linear' }>;
    if (this.table.linearKernel || !this.table.has(lin.weight)) return;
    const W = this.table.weight(lin.weight);
    if (W.rows !== lin.outFeatures || W.cols !== lin.inFeatures) return;
    const normed = this.fuseNormIntoGroup(ops, at, [W], uses, atPositions);
    if (!normed) return;
    const out = this.buffer(lin.out);
    const count = this.counter(lin.x);
    const bias = lin.bias && this.table.has(lin.bias) ? this.table.vector(lin.bias) : null;
    const own = this.steps[this.stepOf[at]];
    this.steps[this.stepOf[at]] = (f) => {
      // the norm's step marked only frames without widths or adapters, one row
      if (!normed(f, [{ y: out.rows(count(f)), yStride: lin.outFeatures, bias }])) own(f);
    };
  }

  /**
   * The RoPE steps right after a normed group whose leading outputs (q, k) they rotate, in the
   * group's job (matmulGroupNormed's `rope`: cut at whole heads, each thread rotates the heads it
   * computed): their steps skip in a frame where the group did it. Only rope ops that alone read a
   * group output, over all its rows, with one table and head size, every output a whole number of heads.
   */
  private fuseRopeIntoGroup(ops: readonly Op[], first: number, W: Weight[], uses: Map<V, number>, oneToken = false): { at: (f: Frame) => GroupRope; done: Frame | null } | null {
    type Rope = Extract<Op, { op: 'rope' }>;
    const ropes: { at: number; op: Rope }[] = [];
    for (let k = 0; k < W.length; k++) {
      const lin = ops[first + k] as Extract<Op, { op: 'linear' }>;
      const out = lin.out;
      const at = ops.findIndex((o) => o.op === 'rope' && o.x === out);
      const op = ops[at] as Rope | undefined;
      // a bias is added after the job, so before a rope only on the steps' path (qwen2's q, k)
      if (!op || (lin.bias && this.table.has(lin.bias)) || uses.get(out) !== 1 || (this.rowsOf.get(out) !== 'T' && !oneToken) || op.heads * op.headDim !== W[k].rows || op.headDim % 2) break;
      if (ropes.length && (op.cos !== ropes[0].op.cos || op.headDim !== ropes[0].op.headDim)) break;
      ropes.push({ at, op });
    }
    if (!ropes.length) return null;
    const { headDim, cos } = ropes[0].op;
    if (W.some((w) => w.rows % headDim)) return null;
    const isLocal = cos === IO.cosLocal;
    const fused = {
      done: null as Frame | null,
      at: (f: Frame): GroupRope => {
        const t = isLocal ? f.local! : f;
        return { matrices: ropes.length, half: headDim / 2, cos: t.cos, sin: t.sin, row: f.ropeRow ? f.ropeRow[0] : f.ropeBase };
      },
    };
    ropes.forEach(({ at }, k) => {
      const step = this.steps[this.stepOf[at]];
      this.steps[this.stepOf[at]] = (f) => {
        if (fused.done !== f) return step(f);
        if (k === ropes.length - 1) fused.done = null; // holds no frame past the call
      };
    });
    return fused;
  }

  /**
   * `build`'s step reading the logit positions' rows of `inputs` (those computed for every new token
   * are gathered first, into buffers of their own; the op's output then has those rows only).
   */
  private gathering(inputs: V[], build: () => Step): Step {
    const swaps = inputs
      .filter((v) => this.buffers.has(v) && this.rowsOf.get(v) === 'T')
      .map((v) => ({ v, all: this.buffers.get(v)!, rows: new Buffer2D(this.buffers.get(v)!.channels) }));
    for (const w of swaps) {
      this.buffers.set(w.v, w.rows);
      this.rowsOf.set(w.v, 'N');
    }
    const step = build();
    for (const w of swaps) {
      this.buffers.set(w.v, w.all);
      this.rowsOf.set(w.v, 'T');
    }
    if (!swaps.length) return step;
    return (f) => {
      for (const { all, rows } of swaps) {
        const C = all.channels;
        const o = rows.rows(f.positions.length);
        f.positions.forEach((p, i) => o.set(all.data.subarray(p * C, (p + 1) * C), i * C));
      }
      return step(f);
    };
  }

  /** The weights' worker pool, if any (the first linear's arena): a KV cache runs its attention on it too. */
  private workerPool(): MatmulPool | null {
    const op = this.graph.ops.find((o) => o.op === 'linear');
    if (!op || op.op !== 'linear' || !this.table.has(op.weight)) return null;
    return this.table.weight(op.weight).arena?.workerPool ?? null;
  }

  /** An empty KV cache holding its keys and values as `type` (default float32). */
  newCache(type: KvType = 'f32'): KvCache {
    const s = this.spec;
    const kvDim = s.numKvHeads * s.headDim;
    const problem = kvTypeProblem(type, s.headDim);
    if (problem) throw new LlmcError(problem);
    return new KvCache(s.numLayers, kvDim, this.table.jsOnly ? null : KvMemory.create(s.numLayers, kvDim, s.numHeads * s.headDim, s.headDim, type, this.workerPool()), type);
  }

  /**
   * Logits at `positions` (indices into `ids`) for `ids` appended after what `cache` holds:
   * [positions.length, V] row-major. The cache is extended by ids.length positions.
   */
  run(ids: ArrayLike<number>, cache: KvCache, positions: number[], widths?: LayerWidth[], opts: RunOptions = {}): Float32Array {
    if (this.table.experts) throw new LlmcError('this model reads experts on demand (--expert-cache): run it with forwardAsync / generate');
    return this.finish(this.runSteps(ids, cache, positions, widths, opts), opts.into);
  }

  /**
   * Run the graph as `run` does and return copies of `values`' rows instead of logits: a graph that is
   * one piece of the model (./streamed.ts) hands its residual stream to the next piece this way.
   */
  runValues(ids: ArrayLike<number>, cache: KvCache, positions: number[], values: readonly V[], widths?: LayerWidth[], opts: RunOptions = {}): Float32Array[] {
    if (this.table.experts) throw new LlmcError('internal: a model piece runs with its experts resident');
    const frame = this.runSteps(ids, cache, positions, widths, opts);
    cache.length = frame.pos0 + frame.T;
    return values.map((v) => this.buffer(v).data.slice(0, this.rowCount(v, frame) * this.buffer(v).channels));
  }

  /** Every step of the graph on one call's frame (experts resident). */
  private runSteps(ids: ArrayLike<number>, cache: KvCache, positions: number[], widths: LayerWidth[] | undefined, opts: RunOptions): Frame {
    const frame = this.frame(ids, cache, positions, widths, opts);
    for (const step of this.steps) step(frame);
    return frame;
  }

  /** `run`, waiting where a step reads offloaded experts. */
  async runAsync(ids: ArrayLike<number>, cache: KvCache, positions: number[], widths?: LayerWidth[], opts: RunOptions = {}): Promise<Float32Array> {
    if (!this.table.experts) return this.run(ids, cache, positions, widths, opts);
    const frame = this.frame(ids, cache, positions, widths, opts);
    if (frame.pos0 === 0) this.table.experts.reset();
    for (const step of this.steps) {
      const pending = step(frame);
      if (pending) await pending;
    }
    return this.finish(frame);
  }

  /**
   * A call whose ops the caller runs range by range (chunked prefill interleaves the subgraphs of
   * several chunks, each chunk on its own interpreter over the same weights): the frame is set up at
   * `opts.pos0`; the cache must already have room for its positions (reserve it first: growing it
   * keeps only `length` slots). The cache's length is the caller's to set.
   */
  stage(ids: ArrayLike<number>, cache: KvCache, positions: number[], opts: RunOptions = {}): StagedCall {
    if (this.table.experts) throw new LlmcError('chunked prefill runs models whose experts are resident (not --expert-cache)');
    const capacity = cache.capacity;
    const frame = { ...this.frame(ids, cache, positions, undefined, opts), staged: true };
    if (cache.capacity !== capacity && (opts.pos0 ?? 0) > 0) throw new LlmcError('internal: reserve the KV cache before staging chunks');
    let next = 0;
    return {
      runOps: (from, to) => {
        if (from !== next || to < from || to > this.graph.ops.length) throw new LlmcError(`internal: staged ops [${from}, ${to}) after ${next}`);
        if (from === to) return;
        const first = this.stepOf[from];
        if (from > 0 && this.stepOf[from - 1] === first) throw new LlmcError(`internal: op ${from} is fused with the op before it`);
        for (let k = first; k <= this.stepOf[to - 1]; k++) this.steps[k](frame);
        next = to;
      },
      value: (v) => this.buffer(v).data.subarray(0, this.rowCount(v, frame) * this.buffer(v).channels),
      logits: () => {
        const logits = this.buffer(IO.logits);
        return logits.data.slice(0, frame.positions.length * logits.channels);
      },
    };
  }

  /** Check the call and set up its frame (the cache grows to hold the new positions). */
  private frame(ids: ArrayLike<number>, cache: KvCache, positions: number[], widths: LayerWidth[] | undefined, opts: RunOptions): Frame {
    const s = this.spec;
    const T = ids.length;
    if (T === 0) throw new LlmcError('forward: no input ids');
    if (widths) checkWidths(s, widths);
    for (let t = 0; t < T; t++) {
      const id = ids[t];
      if (!Number.isInteger(id) || id < 0 || id >= s.vocabSize) throw new LlmcError(`token id ${id} is outside the vocabulary (0..${s.vocabSize - 1})`);
    }
    for (const p of positions) if (!Number.isInteger(p) || p < 0 || p >= T) throw new LlmcError(`forward: logit row ${p} is outside the ${T} new tokens`);
    const pos0 = opts.pos0 ?? cache.length;
    const at = levelKey(s, widths, opts.adapters);
    if (pos0 > 0 && cache.filledAt !== undefined && cache.filledAt !== at) {
      throw new LlmcError(`the KV cache was filled at other elastic widths (${describeKey(cache.filledAt)}) than this call's (${describeKey(at)}): start a fresh cache (newCache) or prefill again at this level`);
    }
    if (pos0 === 0) cache.filledAt = at;
    cache.reserve(pos0 + T);
    if (opts.tree) checkTree(opts.tree, T, pos0);
    // The engine's own tables (src/core/ir/rope.ts): the same scaling rules.
    const tree = opts.tree;
    if (opts.keyMask && !this.ort) throw new LlmcError("internal: a key mask needs the interpreter's 'ort' rounding");
    for (const [v, data] of opts.feeds ?? []) this.buffer(v).rows(T).set(data);
    const base = { T, pos0, positions, ids, cache, widths, adapters: opts.adapters, tree, rowwise: opts.rowwise, keyMask: opts.keyMask };
    const rows = tree ? tree.positions : opts.positionIds;
    if (rows && rows.length !== T) throw new LlmcError(`forward: ${rows.length} position ids for ${T} new tokens`);
    const end = rows ? Math.max(...rows) + 1 : pos0 + T;
    const lr = this.localRope;
    if (this.rope.cover(end) && (!lr || lr.cover(end))) {
      return { ...base, cos: this.rope.cos, sin: this.rope.sin, local: lr && { cos: lr.cos, sin: lr.sin }, ropeBase: pos0, ropeRow: rows ?? null };
    }
    const tables = (sp: ArchSpec) => (rows ? ropeRows(sp, rows) : ropeTables(sp, pos0, T));
    const local = localRopeSpec(s);
    return { ...base, ...tables(s), local: local && tables(local), ropeBase: 0, ropeRow: null };
  }

  /** The cache now holds the call's positions; the logits asked for. */
  private finish(f: Frame, into?: Float32Array): Float32Array {
    f.cache.length = f.pos0 + f.T;
    const logits = this.buffer(IO.logits);
    const n = f.positions.length * logits.channels;
    if (!into) return logits.data.slice(0, n);
    if (into.length < n) throw new LlmcError(`forward: \`into\` holds ${into.length} floats; the logits need ${n}`);
    into.set(logits.data.subarray(0, n));
    return into.length === n ? into : into.subarray(0, n);
  }

  // ---- values ------------------------------------------------------------------------------------

  private buffer(v: V): Buffer2D {
    const b = this.buffers.get(v);
    if (!b) throw new LlmcError(`internal: interpreter reads "${v}" before it is written`);
    return b;
  }

  private define(v: V, channels: number, rows: 'T' | 'N' = 'T'): Buffer2D {
    const b = new Buffer2D(channels);
    this.buffers.set(v, b);
    this.rowsOf.set(v, rows);
    return b;
  }

  /** v's row count in a call, by v's rows as the op being compiled reads them (a step closes over it). */
  private counter(v: V): (f: Frame) => number {
    const atPositions = this.rowsOf.get(v) === 'N';
    return (f) => (atPositions ? f.positions.length : f.T);
  }

  private rowCount(v: V, f: Frame): number {
    return this.rowsOf.get(v) === 'N' ? f.positions.length : f.T;
  }

  // ---- elastic widths ----------------------------------------------------------------------------

  /** The kept extent of an elastic axis at this call's widths (core/ir/width.ts). */
  private extent(axis: ElasticAxis | undefined, full: number, f: Frame): Extent {
    return keptExtent(this.spec, axis, full, f.widths);
  }

  private neurons(slot: MoeMlp['slot'], w: LayerWidth): number | undefined {
    return keptNeurons(slot, w);
  }

  // ---- ops ---------------------------------------------------------------------------------------

  private compile(op: Op): Step {
    const s = this.spec;
    switch (op.op) {
      case 'embed': {
        const table = this.table.weight(op.table);
        const out = this.define(op.out, s.hiddenSize);
        return (f) => {
          const x = out.rows(f.T);
          for (let t = 0; t < f.T; t++) dequantRow(table, f.ids[t], x, t * out.channels);
        };
      }
      case 'rmsnorm': {
        const stored = this.table.vector(op.weight);
        const w = op.offset ? stored.map((v) => v + 1) : stored;
        const heads = op.heads ?? 1;
        const x = this.buffer(op.x);
        const out = this.define(op.out, op.dim * heads, this.rowsOf.get(op.x));
        const count = this.counter(op.x);
        const norm = this.ort ? rmsNormOrt : rmsNorm;
        // A norm over a whole projection (olmo2) at an elastic level: over the kept heads' channels only.
        const from = op.heads === undefined ? this.producer.get(op.x) : undefined;
        const axis = from?.op === 'linear' ? from.elastic?.rows : undefined;
        return (f) => {
          const n = count(f);
          const e = axis && f.widths ? this.extent(axis, op.dim, f) : null;
          if (e && e.count * e.len < op.dim) keptNorm(norm, x.data, w, out.rows(n), n, op.dim, e, op.eps);
          // Per-head norms: [n, heads·dim] is [n·heads, dim].
          else norm(x.data, w, out.rows(n), n * heads, op.dim, op.eps);
        };
      }
      case 'scale': {
        // onnxruntime multiplies by the float32 constant
        const by = this.ort ? Math.fround(op.by) : op.by;
        return this.unary(op.x, op.out, (v) => v * by);
      }
      case 'linear':
        return this.linear(op);
      case 'rope': {
        // In place: the roped value shares the unroped one's buffer (nothing else reads it). The
        // heads kept are the rows the producing linear kept.
        const x = this.buffer(op.x);
        const atPositions = this.rowsOf.get(op.x) === 'N';
        this.buffers.set(op.out, x);
        this.rowsOf.set(op.out, atPositions ? 'N' : 'T');
        const hd = op.headDim;
        const C = op.heads * hd;
        // Through a q/k norm to the projection.
        let from = this.producer.get(op.x);
        if (from?.op === 'rmsnorm') from = this.producer.get(from.x);
        const axis = from?.op === 'linear' ? from.elastic?.rows : undefined;
        const isLocal = op.cos === IO.cosLocal;
        const rot = this.ort ? ropeOrt : rope;
        return (f) => {
          const e = this.extent(axis, C, f);
          const n = atPositions ? f.positions.length : f.T;
          const { cos, sin } = isLocal ? f.local! : f;
          for (let r = 0; r < n; r++) {
            const t = atPositions ? f.positions[r] : r;
            for (let g = 0; g < e.count; g++) {
              for (let c = g * e.stride; c < g * e.stride + e.len; c += hd) rot(x.data, r * C + c, hd, cos, sin, f.ropeRow ? f.ropeRow[t] : f.ropeBase + t);
            }
          }
        };
      }
      case 'attention':
        return this.attention(op);
      case 'silu':
        // onnxruntime: Sigmoid, then Mul, each rounded to float32
        if (this.ort) return this.unary(op.x, op.out, (v) => Math.fround(v * Math.fround(1 / (1 + Math.exp(-v)))));
        return this.unary(op.x, op.out, (v) => v / (1 + Math.exp(-v)));
      case 'sigmoid':
        return this.unary(op.x, op.out, (v) => 1 / (1 + Math.exp(-v)));
      case 'gelu_tanh':
        return this.unary(op.x, op.out, this.ort ? geluTanhOrt : geluTanh);
      case 'softcap': {
        const cap = op.cap;
        // onnxruntime: Div, Tanh, Mul, each rounded to float32
        if (this.ort) {
          const c = Math.fround(cap);
          return this.unary(op.x, op.out, (v) => Math.fround(Math.fround(Math.tanh(Math.fround(v / c))) * c));
        }
        return this.unary(op.x, op.out, (v) => cap * Math.tanh(v / cap));
      }
      case 'mul':
      case 'add':
        return this.elementwise(op.op, op.a, op.b, op.out);
      case 'moe':
        return this.table.experts ? this.moeOffloaded(op, this.table.experts) : this.moe(op);
      case 'gatherPositions': {
        const x = this.buffer(op.x);
        if (this.rowsOf.get(op.x) === 'N') {
          // computed at the positions already (positionRows): the same rows
          this.buffers.set(op.out, x);
          this.rowsOf.set(op.out, 'N');
          return () => {};
        }
        const out = this.define(op.out, x.channels, 'N');
        return (f) => {
          const C = x.channels;
          const o = out.rows(f.positions.length);
          f.positions.forEach((p, i) => o.set(x.data.subarray(p * C, (p + 1) * C), i * C));
        };
      }
      case 'router':
      case 'column':
        throw new LlmcError(`internal: the TS runtime runs moe ops whole, not "${op.op}"`);
    }
  }

  /** y = x · Wᵀ (+ bias) over the kept rows (outputs) and columns (inputs) of the weight. */
  private linear(op: Extract<Op, { op: 'linear' }>): Step {
    const kernel = this.table.linearKernel?.(op);
    if (kernel) {
      const x = this.buffer(op.x);
      const out = this.define(op.out, op.outFeatures, this.rowsOf.get(op.x));
      const count = this.counter(op.x);
      return (f) => {
        const n = count(f);
        if (f.widths && op.elastic) throw new LlmcError(`${op.weight}: this executor's linears run at full width only`);
        kernel(x.data.subarray(0, n * op.inFeatures), n, out.rows(n).subarray(0, n * op.outFeatures));
      };
    }
    const W = this.table.weight(op.weight);
    const bias = op.bias && this.table.has(op.bias) ? this.table.vector(op.bias) : null;
    const x = this.buffer(op.x);
    const out = this.define(op.out, op.outFeatures, this.rowsOf.get(op.x));
    const rowsKind = this.rowsOf.get(op.x);
    const allRows = { count: 1, stride: op.outFeatures, len: op.outFeatures };
    const allCols = { count: 1, stride: op.inFeatures, len: op.inFeatures };
    return (f) => {
      const n = rowsKind === 'N' ? f.positions.length : f.T;
      const y = out.rows(n);
      if (n === 0) return;
      const rows = f.widths && op.elastic?.rows ? this.extent(op.elastic.rows, op.outFeatures, f) : allRows;
      const cols = f.widths && op.elastic?.cols ? this.extent(op.elastic.cols, op.inFeatures, f) : allCols;
      // Columns with gaps (some query heads of each group) are read over their whole span: the
      // dropped heads' inputs are zero (attention leaves them so).
      const nCols = cols.count * cols.stride;
      const rowwise = f.rowwise;
      if (rows.count === 1) matmul(W, x.data, n, op.inFeatures, y, op.outFeatures, { nRows: rows.len, nCols, bias, rowwise });
      else {
        for (let g = 0; g < rows.count; g++) {
          const r0 = g * rows.stride;
          matmul(W, x.data, n, op.inFeatures, y.subarray(r0), op.outFeatures, { rowStart: r0, nRows: rows.len, nCols, bias, rowwise });
        }
      }
      const lr = f.adapters?.get(op.weight);
      if (lr) addLowRank(lr, x.data, n, op.inFeatures, cols, y, op.outFeatures, rows, op.weight);
    };
  }

  /** fn applied to each element of x (silu, sigmoid: the MLP's fused silu·mul runs in WebAssembly elsewhere). */
  private unary(xName: V, outName: V, fn: (v: number) => number): Step {
    const x = this.buffer(xName);
    const out = this.define(outName, x.channels, this.rowsOf.get(xName));
    const count = this.counter(xName);
    return (f) => {
      const n = count(f) * x.channels;
      const o = out.rows(count(f));
      for (let i = 0; i < n; i++) o[i] = fn(x.data[i]);
    };
  }

  /** a ⊙ b with broadcasting of a one-channel operand over the other's channels. */
  private elementwise(kind: 'mul' | 'add', a: V, b: V, outName: V): Step {
    const A = this.buffer(a);
    const B = this.buffer(b);
    const C = Math.max(A.channels, B.channels);
    const out = this.define(outName, C, this.rowsOf.get(a));
    const count = this.counter(a);
    return (f) => {
      const rows = count(f);
      const o = out.rows(rows);
      const x = A.data;
      const y = B.data;
      if (A.channels === B.channels) {
        const n = rows * C;
        if (kind === 'add') for (let i = 0; i < n; i++) o[i] = x[i] + y[i];
        else for (let i = 0; i < n; i++) o[i] = x[i] * y[i];
        return;
      }
      for (let r = 0; r < rows; r++) {
        for (let c = 0; c < C; c++) {
          const xa = x[A.channels === 1 ? r : r * C + c];
          const yb = y[B.channels === 1 ? r : r * C + c];
          o[r * C + c] = kind === 'add' ? xa + yb : xa * yb;
        }
      }
    };
  }

  /** silu(g) · u in one loop, over the kept neurons (in WebAssembly SIMD unless every kernel is JS). */
  private siluMul(g: V, u: V, outName: V): Step {
    const G = this.buffer(g);
    const U = this.buffer(u);
    const out = this.define(outName, G.channels, this.rowsOf.get(g));
    const count = this.counter(g);
    return (f) => {
      const n = count(f) * G.channels;
      const o = out.rows(count(f));
      if (this.simdSilu) return this.simdSilu.run(G.data, U.data, o, n);
      const gd = G.data;
      const ud = U.data;
      for (let i = 0; i < n; i++) {
        const a = gd[i];
        o[i] = (a / (1 + Math.exp(-a))) * ud[i];
      }
    };
  }

  /** GQA attention over the KV cache, masked as the op says (a tree mask applies the call's tree, else its base). */
  private attention(op: Extract<Op, { op: 'attention' }>): Step {
    const hd = op.headDim;
    const nrep = op.heads / op.kvHeads;
    const qDim = op.heads * hd;
    const kvDim = op.kvHeads * hd;
    const Q = this.buffer(op.q);
    const K = this.buffer(op.k);
    const Vb = this.buffer(op.v);
    // Queries at the logit positions only (positionRows): row r is new token f.positions[r].
    const atPositions = this.rowsOf.get(op.q) === 'N';
    const out = this.define(op.out, qDim, atPositions ? 'N' : 'T');
    const scale = op.scale ?? 1 / Math.sqrt(hd);
    const mask = op.mask;
    // Soft-capped scores take the JS loops: the SIMD kernel has no tanh.
    const cap = op.softcap ?? 0;
    let scores = new Float32Array(0);
    return (f) => {
      if (f.tree && mask.kind !== 'tree') throw new LlmcError(`tree attention: layer ${op.layer}'s attention has a ${mask.kind} mask, not a tree (build the graph withTreeMasks)`);
      const T = f.T;
      const { groups: G, perGroup: qpg } = keptHeads(this.spec, f.widths?.[op.layer]);
      f.cache.store(op.layer, f.pos0, K.data, Vb.data, T, G * hd);
      const q = Q.data;
      const n = atPositions ? f.positions.length : T;
      const tokens = atPositions ? f.positions : null;
      const att = out.rows(n);
      // Dropped heads stay zero, so o_proj's column span ignores them.
      if (qpg !== nrep) att.fill(0, 0, n * qDim);
      const mem = f.cache.memory;
      if (mem && !cap) {
        if (f.tree) mem.attendTree(op.layer, q, att, n, f.tree, G, qpg, nrep, scale, mask, tokens);
        else mem.attendCausal(op.layer, q, att, n, f.pos0, G, qpg, nrep, scale, mask, tokens);
        return;
      }
      const { k: kc, v: vc } = f.cache.expand(op.layer, f.pos0 + T);
      if (this.ort) {
        if (f.tree || qpg !== nrep || G !== op.kvHeads) throw new LlmcError(`layer ${op.layer}: 'ort' rounding runs full-width causal attention only`);
        if (cap) throw new LlmcError(`layer ${op.layer}: 'ort' rounding has no soft-capped attention`);
        attendOrt(q, kc, vc, att, n, tokens, f.pos0, op.heads, nrep, hd, kvDim, Math.fround(scale), mask, f.keyMask);
        return;
      }
      if (scores.length < f.pos0 + T) scores = new Float32Array(f.pos0 + T);
      if (f.tree) attendTree(q, kc, vc, att, scores, f.tree, n, tokens, G, qpg, nrep, hd, qDim, kvDim, scale, mask, cap);
      else attend(q, kc, vc, att, scores, n, tokens, f.pos0, G, qpg, nrep, hd, qDim, kvDim, scale, mask, cap);
    };
  }

  /** Top-k routing and dispatch: each token runs only its selected experts (and the shared one). */
  private moe(op: Extract<Op, { op: 'moe' }>): Step {
    const D = op.hidden;
    const E = op.experts.length;
    const X = this.buffer(op.x);
    const router = this.table.weight(op.router);
    const logits = new Float32Array(E);
    const out = this.define(op.out, D, this.rowsOf.get(op.x));
    const count = this.counter(op.x);
    const bind = (m: MoeMlp) => ({
      m,
      gate: this.table.weight(m.gate),
      up: this.table.weight(m.up),
      down: this.table.weight(m.down),
      gateBias: m.bias ? this.table.vector(biasOf(m.gate)) : null,
      upBias: m.bias ? this.table.vector(biasOf(m.up)) : null,
      downBias: m.bias ? this.table.vector(biasOf(m.down)) : null,
    });
    const experts = op.experts.map(bind);
    const shared = op.shared ? { mlp: bind(op.shared.mlp), gate: this.table.weight(op.shared.gate) } : null;
    const eo = new Float32Array(D);
    const one = new Float32Array(1);
    const order = Array.from({ length: E }, (_, i) => i);
    const sel = new Int32Array(op.topK);
    const gates = new Float64Array(op.topK);
    return (f) => {
      const T = count(f);
      const w = f.widths?.[op.layer];
      const o = out.rows(T);
      o.fill(0, 0, T * D);
      for (let t = 0; t < T; t++) {
        const xt = X.data.subarray(t * D, (t + 1) * D);
        const ot = o.subarray(t * D, (t + 1) * D);
        matmul(router, xt, 1, D, logits, E);
        route(logits, op.topK, op.mode, order, sel, gates, 0);
        for (let k = 0; k < op.topK; k++) {
          const ex = experts[sel[k]];
          swiglu(ex, xt, D, eo, (w && this.neurons(ex.m.slot, w)) ?? ex.gate.rows);
          const g = gates[k];
          for (let i = 0; i < D; i++) ot[i] += g * eo[i];
        }
        if (shared) {
          matmul(shared.gate, xt, 1, D, one, 1);
          const g = 1 / (1 + Math.exp(-one[0]));
          swiglu(shared.mlp, xt, D, eo, (w && this.neurons('shared', w)) ?? shared.mlp.gate.rows);
          for (let i = 0; i < D; i++) ot[i] += g * eo[i];
        }
      }
    };
  }

  /**
   * The moe op with routed experts read on demand (ExpertStore): the same routing and the same sums
   * in the same order as `moe`, so the output is identical. Tokens are grouped by expert, each expert
   * made resident once (pinned while it computes); a one-token step acquires all of its experts,
   * then lets the store preload the next layer's likely ones, then computes (reads overlap compute).
   */
  private moeOffloaded(op: Extract<Op, { op: 'moe' }>, store: ExpertStore): Step {
    const D = op.hidden;
    const E = op.experts.length;
    const K = op.topK;
    const n = store.layerIndex(op.layer);
    const X = this.buffer(op.x);
    const router = this.table.weight(op.router);
    const out = this.define(op.out, D, this.rowsOf.get(op.x));
    const count = this.counter(op.x);
    const bias = (m: MoeMlp, w: 'gate' | 'up' | 'down') => (m.bias ? this.table.vector(biasOf(m[w])) : null);
    const biases = op.experts.map((m) => ({ gateBias: bias(m, 'gate'), upBias: bias(m, 'up'), downBias: bias(m, 'down') }));
    const sharedMlp = op.shared?.mlp;
    const shared = op.shared && sharedMlp
      ? {
          mlp: { gate: this.table.weight(sharedMlp.gate), up: this.table.weight(sharedMlp.up), down: this.table.weight(sharedMlp.down), gateBias: bias(sharedMlp, 'gate'), upBias: bias(sharedMlp, 'up'), downBias: bias(sharedMlp, 'down') },
          gate: this.table.weight(op.shared.gate),
        }
      : null;
    const logits = new Float32Array(E);
    const one = new Float32Array(1);
    const sharedOut = new Float32Array(D);
    const order = Array.from({ length: E }, (_, i) => i);
    let sel = new Int32Array(0);
    let gates = new Float64Array(0);
    let outs = new Float32Array(0);
    return async (f) => {
      const T = count(f);
      const w = f.widths?.[op.layer];
      if (sel.length < T * K) {
        sel = new Int32Array(T * K);
        gates = new Float64Array(T * K);
        outs = new Float32Array(T * K * D);
      }
      for (let t = 0; t < T; t++) {
        matmul(router, X.data.subarray(t * D, (t + 1) * D), 1, D, logits, E);
        route(logits, K, op.mode, order, sel, gates, t * K);
      }
      // Each needed expert once: a one-token step in expert order (as the trace simulator), holding all
      // of them at once; a prompt resident ones first, one expert at a time.
      const distinct = [...new Set(sel.subarray(0, T * K))];
      const needed = T === 1 ? distinct.sort((a, b) => a - b) : distinct.sort((a, b) => Number(store.resident(n, b)) - Number(store.resident(n, a)) || a - b);
      const run = (e: number, ex: { gate: Weight; up: Weight; down: Weight }) => {
        const m = { ...ex, ...biases[e] };
        const ffn = (w && this.neurons(op.experts[e].slot, w)) ?? ex.gate.rows;
        for (let i = 0; i < T * K; i++) if (sel[i] === e) swiglu(m, X.data.subarray(Math.floor(i / K) * D, (Math.floor(i / K) + 1) * D), D, outs.subarray(i * D, (i + 1) * D), ffn);
      };
      if (T === 1) {
        const held: { gate: Weight; up: Weight; down: Weight }[] = [];
        for (const e of needed) held.push(await store.acquire(n, e, true));
        store.routed(n, Array.from(sel.subarray(0, K)));
        needed.forEach((e, i) => run(e, held[i]));
        for (const e of needed) store.release(n, e);
      } else {
        for (const e of needed) {
          const ex = await store.acquire(n, e, false);
          run(e, ex);
          store.release(n, e);
        }
        store.routed(n, Array.from(sel.subarray((T - 1) * K, T * K)), false);
      }
      const o = out.rows(T);
      o.fill(0, 0, T * D);
      for (let t = 0; t < T; t++) {
        const xt = X.data.subarray(t * D, (t + 1) * D);
        const ot = o.subarray(t * D, (t + 1) * D);
        for (let k = 0; k < K; k++) {
          const g = gates[t * K + k];
          const eo = outs.subarray((t * K + k) * D, (t * K + k + 1) * D);
          for (let i = 0; i < D; i++) ot[i] += g * eo[i];
        }
        if (shared) {
          matmul(shared.gate, xt, 1, D, one, 1);
          const g = 1 / (1 + Math.exp(-one[0]));
          swiglu(shared.mlp, xt, D, sharedOut, (w && this.neurons('shared', w)) ?? shared.mlp.gate.rows);
          for (let i = 0; i < D; i++) ot[i] += g * sharedOut[i];
        }
      }
    };
  }
}

/** Ops whose output row r depends only on row r of their inputs (attention: of its queries). */
const ROWWISE = new Set<Op['op']>(['linear', 'rmsnorm', 'scale', 'gelu_tanh', 'softcap', 'rope', 'silu', 'sigmoid', 'mul', 'add', 'moe', 'attention']);

/**
 * The values of which only the logit positions' rows are ever read, so they are computed for those
 * rows alone: everything between the last gatherPositions and the ops that also feed other rows. In
 * the IR's decoder that is the last layer past its K/V projections (its queries, attention, o_proj,
 * residuals and MLP), and all of the head. Walks the ops backwards: a row-wise op's output qualifies
 * when every op reading it does and reads it row-wise (attention: as its queries; its keys and
 * values go to the cache for every token).
 */
export function positionRows(ops: readonly Op[]): Set<V> {
  const readers = new Map<V, Op[]>();
  for (const op of ops) for (const v of opInputs(op)) readers.set(v, [...(readers.get(v) ?? []), op]);
  const rows = new Set<V>();
  const readsRows = (op: Op, v: V) => op.op === 'gatherPositions' || (ROWWISE.has(op.op) && 'out' in op && rows.has(op.out) && (op.op !== 'attention' || v === op.q));
  for (let i = ops.length - 1; i >= 0; i--) {
    const op = ops[i];
    if (op.op === 'gatherPositions') rows.add(op.out);
    else if (ROWWISE.has(op.op) && 'out' in op) {
      // The logits are the positions' (the graph's output); other values nothing reads keep every row.
      const r = readers.get(op.out) ?? [];
      if (op.out === IO.logits || (r.length && r.every((c) => readsRows(c, op.out)))) rows.add(op.out);
    }
  }
  return rows;
}

/** The inputs an op computed at the logit positions reads at those rows (not attention's keys and values). */
function rowInputs(op: Op): V[] {
  if (op.op === 'gatherPositions') return [];
  if (op.op === 'attention') return [op.q];
  return opInputs(op);
}

/**
 * Top-k routing of one token from its router logits: softmax in float64, the k most probable experts
 * (lower index first on ties, as torch.topk on CPU) into sel[at..at+k) and their routing weights
 * (renormalized over the k in 'softmax-topk-renorm') into gates[at..at+k).
 */
function route(logits: Float32Array, K: number, mode: 'softmax-topk-renorm' | 'softmax-topk', order: number[], sel: Int32Array, gates: Float64Array, at: number): void {
  const E = logits.length;
  let max = -Infinity;
  for (let e = 0; e < E; e++) max = Math.max(max, logits[e]);
  let sum = 0;
  const p = new Float64Array(E);
  for (let e = 0; e < E; e++) sum += p[e] = Math.exp(logits[e] - max);
  for (let e = 0; e < E; e++) p[e] /= sum;
  order.sort((a, b) => p[b] - p[a] || a - b);
  let norm = 1;
  if (mode === 'softmax-topk-renorm') {
    norm = 0;
    for (let k = 0; k < K; k++) norm += p[order[k]];
  }
  for (let k = 0; k < K; k++) {
    sel[at + k] = order[k];
    gates[at + k] = p[order[k]] / norm;
  }
}

/**
 * Masked attention of T new queries (positions pos0..pos0+T-1) over the cached keys and values,
 * for the first qpg query heads of the first G KV groups; `att` rows are [qDim].
 * A plain function of plain arguments: the hot loops see locals, not closure slots.
 */
function attend(
  q: Float32Array, kc: Float32Array, vc: Float32Array, att: Float32Array, scores: Float32Array,
  T: number, tokens: ArrayLike<number> | null, pos0: number, G: number, qpg: number, nrep: number, hd: number, qDim: number, kvDim: number,
  scale: number, mask: AttentionMask, cap = 0,
): void {
  for (let t = 0; t < T; t++) {
    const p = pos0 + (tokens ? tokens[t] : t);
    const pStart = Math.max(0, firstVisible(mask, p));
    for (let g = 0; g < G; g++) {
      for (let hh = 0; hh < qpg; hh++) {
        const h = g * nrep + hh;
        const qo = t * qDim + h * hd;
        let max = -Infinity;
        for (let j = pStart; j <= p; j++) {
          const ko = j * kvDim + g * hd;
          let d = 0;
          for (let i = 0; i < hd; i++) d += q[qo + i] * kc[ko + i];
          d *= scale;
          if (cap) d = cap * Math.tanh(d / cap);
          scores[j] = d;
          if (d > max) max = d;
        }
        let sum = 0;
        for (let j = pStart; j <= p; j++) sum += scores[j] = Math.exp(scores[j] - max);
        const ao = t * qDim + h * hd;
        for (let i = 0; i < hd; i++) att[ao + i] = 0;
        for (let j = pStart; j <= p; j++) {
          const pj = scores[j] / sum;
          const vo = j * kvDim + g * hd;
          for (let i = 0; i < hd; i++) att[ao + i] += pj * vc[vo + i];
        }
      }
    }
  }
}

/**
 * `attend` rounded as onnxruntime runs the ONNX attention (src/exec/onnx): each score's dot product in
 * float64, rounded to float32, times the float32 scale, rounded; softmax in float64 with each
 * normalized weight rounded to float32; the weighted sum of values in float64. Keys whose `keyMask`
 * slot is 0 (padding) are masked out.
 */
function attendOrt(
  q: Float32Array, kc: Float32Array, vc: Float32Array, att: Float32Array,
  T: number, tokens: ArrayLike<number> | null, pos0: number, H: number, nrep: number, hd: number, kvDim: number,
  scale: number, mask: AttentionMask, keyMask: ArrayLike<number> | undefined,
): void {
  const f = Math.fround;
  const qDim = H * hd;
  const scores = new Float64Array(pos0 + T);
  for (let t = 0; t < T; t++) {
    const p = pos0 + (tokens ? tokens[t] : t);
    const pStart = Math.max(0, firstVisible(mask, p));
    for (let h = 0; h < H; h++) {
      const g = Math.floor(h / nrep);
      const qo = t * qDim + h * hd;
      let max = -Infinity;
      for (let j = pStart; j <= p; j++) {
        if (keyMask && keyMask[j] === 0) {
          scores[j] = -Infinity;
          continue;
        }
        const ko = j * kvDim + g * hd;
        let dot = 0;
        for (let i = 0; i < hd; i++) dot += q[qo + i] * kc[ko + i];
        scores[j] = f(f(dot) * scale);
        if (scores[j] > max) max = scores[j];
      }
      let sum = 0;
      for (let j = pStart; j <= p; j++) {
        scores[j] = scores[j] === -Infinity ? 0 : Math.exp(scores[j] - max);
        sum += scores[j];
      }
      for (let i = 0; i < hd; i++) {
        let acc = 0;
        for (let j = pStart; j <= p; j++) if (scores[j]) acc += f(scores[j] / sum) * vc[j * kvDim + g * hd + i];
        att[qo + i] = acc;
      }
    }
  }
}

/**
 * Tree attention: new token t at position positions[t] attends to the shared slots and to its
 * visible slots (its ancestors and itself), in slot order, which is position order: the same keys
 * in the same order as a causal run reaching that token, so the same arithmetic (as `attend`).
 */
function attendTree(
  q: Float32Array, kc: Float32Array, vc: Float32Array, att: Float32Array, scores: Float32Array, tree: TreeAttention,
  T: number, tokens: ArrayLike<number> | null, G: number, qpg: number, nrep: number, hd: number, qDim: number, kvDim: number,
  scale: number, mask: AttentionMask, cap = 0,
): void {
  const keys = new Int32Array(scores.length);
  for (let t = 0; t < T; t++) {
    const tok = tokens ? tokens[t] : t;
    const p = tree.positions[tok];
    const first = firstVisible(mask, p);
    let nk = 0;
    for (let j = Math.max(0, first); j < tree.shared; j++) keys[nk++] = j;
    for (const j of tree.visible[tok]) if (tree.keyPositions[j - tree.shared] >= first) keys[nk++] = j;
    for (let g = 0; g < G; g++) {
      for (let hh = 0; hh < qpg; hh++) {
        const h = g * nrep + hh;
        const qo = t * qDim + h * hd;
        let max = -Infinity;
        for (let k = 0; k < nk; k++) {
          const ko = keys[k] * kvDim + g * hd;
          let d = 0;
          for (let i = 0; i < hd; i++) d += q[qo + i] * kc[ko + i];
          d *= scale;
          if (cap) d = cap * Math.tanh(d / cap);
          scores[k] = d;
          if (d > max) max = d;
        }
        let sum = 0;
        for (let k = 0; k < nk; k++) sum += scores[k] = Math.exp(scores[k] - max);
        const ao = t * qDim + h * hd;
        for (let i = 0; i < hd; i++) att[ao + i] = 0;
        for (let k = 0; k < nk; k++) {
          const pj = scores[k] / sum;
          const vo = keys[k] * kvDim + g * hd;
          for (let i = 0; i < hd; i++) att[ao + i] += pj * vc[vo + i];
        }
      }
    }
  }
}

function checkTree(tree: TreeAttention, T: number, pos0: number): void {
  const end = pos0 + T;
  if (tree.visible.length !== T || tree.positions.length !== T) throw new LlmcError(`tree attention: ${tree.visible.length} rows for ${T} new tokens`);
  if (tree.shared > pos0 || tree.keyPositions.length !== end - tree.shared) throw new LlmcError('tree attention: shared slots or key positions do not fit the cache');
  tree.visible.forEach((v, t) => {
    for (let i = 0; i < v.length; i++) {
      if (v[i] < tree.shared || v[i] >= end || (i > 0 && v[i] <= v[i - 1])) throw new LlmcError(`tree attention: row ${t} sees slot ${v[i]}, outside ${tree.shared}..${end - 1} or out of order`);
    }
    if (v[v.length - 1] !== pos0 + t) throw new LlmcError(`tree attention: row ${t} must see itself (slot ${pos0 + t}) last`);
  });
}

/** GELU, tanh approximation (transformers' gelu_pytorch_tanh). */
function geluTanh(x: number): number {
  return 0.5 * x * (1 + Math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

const F_0044715 = Math.fround(0.044715);
const F_SQRT_2_PI = Math.fround(Math.sqrt(2 / Math.PI));
/** geluTanh as the ONNX lowering's nodes compute it (Pow, Mul, Add, Mul, Tanh, Add, Mul, Mul), each rounded to float32. */
function geluTanhOrt(x: number): number {
  const f = Math.fround;
  const inner = f(f(x + f(f(x * x * x) * F_0044715)) * F_SQRT_2_PI);
  return f(f(x * 0.5) * f(f(Math.tanh(inner)) + 1));
}

/** Rotate-half RoPE on v[o..o+hd) with row `t` of the tables (pairs i and i + hd/2). */
function rope(v: Float32Array, o: number, hd: number, cos: Float32Array, sin: Float32Array, t: number): void {
  const half = hd >> 1;
  const c0 = t * half;
  for (let i = 0; i < half; i++) {
    const a = v[o + i];
    const b = v[o + i + half];
    const c = cos[c0 + i];
    const sn = sin[c0 + i];
    v[o + i] = a * c - b * sn;
    v[o + i + half] = b * c + a * sn;
  }
}

/** `rope` with each product and the sum rounded to float32 (onnxruntime's Mul, Mul, Add). */
function ropeOrt(v: Float32Array, o: number, hd: number, cos: Float32Array, sin: Float32Array, t: number): void {
  const f = Math.fround;
  const half = hd >> 1;
  const c0 = t * half;
  for (let i = 0; i < half; i++) {
    const a = v[o + i];
    const b = v[o + i + half];
    const c = cos[c0 + i];
    const sn = sin[c0 + i];
    v[o + i] = f(f(a * c) + f(-b * sn));
    v[o + i + half] = f(f(b * c) + f(a * sn));
  }
}

/** `rmsNorm` rounded as onnxruntime: mean of squares, + eps, sqrt each rounded, x / rms rounded, times w. */
/** `norm` over the channels of extent `e` of each of n rows of D (gathered, normalized, scattered back; the rest zero). */
function keptNorm(norm: typeof rmsNorm, x: Float32Array, w: Float32Array, out: Float32Array, n: number, D: number, e: Extent, eps: number): void {
  const K = e.count * e.len;
  const at = (i: number) => Math.floor(i / e.len) * e.stride + (i % e.len);
  const xs = new Float32Array(n * K);
  const ws = Float32Array.from({ length: K }, (_, i) => w[at(i)]);
  for (let r = 0; r < n; r++) for (let i = 0; i < K; i++) xs[r * K + i] = x[r * D + at(i)];
  const ys = new Float32Array(n * K);
  norm(xs, ws, ys, n, K, eps);
  out.fill(0, 0, n * D);
  for (let r = 0; r < n; r++) for (let i = 0; i < K; i++) out[r * D + at(i)] = ys[r * K + i];
}

function rmsNormOrt(x: Float32Array, w: Float32Array, out: Float32Array, T: number, D: number, eps: number): void {
  const f = Math.fround;
  for (let t = 0; t < T; t++) {
    const o = t * D;
    let ss = 0;
    for (let i = 0; i < D; i++) ss += x[o + i] * x[o + i];
    const den = f(Math.sqrt(f(f(ss / D) + eps)));
    for (let i = 0; i < D; i++) out[o + i] = f(x[o + i] / den) * w[i];
  }
}

function rmsNorm(x: Float32Array, w: Float32Array, out: Float32Array, T: number, D: number, eps: number): void {
  for (let t = 0; t < T; t++) {
    const o = t * D;
    let ss = 0;
    for (let i = 0; i < D; i++) ss += x[o + i] * x[o + i];
    const r = 1 / Math.sqrt(Math.fround(ss / D) + eps);
    for (let i = 0; i < D; i++) out[o + i] = w[i] * Math.fround(x[o + i] * r);
  }
}

interface BoundMlp {
  gate: Weight;
  up: Weight;
  down: Weight;
  gateBias: Float32Array | null;
  upBias: Float32Array | null;
  downBias: Float32Array | null;
}

/** down(silu(gate(x)) * up(x)) for one token over the first `ffn` neurons; out is [D]. */
function swiglu(m: BoundMlp, x: Float32Array, D: number, out: Float32Array, ffn: number): void {
  const g = new Float32Array(ffn);
  const u = new Float32Array(ffn);
  matmul(m.gate, x, 1, D, g, ffn, { nRows: ffn, bias: m.gateBias });
  matmul(m.up, x, 1, D, u, ffn, { nRows: ffn, bias: m.upBias });
  for (let i = 0; i < ffn; i++) {
    const a = g[i];
    g[i] = (a / (1 + Math.exp(-a))) * u[i];
  }
  matmul(m.down, g, 1, ffn, out, D, { nCols: ffn, bias: m.downBias });
}
