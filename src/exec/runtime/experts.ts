/**
 * Expert offloading (EdgeMoE §3.3): which experts to keep in a bounded cache, which to preload.
 *  - The routing predictor: a 2nd-order Markov table over MoE layers with backoff (record
 *    `expert-table/1`): context = the expert sets of the two previous MoE layers (across the token
 *    boundary: layer 0 of token t+1 follows the last layers of token t), order 2 when its row has at
 *    least tau observations, else order 1 when seen, else the layer's marginal. Never an arbitrary
 *    expert for an unseen context (SPEC §1.5's quirk).
 *  - Eviction policies: EdgeMoE's score (SPEC §1.6: evict argmax d·f with d = −((I − i) mod S), the
 *    current layer's experts ≈ 0, f the offline activation frequency), LRU, LFU, and Belady (the
 *    optimal offline policy, for simulation). Experts pinned (in use or loading) are never evicted.
 *  - A synchronous cache core, shared by the runtime (which adds the I/O) and the trace simulator.
 * Browser-safe: no Node imports.
 */
import type { PredictorLayer, PredictorRow, RoutingPredictor } from '../../core/records/expert-table.js';

/** MoE-layer index n (0..S-1) and expert; `n * E + e` as a number. */
export type ExpertId = number;

export const setKey = (experts: readonly number[]) => [...experts].sort((a, b) => a - b).join(',');

// ---- predictor ---------------------------------------------------------------------------------

/**
 * Routing traces of calibration sequences: per sequence, per token, per MoE layer, the selected
 * experts. Builds the predictor's tables (counts, then rows pruned to the top `topM`).
 */
export function buildPredictor(
  traces: readonly (readonly (readonly number[])[])[][],
  opts: { numExperts: number; topK: number; moeLayers: readonly number[]; tau?: number; topM?: number },
): RoutingPredictor {
  const S = opts.moeLayers.length;
  const E = opts.numExperts;
  const marg = Array.from({ length: S }, () => new Array<number>(E).fill(0));
  const o1 = Array.from({ length: S }, () => new Map<string, number[]>());
  const o2 = Array.from({ length: S }, () => new Map<string, number[]>());
  const bump = (m: Map<string, number[]>, k: string, experts: readonly number[]) => {
    let row = m.get(k);
    if (!row) m.set(k, (row = new Array<number>(E).fill(0)));
    for (const e of experts) row[e]++;
  };
  for (const seq of traces) {
    // The flattened (token, layer) stream: context slides across token boundaries.
    const stream: (readonly number[])[] = seq.flat();
    stream.forEach((experts, i) => {
      const n = i % S;
      for (const e of experts) marg[n][e]++;
      if (i >= 1) bump(o1[n], setKey(stream[i - 1]), experts);
      if (i >= 2) bump(o2[n], `${setKey(stream[i - 2])}|${setKey(stream[i - 1])}`, experts);
    });
  }
  const topM = opts.topM ?? 4;
  const rows = (m: Map<string, number[]>): PredictorRow[] =>
    [...m.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([ctx, counts]) => ({
        ctx,
        total: counts.reduce((a, b) => a + b, 0),
        top: rankCounts(counts).slice(0, topM).map((e) => [e, counts[e]] as [number, number]),
      }));
  return {
    order: 2,
    tau: opts.tau ?? 8,
    topM,
    wrap: 'previous-token',
    topK: opts.topK,
    numExperts: E,
    layers: opts.moeLayers.map((layer, n) => ({ n, layer, marginal: marg[n], order1: rows(o1[n]), order2: rows(o2[n]) })),
  };
}

/** Experts with a positive count, most frequent first (lower index on ties). */
function rankCounts(counts: readonly number[]): number[] {
  return counts
    .map((c, e) => [c, e] as const)
    .filter(([c]) => c > 0)
    .sort((a, b) => b[0] - a[0] || a[1] - b[1])
    .map(([, e]) => e);
}

/** Looks the predictor's tables up (built once from the record). */
export class Predictor {
  private readonly o1: Map<string, PredictorRow>[];
  private readonly o2: Map<string, PredictorRow>[];
  private readonly marginal: number[][];
  readonly S: number;

  constructor(readonly table: RoutingPredictor) {
    const index = (rows: PredictorRow[]) => new Map(rows.map((r) => [r.ctx, r]));
    const layers = [...table.layers].sort((a, b) => a.n - b.n);
    this.S = layers.length;
    this.o1 = layers.map((l: PredictorLayer) => index(l.order1));
    this.o2 = layers.map((l: PredictorLayer) => index(l.order2));
    this.marginal = layers.map((l) => rankCounts(l.marginal));
  }

  /**
   * The likely experts of MoE layer n, most likely first, from the expert sets of the two MoE layers
   * before it in the (token, layer) stream (null where the stream has none), and which order answered.
   */
  predict(n: number, prev2: readonly number[] | null, prev1: readonly number[] | null): { experts: number[]; order: 0 | 1 | 2 } {
    if (prev1) {
      if (prev2) {
        const r = this.o2[n].get(`${setKey(prev2)}|${setKey(prev1)}`);
        if (r && r.total >= this.table.tau) return { experts: r.top.map(([e]) => e), order: 2 };
      }
      const r = this.o1[n].get(setKey(prev1));
      if (r && r.total > 0) return { experts: r.top.map(([e]) => e), order: 1 };
    }
    return { experts: this.marginal[n].slice(0, this.table.topM), order: 0 };
  }
}

// ---- eviction policies -------------------------------------------------------------------------

export type PolicyName = 'edgemoe' | 'lru' | 'lfu' | 'belady';
export const POLICIES: readonly PolicyName[] = ['edgemoe', 'lru', 'lfu', 'belady'];

/** What a policy sees of each occupied slot. */
export interface SlotInfo {
  id: ExpertId;
  /** MoE-layer index of the expert. */
  n: number;
  lastUse: number;
  uses: number;
}

export interface EvictionContext {
  /** MoE-layer index of the expert being inserted (EdgeMoE's I). */
  n: number;
  /** Logical time (accesses so far). */
  now: number;
  /** Belady: the time of the next access to an expert (Infinity: never). */
  nextUse?: (id: ExpertId, now: number) => number;
}

/** Picks a victim among the candidate slots (indices into `slots`, every one unpinned and occupied). */
export type EvictionPolicy = (slots: readonly SlotInfo[], candidates: readonly number[], ctx: EvictionContext) => number;

/**
 * EdgeMoE's score (the prototype's update_our_idx): d = i − I, d −= S when d > 0, d = −1e-6 when
 * d = 0; score = d · f[i][j]; evict the first argmax. A slot with f = 0 (score 0) goes first.
 */
export function edgemoePolicy(f: readonly (readonly number[])[], E: number): EvictionPolicy {
  const S = f.length;
  return (slots, candidates, ctx) => {
    let best = candidates[0];
    let bestScore = -Infinity;
    for (const s of candidates) {
      const { n } = slots[s];
      let d = n - ctx.n;
      if (d > 0) d -= S;
      if (d === 0) d = -1e-6;
      const score = d * f[n][slots[s].id - n * E];
      if (score === 0) return s;
      if (score > bestScore) {
        bestScore = score;
        best = s;
      }
    }
    return best;
  };
}

export const lruPolicy: EvictionPolicy = (slots, candidates) => candidates.reduce((b, s) => (slots[s].lastUse < slots[b].lastUse ? s : b));

export const lfuPolicy: EvictionPolicy = (slots, candidates) =>
  candidates.reduce((b, s) => (slots[s].uses < slots[b].uses || (slots[s].uses === slots[b].uses && slots[s].lastUse < slots[b].lastUse) ? s : b));

export const beladyPolicy: EvictionPolicy = (slots, candidates, ctx) => {
  if (!ctx.nextUse) throw new Error('Belady needs the future trace');
  let best = candidates[0];
  let far = -1;
  for (const s of candidates) {
    const t = ctx.nextUse(slots[s].id, ctx.now);
    if (t > far) {
      far = t;
      best = s;
    }
  }
  return best;
};

export function policyOf(name: PolicyName, f: readonly (readonly number[])[], E: number): EvictionPolicy {
  switch (name) {
    case 'edgemoe':
      return edgemoePolicy(f, E);
    case 'lru':
      return lruPolicy;
    case 'lfu':
      return lfuPolicy;
    case 'belady':
      return beladyPolicy;
  }
}

// ---- the cache core ----------------------------------------------------------------------------

/**
 * Which expert sits in which of `capacity` slots. Synchronous bookkeeping only: the runtime fills a
 * slot's bytes, the simulator does not. Pinned slots (in use by the current layer, or loading) are
 * never evicted.
 */
export class CacheCore {
  readonly slots: (SlotInfo | null)[];
  private readonly where = new Map<ExpertId, number>();
  private readonly pins = new Map<number, number>();
  private now = 0;

  constructor(
    readonly capacity: number,
    readonly E: number,
    private readonly policy: EvictionPolicy,
    private readonly nextUse?: (id: ExpertId, now: number) => number,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new Error(`cache capacity must be a positive integer, got ${capacity}`);
    this.slots = new Array(capacity).fill(null);
  }

  /** Advance logical time (one access). */
  tick(): number {
    return ++this.now;
  }

  get time(): number {
    return this.now;
  }

  slotOf(id: ExpertId): number | undefined {
    return this.where.get(id);
  }

  /** Record a use of a resident expert. */
  touch(slot: number): void {
    const s = this.slots[slot]!;
    s.lastUse = this.now;
    s.uses++;
  }

  /** Slots pinned now. */
  get pinned(): number {
    return this.pins.size;
  }

  pin(slot: number): void {
    this.pins.set(slot, (this.pins.get(slot) ?? 0) + 1);
  }

  unpin(slot: number): void {
    const n = (this.pins.get(slot) ?? 0) - 1;
    if (n > 0) this.pins.set(slot, n);
    else this.pins.delete(slot);
  }

  /**
   * A slot for `id` (not resident): an empty one, else the policy's victim among unpinned slots.
   * Returns null when every slot is pinned. The caller then fills it.
   */
  admit(id: ExpertId): { slot: number; evicted: ExpertId | null } | null {
    const empty = this.slots.indexOf(null);
    let slot = empty;
    let evicted: ExpertId | null = null;
    if (slot < 0) {
      const candidates: number[] = [];
      for (let s = 0; s < this.capacity; s++) if (!this.pins.has(s)) candidates.push(s);
      if (!candidates.length) return null;
      const n = Math.floor(id / this.E);
      slot = this.policy(this.slots as SlotInfo[], candidates, { n, now: this.now, nextUse: this.nextUse });
      evicted = this.slots[slot]!.id;
      this.where.delete(evicted);
    }
    this.slots[slot] = { id, n: Math.floor(id / this.E), lastUse: this.now, uses: 0 };
    this.where.set(id, slot);
    return { slot, evicted };
  }
}

// ---- simulation --------------------------------------------------------------------------------

export interface SimulationOptions {
  capacity: number;
  policy: PolicyName;
  numExperts: number;
  /** Offline frequencies per MoE layer (EdgeMoE's f); needed by 'edgemoe'. */
  f?: readonly (readonly number[])[];
  /** Preload the predictor's top `fanout` experts of the next MoE layer after each layer routes. */
  predictor?: Predictor;
  fanout?: number;
  /** What a read costs: expert bytes per MoE layer n and expert e, and a device model for stall time. */
  cost?: ReadCost;
}

/**
 * A device model for stall time: one storage queue reading `bytesPerMs`, and `computeMsPerLayer` of
 * work per MoE layer per token. Demand loads block the layer until read (after whatever the queue
 * holds); preloads are queued when a layer starts computing and overlap it.
 */
export interface ReadCost {
  bytes: readonly (readonly number[])[];
  bytesPerMs?: number;
  computeMsPerLayer?: number;
}

export interface SimulationResult {
  accesses: number;
  hits: number;
  hitRate: number;
  /** Experts read from storage (misses + preloads). */
  loads: number;
  preloads: number;
  /** Preloaded experts that were used before being evicted. */
  usefulPreloads: number;
  /** Bytes read (demand loads + preloads), with `cost`. */
  bytesRead?: number;
  /** Time the layers waited for reads under the cost's device model, with its bandwidth and compute. */
  stallMs?: number;
}

/**
 * Replay routing traces (per sequence, per token, per MoE layer: the selected experts) through a
 * cache of `capacity` experts; deterministic. With a predictor, after each MoE layer routes, the next
 * layer's likely experts are preloaded (they take slots like demand loads).
 */
export function simulate(traces: readonly (readonly (readonly number[])[])[][], o: SimulationOptions): SimulationResult {
  const E = o.numExperts;
  const S = traces[0]?.[0]?.length ?? 0;
  // The access stream (ids in order) and, for Belady, each expert's future access times.
  const stream: ExpertId[] = [];
  for (const seq of traces) for (const tok of seq) tok.forEach((experts, n) => experts.forEach((e) => stream.push(n * E + e)));
  const futures = new Map<ExpertId, number[]>();
  stream.forEach((id, t) => futures.set(id, [...(futures.get(id) ?? []), t + 1]));
  const cursor = new Map<ExpertId, number>();
  const nextUse = (id: ExpertId, now: number) => {
    const times = futures.get(id);
    if (!times) return Infinity;
    let i = cursor.get(id) ?? 0;
    while (i < times.length && times[i] <= now) i++;
    cursor.set(id, i);
    return i < times.length ? times[i] : Infinity;
  };
  const core = new CacheCore(o.capacity, E, policyOf(o.policy, o.f ?? [], E), nextUse);
  let hits = 0;
  let loads = 0;
  let preloads = 0;
  let useful = 0;
  const preloaded = new Set<ExpertId>();
  const cost = o.cost;
  const bytesOf = (id: ExpertId) => cost!.bytes[Math.floor(id / E)][id % E];
  const timed = cost?.bytesPerMs !== undefined && cost.computeMsPerLayer !== undefined;
  let bytesRead = 0;
  let clock = 0; // the compute side
  let queueFree = 0; // the storage queue
  let stallMs = 0;
  const K = Math.max(...traces.flatMap((seq) => seq.flatMap((tok) => tok.map((x) => x.length))), 1);
  for (const seq of traces) {
    let prev2: readonly number[] | null = null;
    let prev1: readonly number[] | null = null;
    // Preloaded experts stay reserved (pinned) until the layer they were read for has run.
    let reserved: number[] = [];
    for (const tok of seq) {
      for (let n = 0; n < S; n++) {
        const experts = tok[n];
        const pinned: number[] = [];
        let demandBytes = 0;
        for (const e of experts) {
          const id = n * E + e;
          core.tick();
          let slot = core.slotOf(id);
          if (slot !== undefined) {
            hits++;
            if (preloaded.delete(id)) useful++;
          } else {
            const a = core.admit(id);
            if (!a) throw new Error(`cache of ${o.capacity} cannot hold the ${experts.length} experts of one layer`);
            if (a.evicted !== null) preloaded.delete(a.evicted);
            slot = a.slot;
            loads++;
            if (cost) demandBytes += bytesOf(id);
          }
          core.touch(slot);
          core.pin(slot);
          pinned.push(slot);
        }
        for (const s of reserved) core.unpin(s);
        reserved = [];
        bytesRead += demandBytes;
        if (timed) {
          // The layer waits for its missing experts, read after what the queue already holds.
          const ready = demandBytes ? Math.max(clock, queueFree) + demandBytes / cost!.bytesPerMs! : clock;
          if (demandBytes) queueFree = ready;
          stallMs += ready - clock;
          clock = ready;
        }
        const computeStart = clock;
        if (timed) clock += cost!.computeMsPerLayer!;
        [prev2, prev1] = [prev1, experts];
        // Preloads run while this layer's experts compute (pinned meanwhile); room stays for the next layer's own experts.
        if (o.predictor) {
          const next = (n + 1) % S;
          for (const e of o.predictor.predict(next, prev2, prev1).experts.slice(0, o.fanout ?? 2)) {
            const id = next * E + e;
            if (core.slotOf(id) !== undefined) continue;
            if (reserved.length + 1 + K > o.capacity) break;
            const a = core.admit(id);
            if (!a) break;
            if (a.evicted !== null) preloaded.delete(a.evicted);
            core.pin(a.slot);
            reserved.push(a.slot);
            preloaded.add(id);
            preloads++;
            loads++;
            if (cost) {
              bytesRead += bytesOf(id);
              if (timed) queueFree = Math.max(queueFree, computeStart) + bytesOf(id) / cost.bytesPerMs!;
            }
          }
        }
        for (const s of pinned) core.unpin(s);
      }
    }
    // A sequence's last preloads (for a token that never comes) release their slots.
    for (const s of reserved) core.unpin(s);
  }
  return {
    accesses: stream.length,
    hits,
    hitRate: stream.length ? hits / stream.length : 0,
    loads,
    preloads,
    usefulPreloads: useful,
    ...(cost ? { bytesRead } : {}),
    ...(timed ? { stallMs } : {}),
  };
}

/**
 * Belady with prefetching: a bound for any policy, with or without preloading. An oracle that knows
 * the trace still reads at least Belady's demand misses: a prefetching schedule can be turned into a
 * demand one with no more fetches. So `loads` is a lower bound on reads. `bytes` is Belady's bytes:
 * a lower bound when the experts it trades off have equal sizes (one format per layer). With every
 * read overlapped with all the compute there is, stall ≥ max(0, read time − compute time).
 */
export function beladyPrefetchBound(traces: readonly (readonly (readonly number[])[])[][], o: Pick<SimulationOptions, 'capacity' | 'numExperts'> & { cost: ReadCost }): { loads: number; bytes: number; hitRate: number; stallMs?: number } {
  const r = simulate(traces, { capacity: o.capacity, policy: 'belady', numExperts: o.numExperts, cost: { bytes: o.cost.bytes } });
  const { bytesPerMs, computeMsPerLayer } = o.cost;
  const steps = traces.reduce((a, seq) => a + seq.length * (seq[0]?.length ?? 0), 0);
  return {
    loads: r.loads,
    bytes: r.bytesRead!,
    hitRate: r.hitRate,
    ...(bytesPerMs !== undefined && computeMsPerLayer !== undefined ? { stallMs: Math.max(0, r.bytesRead! / bytesPerMs - steps * computeMsPerLayer) } : {}),
  };
}
