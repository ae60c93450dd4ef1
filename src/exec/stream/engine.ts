/**
 * The layer-streaming executor: the model run piece by piece (embedding, each decoder layer, the
 * head; ./segments.ts), each piece lowered by the engine's own ONNX lowering and run on onnxruntime
 * over the whole calibration batch before the next one is loaded. Only one piece's weights are in
 * memory at a time (read from the checkpoint in its own dtype, as float32), so a model of any size
 * runs where the whole-model graph is refused (protobuf's 2 GiB) or does not fit; the batch's hidden
 * states are carried from piece to piece (`activationBytes`), in memory up to a budget and beyond it
 * in a temporary file (./spill.ts).
 *
 * It answers what the whole-model Engine answers for calibration and evaluation: `tap` (the same
 * TapResult, the same batches) and logits at every position of held-out windows (`prefill`, then
 * the head window by window, so [T, V] logits of one window are held at a time).
 *
 * onnxruntime per piece rather than the TS runtime's interpreter: on the TinyLlama-1.1B shape a decoder
 * layer over 4096 tokens ran faster there (bench/stream.bench.ts prints both), and the whole-model
 * Engine it replaces runs the same kernels, so its statistics agree to float32 rounding.
 */
import '../engine/ort-env.js'; // before onnxruntime-node loads
import * as ort from 'onnxruntime-node';
import type { ModelSource } from '../../core/checkpoint/source.js';
import { LlmcError, UsageError } from '../../core/errors.js';
import { buildModel, IO } from '../../core/ir/build.js';
import type { ModelGraph, V } from '../../core/ir/ir.js';
import { silentProgress, type Progress } from '../../core/util/progress.js';
import { argmax, logSoftmax, logSumExp } from '../../core/sampling.js';
import { lowerToOnnx, type TapOutputs, type TapSpec } from '../onnx/lower.js';
import { emptyTapResult, mergeTapOutputs, type TapResult } from '../engine/taps.js';
import { streamSegments, type Segment } from '../../core/ir/segments.js';
import { pieceSessionOptions, type Device } from './device.js';
import { pieceFeeds } from './feeds.js';
import { CarryStore, emptySlot, type CarriedOut, type Slot, type StreamSettings } from './spill.js';
import { appendFileSync } from 'node:fs';
import { StreamDecoder } from './decode.js';

export interface StreamOptions {
  /** onnxruntime intra-op threads (default: onnxruntime's choice). */
  threads?: number;
  /** The IR to run (a pass's transformed graph over `source`); default: the one built from the spec. */
  graph?: ModelGraph;
  /** One tick per batch per piece (a 1.1B model's sweep takes minutes). */
  progress?: Progress;
  /**
   * Tokens per onnxruntime run of a piece: bounds the piece's own activations. Default: 4096 for
   * tap (Engine.tap's batches, so `full` blocks come in the same order), one window per run for
   * prefill (batched attention ran slower: 41 s against 31 s for 16 windows of 512 on dense-28M).
   */
  batchTokens?: number;
  /** Where tap and prefill sweeps keep each piece's results (the profile cache): a second or resumed sweep reads them. */
  pieces?: PieceHook;
  /** The onnxruntime execution provider per piece (default: streamDevice(), the CLI's --device). */
  device?: Device;
  /** Memory budget of the carried hidden states and where they spill (default: streamSettings(), the CLI's). */
  spill?: StreamSettings;
}

/** What one piece gave over every batch: its taps, and per batch the values it carries on. */
export interface PieceResult {
  taps: TapResult;
  carried: CarriedOut;
}


/**
 * A piece's results by way of a store (src/measure/stream-cache.ts): `run` computes them when the store
 * has none for this piece, these taps and these ids.
 */
export type PieceHook = (seg: Segment, taps: TapSpec[], ids: number[][][], run: () => Promise<PieceResult>) => Promise<PieceResult>;

/** A variant of the model for StreamEngine.losses: pieces [from, until) run from `source` (a pass's view of the same model). */
export interface Branch {
  source: ModelSource;
  from: number;
  until: number;
  /**
   * The pieces [from, until) are the identity (a layer whose every head and neuron is masked, in a
   * model without o_proj/down_proj biases): each hands its one carried input on unchanged and no
   * session is built for it. `source` is then what the branch runs after them (the model's).
   */
  skip?: boolean;
}

/** Where a `losses` sweep is after piece `piece`: enough to continue from piece `piece` + 1 (Ctrl-C resume). */
export interface SweepPoint {
  piece: number;
  /** Per variant (the model, then each branch), per batch: the carried values; null: the branch has not started. */
  states: (Map<V, Float32Array>[] | null)[];
  /** Per variant: next-token losses summed so far, and their count (only the head adds to them). */
  sums: number[];
  counts: number[];
  /** The taps of the model's own pieces so far. */
  taps: TapResult;
}

/** A store of one sweep's latest SweepPoint (src/measure/stream-cache.ts keeps it in the profile cache). */
export interface SweepResume {
  load(): Promise<SweepPoint | null>;
  save(point: SweepPoint): Promise<void>;
  /** The sweep finished: what was saved is no longer needed. */
  clear(): Promise<void>;
}

/** Options of StreamEngine.losses. */
export interface LossOptions {
  /** Taps observed on the model's own states (not the branches'), in the same sweep: statistics and losses in one visit per block. */
  taps?: TapSpec[];
  /** Save the sweep after every piece and continue a saved one (a compile stopped with Ctrl-C). */
  resume?: SweepResume;
}

/** One onnxruntime run's rows: sequences of equal length. */
interface Batch {
  /** Indices into the sequences given. */
  sequences: number[];
  length: number;
  ids: number[][];
  /** The carried values at the current cut, [rows, T, C] each: in memory or spilled. */
  slot: Slot;
}

/** Logits of held-out windows, computed head-side one window at a time. */
export interface StreamedLogits {
  /** Row-major [T, V] logits at every position of window `i` (of the windows given to prefill). */
  logits(i: number): Promise<Float32Array>;
  /** Bytes of the carried hidden states held. */
  activationBytes: number;
  close(): Promise<void>;
}

export class StreamEngine {
  readonly graph: ModelGraph;
  readonly segments: Segment[];
  /** The largest carried activations of the last sweep, in bytes (the calibration activations), in memory or spilled. */
  activationBytes = 0;
  /** The most of them spilled to disk at once (0: all held in memory). */
  spilledBytes = 0;

  /** Per piece run so far: building its session (weights read, graph optimized) and running it. */
  readonly timings: { id: string; openMs: number; runMs: number }[] = [];

  get spec(): ModelGraph['spec'] {
    return this.graph.spec;
  }

  constructor(
    readonly source: ModelSource,
    private readonly opts: StreamOptions = {},
  ) {
    this.graph = opts.graph ?? buildModel(source.spec);
    this.segments = streamSegments(this.graph);
  }

  /** One piece's session (its weights read now, float32), with the tap outputs asked for (and router bias inputs). */
  private async open(seg: Segment, taps: TapSpec[], source: ModelSource = this.source, routerBias = false): Promise<{ session: ort.InferenceSession; taps: TapOutputs[]; routerBiases: { input: string; logits: string; numExperts: number }[] }> {
    const lowered = await lowerToOnnx(source, { graph: seg.graph, taps, routerBias });
    const options = pieceSessionOptions(this.opts.threads, this.opts.device);
    const session = await ort.InferenceSession.create(lowered.bytes, options);
    return { session, taps: lowered.taps, routerBiases: lowered.routerBiases };
  }

  /** A piece's inputs for batch `b` with its `carried` values. */
  private feeds(seg: Segment, b: Batch, carried: Map<V, Float32Array>, positions: number[]): Record<string, ort.Tensor> {
    return pieceFeeds(seg, b.ids, carried, positions);
  }

  /** Batches of equal-length sequences, at most `batchTokens` tokens each (one sequence at least). */
  private batches(ids: number[][], tokens: number): Batch[] {
    for (const r of ids) for (const id of r) if (!Number.isInteger(id) || id < 0 || id >= this.graph.spec.vocabSize) throw new UsageError(`token id ${id} is outside the vocabulary [0, ${this.graph.spec.vocabSize})`);
    const byLength = new Map<number, number[]>();
    ids.forEach((seq, i) => {
      if (seq.length > 0) byLength.set(seq.length, [...(byLength.get(seq.length) ?? []), i]);
    });
    const out: Batch[] = [];
    const per = (len: number) => Math.max(1, Math.floor(tokens / len));
    for (const [len, group] of byLength) {
      for (let i = 0; i < group.length; i += per(len)) {
        const sequences = group.slice(i, i + per(len));
        out.push({ sequences, length: len, ids: sequences.map((j) => ids[j]), slot: emptySlot() });
      }
    }
    return out;
  }

  /**
   * Run pieces [0, end) over every batch, piece by piece: each piece's session is built, run on all
   * batches (their carried values replaced by its outputs, its taps merged into `result`), released.
   */
  private async sweep(batches: Batch[], end: number, specs: TapSpec[], result: TapResult, positions: (b: Batch) => number[], store: CarryStore, cacheable = false): Promise<void> {
    const progress = this.opts.progress ?? silentProgress;
    progress.start(`streaming ${end} pieces over ${batches.reduce((a, b) => a + b.ids.length * b.length, 0)} tokens`, end * batches.length);
    const eta = blockEta(this.segments.slice(0, end), progress);
    try {
      for (let s = 0; s < end; s++) {
        const seg = this.segments[s];
        store.turn(s);
        eta.begin(s);
        const t0 = performance.now();
        if (isGather(seg)) {
          await this.gather(seg, batches, store);
          this.timings.push({ id: seg.id, openMs: 0, runMs: performance.now() - t0 });
          progress.tick(batches.length);
          continue;
        }
        let ran = false;
        const run = async (): Promise<PieceResult> => {
          ran = true;
          const { session, taps } = await this.open(seg, specs);
          const t1 = performance.now();
          try {
            const out = emptyTapResult();
            for (const b of batches) {
              const input = store.load(b.slot);
              const outputs = await session.run(this.feeds(seg, b, input, positions(b)));
              store.keep(b.slot, this.moveOn(s, input, new Map(seg.carriedOut.map((v) => [v, outputs[v].data as Float32Array]))));
              if (taps.length) mergeTapOutputs(out, taps, outputs, b.ids.length, b.length);
              progress.tick();
            }
            this.timings.push({ id: seg.id, openMs: t1 - t0, runMs: performance.now() - t1 });
            const only = (m: Map<V, Float32Array>) => new Map(seg.carriedOut.map((v) => [v, m.get(v)!]));
            return { taps: out, carried: { length: batches.length, get: (i) => only(store.load(batches[i].slot)) } };
          } finally {
            await session.release();
          }
        };
        // a piece's results may come from (and go to) the profile cache: a second run, or one resumed after Ctrl-C, starts after the last piece done
        const hook = cacheable && this.opts.pieces;
        const r = hook ? await hook(seg, specs, batches.map((b) => b.ids), run) : await run();
        if (!ran) {
          progress.tick(batches.length);
          batches.forEach((b, i) => store.keep(b.slot, this.moveOn(s, store.load(b.slot), r.carried.get(i))));
        }
        eta.end(s, ran);
        foldTaps(result, r.taps);
        this.held(batches.map((b) => b.slot), store);
      }
    } finally {
      progress.done();
    }
  }

  /** A piece's outputs and the values it was handed that a later piece still reads. */
  private moveOn(s: number, input: Map<V, Float32Array>, outputs: Map<V, Float32Array>): Map<V, Float32Array> {
    const seg = this.segments[s];
    const carried = new Map(outputs);
    for (const [v, x] of input) if (!seg.carriedIn.includes(v) || this.readLater(s, v)) carried.set(v, x);
    return carried;
  }

  /** Record the carried activations now held (memory and spill file together). */
  private held(slots: Slot[], store: CarryStore): void {
    const bytes = slots.reduce((a, x) => a + (x.disk ? x.disk.at.reduce((n, [, , len]) => n + len * 4, 0) : [...x.mem.values()].reduce((n, y) => n + y.byteLength, 0)), 0);
    this.activationBytes = Math.max(this.activationBytes, bytes);
    this.spilledBytes = Math.max(this.spilledBytes, store.spilledBytes);
    // bench/scale.bench.ts reads what a whole compile's sweeps carried (they run inside llmc, maybe in a child)
    if (process.env.LLMC_STREAM_STATS) appendFileSync(process.env.LLMC_STREAM_STATS, JSON.stringify({ activationBytes: this.activationBytes, spilledBytes: this.spilledBytes }) + '\n');
  }

  /**
   * The embedding piece in place of onnxruntime: rows of the table copied (exact, as Gather), so the
   * table is held once as float32 rather than in the graph's bytes and onnxruntime's copy too.
   */
  private async gather(seg: Segment, batches: Batch[], store: CarryStore, source: ModelSource = this.source): Promise<void> {
    for (const op of seg.graph.ops) {
      if (op.op !== 'embed') continue;
      const table = await source.readF32(op.table);
      const D = this.graph.spec.hiddenSize;
      for (const b of batches) {
        const out = new Float32Array(b.ids.length * b.length * D);
        b.ids.flat().forEach((id, r) => out.set(table.subarray(id * D, (id + 1) * D), r * D));
        store.keep(b.slot, new Map(store.load(b.slot)).set(op.out, out));
      }
    }
  }

  private readLater(s: number, v: V): boolean {
    return this.segments.slice(s + 1).some((g) => g.carriedIn.includes(v));
  }

  /**
   * Mean next-token loss (log perplexity, as the whole-model Engine's perplexity) of `seqs` for this
   * model and for each branch, in one sweep: a branch leaves the model at piece `from` (from the
   * hidden states the model hands that piece) and runs pieces [from, until) from its own source.
   * Each piece's session is built once for the model and once per branch that replaces it, and runs
   * every state that reaches it: skipping each of L layers costs L²/2 layer runs, not L whole forwards.
   * Branch states are held together (one calibration batch's hidden states each).
   */
  async losses(seqs: number[][], branches: readonly Branch[] = [], opts: LossOptions = {}): Promise<{ base: number; branches: number[]; taps: TapResult; resumedAt: number }> {
    const last = this.segments.length - 1;
    for (const b of branches) if (!(0 <= b.from && b.from < b.until && b.until <= last + 1)) throw new LlmcError(`internal: branch pieces [${b.from}, ${b.until}) outside [0, ${last + 1})`);
    for (const b of branches) {
      if (!b.skip) continue;
      for (let s = b.from; s < b.until; s++) {
        const seg = this.segments[s];
        if (s === last || seg.carriedIn.length !== 1 || seg.carriedOut.length !== 1) throw new LlmcError(`internal: piece ${seg.id} cannot be skipped (not one carried value in and out)`);
      }
    }
    const specs = opts.taps ?? [];
    const base = this.batches(seqs, this.opts.batchTokens ?? 4096);
    const states: (Batch[] | null)[] = [base, ...branches.map(() => null)];
    const store = new CarryStore(this.opts.spill);
    const own = (k: number, s: number) => k > 0 && branches[k - 1].from <= s && s < branches[k - 1].until;
    const sourceAt = (k: number, s: number) => (own(k, s) ? branches[k - 1].source : this.source);
    const progress = this.opts.progress ?? silentProgress;
    const runsAt = (s: number) => 1 + branches.filter((b) => b.from <= s && !(b.skip && s < b.until)).length;
    progress.start(`streaming ${this.segments.length} pieces, ${branches.length + 1} variants over ${seqs.reduce((a, q) => a + q.length, 0)} tokens`, this.segments.reduce((a, _, s) => a + runsAt(s), 0));
    const nll = states.map(() => ({ sum: 0, count: 0 }));
    const taps = emptyTapResult();
    let first = 0;
    const eta = blockEta(this.segments, progress);
    try {
      const saved = await opts.resume?.load();
      if (saved) {
        // a stopped sweep: its states after piece saved.piece, as they were
        first = saved.piece + 1;
        store.turn(saved.piece);
        saved.states.forEach((st, k) => {
          if (!st) return;
          // the model's own batches are `base` itself (branches starting later copy them)
          states[k] = k === 0 ? base : base.map((x) => ({ ...x, slot: emptySlot() }));
          states[k]!.forEach((b, bi) => store.keep(b.slot, st[bi]));
        });
        saved.sums.forEach((x, k) => (nll[k] = { sum: x, count: saved.counts[k] }));
        foldTaps(taps, saved.taps);
        progress.tick(this.segments.slice(0, first).reduce((a, _, s) => a + runsAt(s), 0));
      }
      for (let s = first; s <= last; s++) {
        const seg = this.segments[s];
        store.turn(s);
        eta.begin(s);
        // branches leaving here start from the model's own input to this piece
        branches.forEach((b, i) => {
          if (b.from === s) states[i + 1] = base.map((x) => ({ ...x, slot: store.copy(x.slot) }));
        });
        // skipped pieces hand their input on
        states.forEach((st, k) => {
          if (!st || !own(k, s) || !branches[k - 1].skip) return;
          for (const b of st) {
            const input = store.load(b.slot);
            store.keep(b.slot, this.moveOn(s, input, new Map([[seg.carriedOut[0], input.get(seg.carriedIn[0])!]])));
          }
        });
        // the states by the source their piece runs from: one session each
        const groups = new Map<ModelSource, number[]>();
        states.forEach((st, k) => {
          if (st && !(own(k, s) && branches[k - 1].skip)) groups.set(sourceAt(k, s), [...(groups.get(sourceAt(k, s)) ?? []), k]);
        });
        for (const [source, ks] of groups) {
          if (s === last) await this.headLosses(seg, source, ks.map((k) => states[k]!), ks.map((k) => nll[k]), store);
          else if (isGather(seg)) for (const k of ks) await this.gather(seg, states[k]!, store, source);
          else await this.runPiece(s, source, ks.map((k) => states[k]!), store, undefined, ks[0] === 0 && specs.length ? { specs, into: taps } : undefined);
          progress.tick(ks.length);
        }
        eta.end(s, true);
        this.held(states.flatMap((st) => (st ?? []).map((b) => b.slot)), store);
        if (opts.resume && s < last) {
          await opts.resume.save({ piece: s, states: states.map((st) => st && st.map((b) => store.load(b.slot))), sums: nll.map((x) => x.sum), counts: nll.map((x) => x.count), taps });
        }
      }
    } finally {
      progress.done();
      store.close();
    }
    const mean = (k: number) => {
      if (nll[k].count === 0) throw new UsageError('a loss needs at least one sequence of 2 or more tokens');
      return nll[k].sum / nll[k].count;
    };
    const out = { base: mean(0), branches: branches.map((_, i) => mean(i + 1)), taps, resumedAt: first };
    for (const b of base) {
      taps.tokens += b.ids.length * b.length;
      taps.batches.push({ sequences: b.sequences, length: b.length });
    }
    await opts.resume?.clear();
    return out;
  }

  /**
   * Mean KL divergence, over every position of `seqs`, of each branch's next-token distribution from
   * its reference's (the model's, or an earlier branch's), in one sweep as `losses` runs its
   * branches: a branch from piece p costs the pieces from p on, not a whole forward. A branch with
   * router biases runs its own pieces with them added to their routers' logits (force-routing an
   * expert, as Engine's swap.routerBias). The head runs once per sequence per variant, and the
   * reference's [T, V] log-probabilities are held for that sequence only.
   */
  async divergences(seqs: number[][], branches: readonly DivergenceBranch[]): Promise<number[]> {
    const last = this.segments.length - 1;
    branches.forEach((b, i) => {
      if (!(0 <= b.from && b.from < b.until && b.until <= last)) throw new LlmcError(`internal: branch pieces [${b.from}, ${b.until}) outside [0, ${last})`);
      if (b.reference !== undefined && !(b.reference >= -1 && b.reference < i)) throw new LlmcError(`internal: branch ${i} refers to branch ${b.reference}, not an earlier one`);
    });
    const base = this.batches(seqs, this.opts.batchTokens ?? 4096);
    const store = new CarryStore(this.opts.spill);
    const states: (Batch[] | null)[] = [base, ...branches.map(() => null)];
    const own = (k: number, s: number) => k > 0 && branches[k - 1].from <= s && s < branches[k - 1].until;
    const progress = this.opts.progress ?? silentProgress;
    progress.start(`streaming ${this.segments.length} pieces, ${branches.length + 1} variants over ${seqs.reduce((a, q) => a + q.length, 0)} tokens`, this.segments.reduce((a, _, s) => a + 1 + branches.filter((b) => b.from <= s).length, 0));
    try {
      for (let s = 0; s < last; s++) {
        const seg = this.segments[s];
        store.turn(s);
        branches.forEach((b, i) => {
          if (b.from === s) states[i + 1] = base.map((x) => ({ ...x, slot: store.copy(x.slot) }));
        });
        // the model's own pieces run every state that has none of its own here, in one session
        const shared = states.flatMap((st, k) => (st && !own(k, s) ? [k] : []));
        if (isGather(seg)) for (const k of shared) await this.gather(seg, states[k]!, store);
        else await this.runPiece(s, this.source, shared.map((k) => states[k]!), store);
        for (let k = 1; k < states.length; k++) {
          if (!own(k, s)) continue;
          const b = branches[k - 1];
          if (isGather(seg) && !b.routerBias) await this.gather(seg, states[k]!, store, b.source);
          else await this.runPiece(s, b.source, [states[k]!], store, b.routerBias);
        }
        progress.tick(states.filter((st) => st).length);
        this.held(states.flatMap((st) => (st ?? []).map((b) => b.slot)), store);
      }
      const head = this.segments[last];
      const { session } = await this.open(head, []);
      const V = this.graph.spec.vocabSize;
      const refs = new Set(branches.map((b) => b.reference ?? -1));
      const sums = branches.map(() => 0);
      let rows = 0;
      try {
        for (const [bi, b] of base.entries()) {
          const positions = Array.from({ length: b.length }, (_, t) => t);
          for (let row = 0; row < b.ids.length; row++) {
            const logits = async (k: number) => {
              const x = states[k]![bi];
              const one: Batch = { sequences: [x.sequences[row]], length: x.length, ids: [x.ids[row]], slot: emptySlot() };
              const rows = rowOf(store.load(x.slot), row, x.ids.length);
              return (await session.run(this.feeds(head, one, rows, positions)))[IO.logits].data as Float32Array;
            };
            const logProbs = new Map<number, Float64Array>();
            if (refs.has(-1)) logProbs.set(-1, logProbsOf(await logits(0), V));
            for (const [i, br] of branches.entries()) {
              const z = await logits(i + 1);
              if (refs.has(i)) logProbs.set(i, logProbsOf(z, V));
              sums[i] += klRows(logProbs.get(br.reference ?? -1)!, z, V);
            }
            rows += b.length;
          }
        }
      } finally {
        await session.release();
      }
      progress.tick(states.length);
      if (rows === 0) throw new UsageError('a divergence needs at least one token');
      return sums.map((x) => x / rows);
    } finally {
      store.close();
      progress.done();
    }
  }

  /** Piece `s` from `source` over each state's batches, their carried values moved on past it (router biases added where given). */
  private async runPiece(s: number, source: ModelSource, states: Batch[][], store: CarryStore, routerBias?: ReadonlyMap<number, Float32Array>, tapFirst?: { specs: TapSpec[]; into: TapResult }): Promise<void> {
    const seg = this.segments[s];
    const t0 = performance.now();
    const { session, routerBiases, taps } = await this.open(seg, tapFirst?.specs ?? [], source, routerBias !== undefined);
    const t1 = performance.now();
    const tapped = emptyTapResult();
    try {
      for (const [k, batches] of states.entries()) {
        for (const b of batches) {
          const input = store.load(b.slot);
          const feeds = this.feeds(seg, b, input, [b.length - 1]);
          for (const r of routerBiases) {
            const layer = Number(/^l(\d+)\./.exec(r.logits)![1]);
            feeds[r.input] = new ort.Tensor('float32', routerBias?.get(layer) ?? new Float32Array(r.numExperts), [r.numExperts]);
          }
          const outputs = await session.run(feeds);
          store.keep(b.slot, this.moveOn(s, input, new Map(seg.carriedOut.map((v) => [v, outputs[v].data as Float32Array]))));
          // the first state's taps (the model's own; branches sharing the session are not observed)
          if (k === 0 && tapFirst && taps.length) mergeTapOutputs(tapped, taps, outputs, b.ids.length, b.length);
        }
      }
      if (tapFirst) foldTaps(tapFirst.into, tapped);
      this.timings.push({ id: seg.id, openMs: t1 - t0, runMs: performance.now() - t1 });
    } finally {
      await session.release();
    }
  }

  /** The head from `source` on each state, one sequence at a time (its [T, V] logits), next-token losses summed into `into`. */
  private async headLosses(seg: Segment, source: ModelSource, states: Batch[][], into: { sum: number; count: number }[], store: CarryStore): Promise<void> {
    const { session } = await this.open(seg, [], source);
    const V = this.graph.spec.vocabSize;
    try {
      for (const [k, batches] of states.entries()) {
        for (const b of batches) {
          if (b.length < 2) continue;
          const positions = Array.from({ length: b.length }, (_, t) => t);
          const carried = store.load(b.slot);
          for (const [row, ids] of b.ids.entries()) {
            const one: Batch = { sequences: [b.sequences[row]], length: b.length, ids: [ids], slot: emptySlot() };
            const rows = rowOf(carried, row, b.ids.length);
            const logits = (await session.run(this.feeds(seg, one, rows, positions)))[IO.logits].data as Float32Array;
            for (let t = 0; t + 1 < b.length; t++) {
              const o = t * V;
              let max = -Infinity;
              for (let i = 0; i < V; i++) if (logits[o + i] > max) max = logits[o + i];
              let sum = 0;
              for (let i = 0; i < V; i++) sum += Math.exp(logits[o + i] - max);
              into[k].sum += max + Math.log(sum) - logits[o + ids[t + 1]];
              into[k].count++;
            }
          }
        }
      }
    } finally {
      await session.release();
    }
  }

  /**
   * Profiling observations over `ids`, as Engine.tap gives them (the same batches, each run's logits
   * at its last position, so the lm_head's input is observed there). The head runs only when a tap
   * observes it.
   */
  async tap(ids: number[][], spec: TapSpec | TapSpec[]): Promise<TapResult> {
    const specs = Array.isArray(spec) ? spec : [spec];
    const batches = this.batches(ids, this.opts.batchTokens ?? 4096);
    const result = emptyTapResult();
    const head = this.segments[this.segments.length - 1];
    const headTapped = head.graph.taps.some((p) => specs.some((s) => s.kind === p.kind && (!s.layers || s.layers.includes(p.layer))));
    // full activations and router logits are too large to keep per piece: those sweeps are not cached
    const cacheable = specs.every((t) => !t.full && t.kind !== 'router-logits');
    const store = new CarryStore(this.opts.spill);
    try {
      await this.sweep(batches, this.segments.length - (headTapped ? 0 : 1), specs, result, (b) => [b.length - 1], store, cacheable);
    } finally {
      store.close();
    }
    for (const b of batches) {
      result.tokens += b.ids.length * b.length;
      result.batches.push({ sequences: b.sequences, length: b.length });
    }
    return result;
  }

  /**
   * Greedy continuations of equal-length `prompts` by `G` tokens each (the ids chosen, prompt
   * excluded), as the whole-model Engine's session steps give them: all prompts advance together on
   * a StreamDecoder (./decode.ts: each piece's session built once, weights kept within a budget, each
   * layer's KV cache kept), so a step costs one weight sweep for the whole batch. Ties go to the lower
   * id (core's argmax). `decoder` shares one (its sessions and kept weights) between calls.
   */
  async greedy(prompts: number[][], G: number, decoder?: StreamDecoder): Promise<number[][]> {
    if (!prompts.length || G <= 0) return prompts.map(() => []);
    const T0 = prompts[0].length;
    if (T0 === 0 || prompts.some((p) => p.length !== T0)) throw new UsageError('greedy continuation needs non-empty prompts of equal length');
    const d = decoder ?? new StreamDecoder(this.source, { graph: this.opts.graph, threads: this.opts.threads, device: this.opts.device });
    const out = prompts.map(() => [] as number[]);
    const progress = this.opts.progress ?? silentProgress;
    progress.start(`streaming ${this.segments.length} pieces over ${G} greedy steps`, G);
    try {
      const first = d.timings.length;
      const session = d.session(prompts.length);
      let step: number[][] = prompts;
      for (let g = 0; g < G; g++) {
        const logits = await session.step(step);
        step = logits.map((z, i) => {
          const next = argmax(z);
          out[i].push(next);
          return [next];
        });
        progress.tick();
      }
      this.activationBytes = Math.max(this.activationBytes, d.kvBytes);
      for (const t of d.timings.slice(first)) this.timings.push({ id: t.id, openMs: t.openMs, runMs: t.runMs + t.loadMs });
    } finally {
      if (!decoder) await d.close();
      progress.done();
    }
    return out;
  }

  /**
   * Every piece but the head over `windows`; then `logits(i)` runs the head on window i's final
   * hidden states alone (the head's session stays open until close()).
   */
  async prefill(windows: number[][]): Promise<StreamedLogits> {
    const batches = this.batches(windows, this.opts.batchTokens ?? 1);
    const store = new CarryStore(this.opts.spill);
    let session: ort.InferenceSession;
    const head = this.segments[this.segments.length - 1];
    try {
      // with a piece store, each piece's carried states are stored as it finishes: a stopped evaluation resumes at the next
      await this.sweep(batches, this.segments.length - 1, [], emptyTapResult(), () => [], store, this.opts.pieces !== undefined);
      session = (await this.open(head, [])).session;
    } catch (e) {
      store.close();
      throw e;
    }
    const where = new Map<number, { b: Batch; row: number }>();
    for (const b of batches) b.sequences.forEach((seq, row) => where.set(seq, { b, row }));
    let closed = false;
    return {
      activationBytes: this.activationBytes,
      logits: async (i) => {
        if (closed) throw new LlmcError('internal: streamed logits read after close');
        const at = where.get(i);
        if (!at) throw new LlmcError(`internal: window ${i} was not prefilled`);
        const { b, row } = at;
        const one: Batch = { sequences: [i], length: b.length, ids: [b.ids[row]], slot: emptySlot() };
        const rows = rowOf(store.load(b.slot), row, b.ids.length, true);
        const outputs = await session.run(this.feeds(head, one, rows, Array.from({ length: b.length }, (_, t) => t)));
        return outputs[IO.logits].data as Float32Array;
      },
      close: async () => {
        if (closed) return;
        closed = true;
        store.close();
        await session.release();
      },
    };
  }
}

/** A piece of embed ops reading the input ids, with no taps: rows copied in JS (StreamEngine.gather). */
export const isGather = (seg: Segment): boolean => seg.graph.taps.length === 0 && seg.graph.ops.every((op) => op.op === 'embed' && op.ids === IO.ids);

/** Fold one piece's tap results into the whole sweep's (each tap key belongs to one piece). */
function foldTaps(into: TapResult, from: TapResult): void {
  for (const k of ['linearInputs', 'linearOutputs', 'headOutputs', 'routerLogits', 'mlpActs'] as const) {
    for (const [key, v] of from[k] as Map<string, unknown>) (into[k] as Map<string, unknown>).set(key, v);
  }
}

/**
 * The streamed sweep's status per piece ("block 7/22 · 41 s left"): the time left from the pieces
 * computed so far (pieces read from the profile cache take no time and are not counted).
 */
function blockEta(segments: Segment[], progress: Progress): { begin(s: number): void; end(s: number, computed: boolean): void } {
  const layers = segments.filter((g) => g.layer >= 0 && g.layer < g.graph.spec.numLayers).length;
  let spent = 0;
  let computed = 0;
  let t0 = 0;
  return {
    begin(s) {
      t0 = performance.now();
      const seg = segments[s];
      const left = segments.length - s;
      const eta = computed > 0 ? ` · ${Math.ceil(((spent / computed) * left) / 1000)} s left` : '';
      const where = seg.layer < 0 ? 'embedding' : seg.layer >= layers ? 'head' : `block ${seg.layer + 1}/${layers}`;
      progress.status?.(`${where}${eta}`);
    },
    end(_s, wasComputed) {
      if (!wasComputed) return;
      spent += performance.now() - t0;
      computed++;
    },
  };
}

/** Row `row` of a batch's carried values ([rows, T, C] each): views, or copies that outlive the batch. */
function rowOf(carried: Map<V, Float32Array>, row: number, rows: number, copy = false): Map<V, Float32Array> {
  return new Map([...carried].map(([v, x]) => {
    const n = x.length / rows;
    return [v, copy ? x.slice(row * n, (row + 1) * n) : x.subarray(row * n, (row + 1) * n)];
  }));
}

/** A variant for StreamEngine.divergences. */
export interface DivergenceBranch extends Branch {
  /** Added to the routers' logits of these layers in the branch's own pieces. */
  routerBias?: ReadonlyMap<number, Float32Array>;
  /** The variant its KL is taken from: −1 (default) the model, else an earlier branch. */
  reference?: number;
}

/** Row-wise log-softmax of [rows, V] logits, in float64. */
function logProbsOf(z: Float32Array, V: number): Float64Array {
  const out = new Float64Array(z.length);
  for (let o = 0; o < z.length; o += V) logSoftmax(z.subarray(o, o + V), out.subarray(o, o + V));
  return out;
}

/** Σ over rows of KL(p_ref ‖ softmax(z)) (each row's clamped at 0: rounding can make it slightly negative). */
function klRows(ref: Float64Array, z: Float32Array, V: number): number {
  let sum = 0;
  for (let o = 0; o < z.length; o += V) {
    const lse = logSumExp(z, o, V);
    let kl = 0;
    for (let i = 0; i < V; i++) kl += Math.exp(ref[o + i]) * (ref[o + i] - (z[o + i] - lse));
    sum += Math.max(0, kl);
  }
  return sum;
}

