/**
 * The forward engine: the model IR lowered to ONNX and run on onnxruntime-node (CPU).
 *
 * One graph serves prefill and decode: it takes past K/V per layer (length 0 for a prefill) and
 * returns the grown cache. One graph means the weights are loaded once; two graphs would hold
 * two copies of every weight in onnxruntime for a shape specialization CPU kernels do not need.
 * Logits are computed only at the positions asked for (`logit_positions`), so a 512-token
 * prefill does not pay for 512 lm_head rows.
 *
 * Taps (profiling observations) need extra graph outputs, so they run on a second session built
 * on first use (or at open() when `taps` is given), keyed by the requested tap set.
 */
import './ort-env.js'; // before onnxruntime-node loads
import * as ort from 'onnxruntime-node';
import type { ModelSource } from '../../core/checkpoint/source.js';
import type { ArchSpec } from '../../core/arch/spec.js';
import { LlmcError, UsageError } from '../../core/errors.js';
import { buildModel, IO } from '../../core/ir/build.js';
import type { ModelGraph } from '../../core/ir/ir.js';
import { localRopeSpec, ropeTables } from '../../core/ir/rope.js';
import { lowerToOnnx, type TapOutputs, type TapSpec, type WeightInput } from '../onnx/lower.js';
import { Sampler, type SamplingOptions } from '../../core/sampling.js';
import { emptyTapResult, mergeTapOutputs, type TapResult } from './taps.js';

export type { TapSpec } from '../onnx/lower.js';
export type { TapResult } from './taps.js';

export interface EngineOptions {
  /** onnxruntime intra-op threads (default: onnxruntime's choice, all cores). */
  threads?: number;
  /** Build the tap session now for these taps (otherwise it is built on the first tap()). */
  taps?: TapSpec[];
  /**
   * Let idle onnxruntime worker threads spin (default false). Spinning wins on an idle machine
   * but on a shared one it steals the cores the other threads need: decode ran 2.5× slower here.
   */
  spin?: boolean;
  /**
   * HF weights lowered as graph inputs: every forward feeds them, the stored values unless
   * `forward`'s swap replaces some. One session then runs many variants of the model (sensitivity
   * measurements: one expert quantized per run) without rebuilding.
   */
  swappable?: readonly string[];
  /** Routers take a bias per run added to their logits (forward's swap.routerBias): force-routing an expert. */
  routerBias?: boolean;
  /** The IR to run (a pass's transformed graph over `source`); default: the one built from the source's spec. */
  graph?: ModelGraph;
}

/** Per-run replacements (see EngineOptions.swappable / routerBias). */
export interface Swap {
  /** HF name → values in the HF layout ([out, in] for linears). */
  weights?: ReadonlyMap<string, Float32Array>;
  /** Layer → a bias [E] added to its router logits. */
  routerBias?: ReadonlyMap<number, Float32Array>;
}

export interface GenerateOptions extends SamplingOptions {
  maxTokens: number;
  /** Stop after emitting one of these ids (default: the model's eos_token_id). The stop id is included. */
  stopIds?: readonly number[];
  /** Each id as soon as it is chosen (streaming). */
  onToken?: (id: number) => void;
}

interface Compiled {
  session: ort.InferenceSession;
  taps: TapOutputs[];
  weightInputs: WeightInput[];
  routerBiases: { input: string; logits: string; numExperts: number }[];
  /** Runs in progress, and whether the session was evicted (released when the last run ends). */
  busy: number;
  evicted: boolean;
}

interface ForwardResult {
  logits: Float32Array;
  present: ort.Tensor[];
  outputs: ort.InferenceSession.ReturnType;
}

const tapKey = (taps: TapSpec[]) => JSON.stringify(taps.map((t) => [t.kind, t.layers ?? null, Boolean(t.full), Boolean(t.sums), t.top ?? 0]));
const MAIN = tapKey([]);

export class Engine {
  readonly spec: ArchSpec;
  readonly graph: ModelGraph;
  private sessions = new Map<string, Promise<Compiled>>();
  private closed = false;
  /** The stored values of swappable weights, as fed (transposed where the graph wants it). */
  private readonly stored = new Map<string, Promise<ort.Tensor>>();

  private constructor(
    readonly source: ModelSource,
    private readonly opts: EngineOptions,
  ) {
    this.spec = source.spec;
    this.graph = opts.graph ?? buildModel(source.spec);
  }

  static async open(source: ModelSource, opts: EngineOptions = {}): Promise<Engine> {
    const engine = new Engine(source, opts);
    await engine.compiled(opts.taps ?? []);
    return engine;
  }

  private compiled(taps: TapSpec[]): Promise<Compiled> {
    if (this.closed) throw new LlmcError('engine is closed', this.source.description);
    const key = tapKey(taps);
    let c = this.sessions.get(key);
    if (!c) {
      c = (async () => {
        const lowered = await lowerToOnnx(this.source, {
          taps,
          graph: this.graph,
          weightInputs: this.opts.swappable ? new Set(this.opts.swappable) : undefined,
          routerBias: this.opts.routerBias,
        });
        const options: ort.InferenceSession.SessionOptions = { graphOptimizationLevel: 'all', executionMode: 'sequential', interOpNumThreads: 1 };
        // A tap session runs a few times (a profile is one or a few batches): onnxruntime's arena and
        // memory pattern, which pay off over many runs, made its first two runs ≈ 3× its later ones
        // (first-touch allocation: the arena grows, then the pattern's block); without them every run
        // costs about what a warm one did (docs/outliers.md). Allocation only: the results are bit-identical.
        if (key !== MAIN) Object.assign(options, { enableCpuMemArena: false, enableMemPattern: false });
        if (this.opts.threads) options.intraOpNumThreads = this.opts.threads;
        if (!this.opts.spin) options.extra = { session: { intra_op: { allow_spinning: '0' } } };
        const session = await ort.InferenceSession.create(lowered.bytes, options);
        return { session, taps: lowered.taps, weightInputs: lowered.weightInputs, routerBiases: lowered.routerBiases, busy: 0, evicted: false };
      })();
      // Each session holds every weight: keep the plain one and only the latest tap set.
      if (key !== MAIN) {
        for (const [k, old] of this.sessions) {
          if (k === MAIN) continue;
          this.sessions.delete(k);
          void old.then((o) => {
            o.evicted = true;
            if (o.busy === 0) return o.session.release();
          }, () => undefined);
        }
      }
      this.sessions.set(key, c);
      c.catch(() => this.sessions.delete(key));
    }
    return c;
  }

  checkIds(ids: number[]): void {
    for (const id of ids) {
      if (!Number.isInteger(id) || id < 0 || id >= this.spec.vocabSize) {
        throw new UsageError(`token id ${id} is outside the vocabulary [0, ${this.spec.vocabSize})`);
      }
    }
  }

  /**
   * One forward pass over `rows` (B sequences of equal length T) after `past` (P cached
   * positions), returning logits [B, N, V] at `positions` (indices into the T new tokens).
   */
  async forward(rows: number[][], past: ort.Tensor[] | null, positions: number[], taps: TapSpec[] = [], swap: Swap = {}): Promise<ForwardResult> {
    const B = rows.length;
    const T = rows[0].length;
    if (T === 0) throw new UsageError('empty token sequence');
    if (rows.some((r) => r.length !== T)) throw new UsageError('a batch needs sequences of equal length');
    for (const r of rows) this.checkIds(r);
    const compiled = await this.compiled(taps);
    const spec = this.spec;
    const P = past ? past[0].dims[2] : 0;
    const { cos, sin } = ropeTables(spec, P, T);
    const half = spec.headDim / 2;
    const feeds: Record<string, ort.Tensor> = {
      [IO.ids]: new ort.Tensor('int64', BigInt64Array.from(rows.flat(), (x) => BigInt(x)), [B, T]),
      [IO.cos]: new ort.Tensor('float32', cos, [T, half]),
      [IO.sin]: new ort.Tensor('float32', sin, [T, half]),
      [IO.logitPositions]: new ort.Tensor('int64', BigInt64Array.from(positions, (x) => BigInt(x)), [positions.length]),
    };
    const local = localRopeSpec(spec);
    if (local) {
      const t = ropeTables(local, P, T);
      feeds[IO.cosLocal] = new ort.Tensor('float32', t.cos, [T, half]);
      feeds[IO.sinLocal] = new ort.Tensor('float32', t.sin, [T, half]);
    }
    for (let l = 0; l < spec.numLayers; l++) {
      // A level graph's layers may keep different KV heads (levelGraph sizes each past input).
      const kvDim = this.graph.inputs.find((i) => i.name === IO.pastKey(l))?.dims[1];
      const kv = typeof kvDim === 'number' ? kvDim : spec.numKvHeads;
      const empty = () => new ort.Tensor('float32', new Float32Array(0), [B, kv, 0, spec.headDim]);
      feeds[IO.pastKey(l)] = past ? past[2 * l] : empty();
      feeds[IO.pastValue(l)] = past ? past[2 * l + 1] : empty();
    }
    for (const w of compiled.weightInputs) {
      const given = swap.weights?.get(w.source);
      feeds[w.name] = given ? weightTensor(w, given, this.source.description) : await this.storedWeight(w);
    }
    for (const r of compiled.routerBiases) {
      const layer = Number(/^l(\d+)\./.exec(r.logits)![1]);
      feeds[r.input] = new ort.Tensor('float32', swap.routerBias?.get(layer) ?? new Float32Array(r.numExperts), [r.numExperts]);
    }
    compiled.busy++;
    let outputs: ort.InferenceSession.ReturnType;
    try {
      outputs = await compiled.session.run(feeds);
    } finally {
      if (--compiled.busy === 0 && compiled.evicted) await compiled.session.release();
    }
    const present: ort.Tensor[] = [];
    for (let l = 0; l < spec.numLayers; l++) present.push(outputs[IO.presentKey(l)], outputs[IO.presentValue(l)]);
    return { logits: outputs[IO.logits].data as Float32Array, present, outputs };
  }

  private storedWeight(w: WeightInput): Promise<ort.Tensor> {
    let t = this.stored.get(w.name);
    if (!t) {
      t = this.source.readF32(w.source).then((v) => weightTensor(w, v, this.source.description));
      this.stored.set(w.name, t);
    }
    return t;
  }

  /** A generation session with its own KV cache; `batch` rows advance together. */
  session(batch = 1): EngineSession {
    return new EngineSession(this, batch);
  }

  /** Logits [T, V] (row-major) at every position of `ids`, no cache. */
  async logits(ids: number[]): Promise<Float32Array> {
    const r = await this.forward([ids], null, ids.map((_, i) => i));
    return r.logits;
  }

  /** Generated ids (without the prompt); stops after maxTokens or a stop id (which is included). */
  async generate(promptIds: number[], opts: GenerateOptions): Promise<number[]> {
    const sampler = new Sampler(opts);
    const stop = new Set(opts.stopIds ?? this.spec.eosTokenIds);
    const s = this.session();
    const out: number[] = [];
    if (opts.maxTokens <= 0) return out;
    let logits = await s.prefill(promptIds);
    for (;;) {
      const next = sampler.next(logits);
      out.push(next);
      opts.onToken?.(next);
      if (out.length >= opts.maxTokens || stop.has(next)) return out;
      logits = await s.decode(next);
    }
  }

  /** exp(mean negative log-likelihood) of every token after the first, over all sequences. */
  async perplexity(sequences: number[][]): Promise<number> {
    let nll = 0;
    let count = 0;
    const V = this.spec.vocabSize;
    for (const seq of sequences) {
      if (seq.length < 2) continue;
      const logits = await this.logits(seq);
      for (let t = 0; t + 1 < seq.length; t++) {
        const row = logits.subarray(t * V, (t + 1) * V);
        let max = -Infinity;
        for (let i = 0; i < V; i++) if (row[i] > max) max = row[i];
        let sum = 0;
        for (let i = 0; i < V; i++) sum += Math.exp(row[i] - max);
        nll += max + Math.log(sum) - row[seq[t + 1]];
        count++;
      }
    }
    if (count === 0) throw new UsageError('perplexity needs at least one sequence of 2 or more tokens');
    return Math.exp(nll / count);
  }

  /**
   * Profiling observations over a batch of sequences: reductions run inside the graph over the
   * tokens of each group of equal-length sequences and are merged here (max of maxes, sums).
   */
  async tap(ids: number[][], spec: TapSpec | TapSpec[]): Promise<TapResult> {
    const specs = Array.isArray(spec) ? spec : [spec];
    const { taps } = await this.compiled(specs);
    const result = emptyTapResult();
    const byLength = new Map<number, number[]>();
    ids.forEach((seq, i) => {
      if (seq.length > 0) byLength.set(seq.length, [...(byLength.get(seq.length) ?? []), i]);
    });
    for (const [len, group] of byLength) {
      // Bounded batches keep full-activation taps and attention scores modest.
      const per = Math.max(1, Math.floor(4096 / len));
      for (let i = 0; i < group.length; i += per) {
        const sequences = group.slice(i, i + per);
        const r = await this.forward(sequences.map((j) => ids[j]), null, [len - 1], specs);
        mergeTapOutputs(result, taps, r.outputs, sequences.length, len);
        result.batches.push({ sequences, length: len });
      }
    }
    return result;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const c of this.sessions.values()) {
      try {
        await (await c).session.release();
      } catch {
        // a session that failed to build has nothing to release
      }
    }
    this.sessions.clear();
  }
}

/** A weight input's feed from HF-layout values. */
function weightTensor(w: WeightInput, values: Float32Array, where: string): ort.Tensor {
  const n = w.dims.reduce((a, d) => a * d, 1);
  if (values.length !== n) throw new LlmcError(`swapped weight "${w.source}" has ${values.length} values, the model needs ${n}`, where);
  let data = values;
  if (w.transpose) {
    const [rows, cols] = w.transpose;
    data = new Float32Array(n);
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) data[c * rows + r] = values[r * cols + c];
  }
  return new ort.Tensor('float32', data, w.dims);
}

export class EngineSession {
  private past: ort.Tensor[] | null = null;
  private pos = 0;

  constructor(
    private readonly engine: Engine,
    readonly batch: number,
  ) {}

  /** Tokens processed so far. */
  get length(): number {
    return this.pos;
  }

  /** Feed B rows of equal length; returns each row's logits at its last position. */
  async step(rows: number[][]): Promise<Float32Array[]> {
    if (rows.length !== this.batch) throw new UsageError(`this session advances ${this.batch} rows at a time, got ${rows.length}`);
    const T = rows[0]?.length ?? 0;
    const r = await this.engine.forward(rows, this.past, [T - 1]);
    this.past = r.present;
    this.pos += T;
    const V = this.engine.spec.vocabSize;
    return rows.map((_, b) => r.logits.slice(b * V, (b + 1) * V));
  }

  /** Feed the prompt (or more tokens after earlier ones); logits of the last position. */
  async prefill(ids: number[]): Promise<Float32Array> {
    return (await this.step([ids]))[0];
  }

  async decode(id: number): Promise<Float32Array> {
    return (await this.step([[id]]))[0];
  }
}
