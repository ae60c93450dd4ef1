/**
 * Expert offloading for the TS runtime (`llmc run --expert-cache N`, EdgeMoE §3.3): routed experts
 * stay in the artifact's weights file and are read on demand into N slots of a bounded cache; every
 * other tensor is resident. After each MoE layer routes a token, the predictor's likely experts of
 * the next MoE layer are read in the background (the reads overlap the layer's compute) into
 * unpinned slots. Eviction: EdgeMoE's score, LRU or LFU (./experts.ts, the same cache core the
 * trace simulator runs, so the runtime's hits equal the simulator's on the same routes).
 * Slots live in the WebAssembly arena next to the resident weights, so offloaded experts run the
 * same kernels as resident ones: outputs are identical to the fully resident run.
 * Browser-safe: bytes come from a ByteSource.
 */
import { moeNames } from '../../core/arch/names.js';
import { isMoeLayer } from '../../core/arch/spec.js';
import { LlmcError, UsageError } from '../../core/errors.js';
import { EXPERT_TABLE, type ExpertTable } from '../../core/records/expert-table.js';
import { findRecord } from '../../core/records/types.js';
import type { ExpertCacheCounts } from '../../core/pipeline/target.js';
import type { ByteSource } from './bytes.js';
import { CacheCore, policyOf, Predictor, type PolicyName } from './experts.js';
import { alignUp, type ArtifactManifest, type TensorEntry } from './format.js';
import { dequantAll, Weight } from './kernels.js';
import { WasmArena } from './wasm.js';

export interface OffloadOptions {
  /** Experts the cache holds (at least the model's top-k). */
  capacity: number;
  /** Default: edgemoe when the artifact has the expert-bits record (its offline frequencies), else lru. */
  policy?: Exclude<PolicyName, 'belady'>;
  /** Experts preloaded per MoE layer (default: the record's; 0 = no preloading; needs the record's predictor). */
  preload?: number;
  /** Keep the routing trace of one-token steps (store.trace: per token, per MoE layer, the experts), for tests and benches. */
  trace?: boolean;
}

export interface ExpertWeights {
  gate: Weight;
  up: Weight;
  down: Weight;
}

export type OffloadStats = ExpertCacheCounts;

interface Layout {
  entries: TensorEntry[];
  /** Byte offset of each tensor inside the slot (64-aligned). */
  at: number[];
  /** Bytes the three take in a slot. */
  size: number;
}

interface Slot {
  id: number;
  weights: ExpertWeights | null;
  /** Pending read (demand or preload). */
  loading: Promise<void> | null;
  preloaded: boolean;
}

/** The offloaded experts of a model: where they are in the file, which are resident, the predictor. */
export class ExpertStore {
  readonly stats: OffloadStats = { accesses: 0, hits: 0, loads: 0, preloads: 0, usefulPreloads: 0, bytesRead: 0, stallMs: 0 };
  readonly policy: Exclude<PolicyName, 'belady'>;
  readonly fanout: number;
  private readonly core: CacheCore;
  private readonly slots: (Slot | null)[];
  /** MoE-layer index n of each decoder layer. */
  private readonly nOf = new Map<number, number>();
  private readonly predictor: Predictor | null;
  private prev2: number[] | null = null;
  private prev1: number[] | null = null;
  /** Slots preloaded for the next MoE layer (pinned until it runs). */
  private reserved: number[] = [];
  /** One-token steps' routes (OffloadOptions.trace): per sequence, per token, per MoE layer. */
  readonly trace: number[][][][] | null;

  constructor(
    private readonly source: ByteSource,
    /** Per MoE layer, per routed expert: its three tensors in the file. */
    private readonly layouts: Layout[][],
    private readonly region: Uint8Array,
    readonly slotBytes: number,
    private readonly arena: WasmArena | null,
    readonly E: number,
    readonly topK: number,
    moeLayers: readonly number[],
    opts: OffloadOptions,
    record: ExpertTable | null,
    private readonly where: string,
  ) {
    const capacity = opts.capacity;
    if (!Number.isInteger(capacity) || capacity < topK) throw new UsageError(`--expert-cache must hold at least the ${topK} experts one token routes to, got ${capacity}`);
    moeLayers.forEach((l, n) => this.nOf.set(l, n));
    this.policy = opts.policy ?? (record ? 'edgemoe' : 'lru');
    if (this.policy === 'edgemoe' && !record) throw new UsageError('--expert-policy edgemoe needs the offline activation frequencies of --passes expert-bits; this artifact has none (use lru or lfu)');
    this.fanout = opts.preload ?? record?.cache.preload ?? 0;
    if (this.fanout > 0 && !record) throw new UsageError('expert preloading needs the routing predictor of --passes expert-bits; this artifact has none (run with --expert-preload 0)');
    this.predictor = this.fanout > 0 && record ? new Predictor(record.predictor) : null;
    this.core = new CacheCore(capacity, E, policyOf(this.policy, record?.cache.f ?? [], E));
    this.slots = new Array(capacity).fill(null);
    this.trace = opts.trace ? [] : null;
  }

  get capacity(): number {
    return this.core.capacity;
  }

  /** MoE-layer index of decoder layer l. */
  layerIndex(l: number): number {
    return this.nOf.get(l)!;
  }

  /** A new sequence: the predictor's context starts over. */
  reset(): void {
    this.prev2 = this.prev1 = null;
    this.trace?.push([]);
    for (const s of this.reserved.splice(0)) this.core.unpin(s);
  }

  resident(n: number, e: number): boolean {
    return this.core.slotOf(n * this.E + e) !== undefined;
  }

  /**
   * Expert e of MoE layer n, resident and pinned until `release`. `count`: a decode step's use (the
   * hit statistics count those, as the simulator does).
   */
  async acquire(n: number, e: number, count: boolean): Promise<ExpertWeights> {
    const id = n * this.E + e;
    this.core.tick();
    let s = this.core.slotOf(id);
    if (s !== undefined) {
      const slot = this.slots[s]!;
      if (count) {
        this.stats.accesses++;
        this.stats.hits++;
        if (slot.preloaded) this.stats.usefulPreloads++;
      }
      slot.preloaded = false;
      this.core.touch(s);
      this.core.pin(s);
      if (slot.loading) {
        const t0 = performance.now();
        await slot.loading;
        if (count) this.stats.stallMs += performance.now() - t0;
      }
      return slot.weights!;
    }
    if (count) this.stats.accesses++;
    s = this.admit(id);
    this.core.touch(s);
    this.core.pin(s);
    const t0 = performance.now();
    await this.fill(s, n, e, false);
    if (count) this.stats.stallMs += performance.now() - t0;
    return this.slots[s]!.weights!;
  }

  release(n: number, e: number): void {
    const s = this.core.slotOf(n * this.E + e);
    if (s !== undefined) this.core.unpin(s);
  }

  /**
   * After MoE layer n routed one token to `experts` (and they are acquired): read the next layer's
   * likely experts in the background. They stay reserved (pinned) until that layer has acquired its
   * own, so another preload or a miss cannot evict them first; room always stays for the next
   * layer's top-k. The simulator (./experts.ts `simulate`) follows the same steps.
   */
  routed(n: number, experts: readonly number[], oneToken = true): void {
    for (const s of this.reserved.splice(0)) this.core.unpin(s);
    [this.prev2, this.prev1] = [this.prev1, [...experts]];
    // A prompt's layers run all its tokens at once: only its last token sets the predictor's context.
    if (!oneToken) return;
    if (this.trace) {
      const seq = this.trace[this.trace.length - 1] ?? (this.trace[0] = []);
      if (n === 0) seq.push([]);
      seq[seq.length - 1].push([...experts].sort((a, b) => a - b));
    }
    if (!this.predictor) return;
    const S = this.layouts.length;
    const next = (n + 1) % S;
    for (const e of this.predictor.predict(next, this.prev2, this.prev1).experts.slice(0, this.fanout)) {
      const id = next * this.E + e;
      if (this.core.slotOf(id) !== undefined) continue;
      if (this.reserved.length + 1 + this.topK > this.capacity) break;
      const s = this.admitOrNull(id);
      if (s === null) break;
      this.stats.preloads++;
      this.core.pin(s);
      this.reserved.push(s);
      this.fill(s, next, e, true).catch(() => {}); // surfaced when the expert is acquired
    }
  }

  private admitOrNull(id: number): number | null {
    const a = this.core.admit(id);
    if (!a) return null;
    this.slots[a.slot] = { id, weights: null, loading: null, preloaded: false };
    return a.slot;
  }

  private admit(id: number): number {
    const s = this.admitOrNull(id);
    if (s === null) throw new LlmcError(`internal: every one of the ${this.capacity} expert cache slots is pinned`);
    return s;
  }

  /** Read expert (n, e)'s tensors into slot s and bind its weights. */
  private fill(s: number, n: number, e: number, preload: boolean): Promise<void> {
    const slot = this.slots[s]!;
    const lay = this.layouts[n][e];
    const base = s * this.slotBytes;
    slot.preloaded = preload;
    slot.loading = (async () => {
      const parts = await Promise.all(lay.entries.map((t) => this.source.read(t.offset, t.bytes)));
      // The slot may have been given to another expert meanwhile only if unpinned: it never is while loading.
      parts.forEach((b, i) => this.region.set(b, base + lay.at[i]));
      const [gate, up, down] = lay.entries.map((t, i) => {
        const cols = t.shape[t.shape.length - 1];
        return new Weight(t.name, t.format, t.bytes === 0 ? 0 : t.shape.slice(0, -1).reduce((a, b) => a * b, 1), cols, this.region.subarray(base + lay.at[i], base + lay.at[i] + t.bytes), this.arena);
      });
      slot.weights = { gate, up, down };
      this.stats.loads++;
      this.stats.bytesRead += lay.entries.reduce((a, t) => a + t.bytes, 0);
      slot.loading = null;
    })();
    slot.loading.catch(() => {});
    return slot.loading.catch((err) => {
      throw err instanceof LlmcError ? err : new LlmcError(`cannot read expert ${e} of MoE layer ${n}: ${(err as Error).message}`, this.where);
    });
  }
}

/** The routed expert tensors of an artifact (they are what gets offloaded), per MoE layer and expert. */
export function offloadedTensors(m: ArtifactManifest): { moeLayers: number[]; names: { gate: string; up: string; down: string }[][] } {
  const spec = m.arch;
  if (!spec.moe) throw new UsageError(`--expert-cache needs a mixture-of-experts model (mixtral, qwen2_moe); this is a dense ${spec.modelType} model`);
  const moeLayers = Array.from({ length: spec.numLayers }, (_, l) => l).filter((l) => isMoeLayer(spec, l));
  return { moeLayers, names: moeLayers.map((l) => moeNames(spec, l).experts) };
}

/**
 * The resident part of a loaded artifact (every tensor but the routed experts) and the expert store.
 * `table` is the checked tensor table; bytes of resident tensors are read one by one.
 */
export async function loadOffloaded(
  source: ByteSource,
  manifest: ArtifactManifest,
  table: Map<string, TensorEntry>,
  opts: OffloadOptions,
  wasm: boolean,
  where: string,
): Promise<{ weight: (name: string) => Weight; vector: (name: string) => Float32Array; has: (name: string) => boolean; experts: ExpertStore; jsOnly: boolean }> {
  const { moeLayers, names } = offloadedTensors(manifest);
  const offloaded = new Set(names.flat().flatMap((x) => [x.gate, x.up, x.down]));
  const layouts: Layout[][] = names.map((layer) =>
    layer.map((x) => {
      const entries = [x.gate, x.up, x.down].map((t) => table.get(t)!);
      const at: number[] = [];
      let o = 0;
      for (const t of entries) {
        at.push(o);
        o = alignUp(o + t.bytes);
      }
      return { entries, at, size: o };
    }),
  );
  const slotBytes = Math.max(...layouts.flat().map((l) => l.size));
  const resident = [...table.values()].filter((t) => !offloaded.has(t.name));
  const at = new Map<string, number>();
  let residentBytes = 0;
  for (const t of resident) {
    at.set(t.name, residentBytes);
    residentBytes = alignUp(residentBytes + t.bytes);
  }
  const total = residentBytes + opts.capacity * slotBytes;
  const maxDim = Math.max(...[...table.values()].flatMap((e) => e.shape));
  const arena = wasm ? WasmArena.create(total, maxDim) : null;
  const mem = arena ? arena.weights(total) : new Uint8Array(total);
  for (const t of resident) mem.set(await source.read(t.offset, t.bytes), at.get(t.name)!);
  const weights = new Map<string, Weight>();
  const weight = (name: string): Weight => {
    const e = table.get(name);
    if (!e || offloaded.has(name)) throw new LlmcError(`tensor "${name}" is ${e ? 'offloaded' : 'missing from the tensor table'}`, where);
    let w = weights.get(name);
    if (!w) {
      const o = at.get(name)!;
      w = new Weight(name, e.format, e.bytes === 0 ? 0 : e.shape.slice(0, -1).reduce((a, b) => a * b, 1), e.shape[e.shape.length - 1], mem.subarray(o, o + e.bytes), arena);
      weights.set(name, w);
    }
    return w;
  };
  const record = findRecord(manifest.passes, EXPERT_TABLE, where);
  const spec = manifest.arch;
  const experts = new ExpertStore(source, layouts, mem.subarray(residentBytes), slotBytes, arena, spec.moe!.numExperts, spec.moe!.topK, moeLayers, opts, record, where);
  return {
    has: (name) => table.has(name),
    weight,
    vector: (name) => dequantAll(weight(name)),
    experts,
    jsOnly: !wasm,
  };
}
