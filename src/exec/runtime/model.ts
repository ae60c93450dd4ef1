/**
 * A runnable model of the TS runtime: the one model definition (the IR, src/core/ir) of an
 * artifact's architecture, executed by the interpreter over the artifact's weights. Llama / Mistral /
 * Qwen2 (dense) and Mixtral / Qwen2-MoE, GQA, biases, every RoPE scaling, tied embeddings, a KV
 * cache, and elastic widths (prefixes of heads / FFN neurons). Browser-safe: no Node imports.
 */
import type { ArchSpec } from '../../core/arch/spec.js';
import { buildModel } from '../../core/ir/build.js';
import type { ModelGraph } from '../../core/ir/ir.js';
import { skipLayers } from '../../core/ir/skip.js';
import { withTreeMasks } from '../../core/ir/mask.js';
import { Interpreter, KvCache, type LayerWidth, type TreeAttention, type WeightTable } from './interpreter.js';
import type { ArtifactManifest } from './format.js';
import type { LevelAdapters } from './lowrank.js';
import type { ExpertStore } from './offload.js';
import { dequantRow, type Weight } from './kernels.js';
import { Sampler, type SamplingOptions } from '../../core/sampling.js';
import { ELASTIC_LEVELS, levelWidths, selectLevel, type Level } from '../../core/records/elastic.js';
import { findRecord } from '../../core/records/types.js';
import { LlmcError } from '../../core/errors.js';
import type { KvType } from '../../core/pipeline/target.js';

export { Interpreter, KvCache, type LayerWidth, type TreeAttention, type WeightTable, type LevelAdapters };

/** An elastic level ready to run: pass it to forward / generate (`{ ...model.level('0.5') }`). */
export interface RunnableLevel {
  level: Level;
  widths: LayerWidth[];
  /** The level's recovery adapters (absent: it has none, or they are merged into the weights). */
  adapters?: LevelAdapters;
}

export interface ForwardOptions {
  /**
   * One entry per layer; omitted = the full model. An elastic level's layers (record
   * `elastic-prefix/1`, see levelWidths) have this shape. A KV cache only holds the KV groups that
   * were computed: switching to wider attention mid-sequence needs a fresh cache (or a re-prefill).
   */
  widths?: LayerWidth[];
  /** The level's low-rank adapters, added to its linears (see `level()`). */
  adapters?: LevelAdapters;
  /** Return only the last position's logits ([V] instead of [T, V]). */
  lastOnly?: boolean;
  /** Logits at these rows (indices into ids), overriding lastOnly. */
  logitRows?: number[];
  /** The new tokens are a tree: which cached keys each sees and its position (speculative decoding). */
  tree?: TreeAttention;
  /** Each row with the one-token kernels (values independent of the batch: see RunOptions). */
  rowwise?: boolean;
  /** Write the logits here and return it (see RunOptions.into): a decode loop that reuses one buffer allocates nothing per token. */
  into?: Float32Array;
}

export interface GenerateOptions extends SamplingOptions {
  /** Tokens to generate (default 32). */
  maxTokens?: number;
  /** Stop after emitting one of these (default: the model's EOS ids; [] = never stop early). */
  stopTokens?: readonly number[];
  widths?: LayerWidth[];
  adapters?: LevelAdapters;
  /** Fills the cache with the prompt and returns its last position's logits [V] (default: one forward; chunked prefill passes its own). */
  prefill?: (ids: ArrayLike<number>, cache: KvCache) => Float32Array;
  /** What the KV cache keeps keys and values in (default 'f32'; llama.cpp's --cache-type-k/v). */
  kvType?: KvType;
}

/** A WeightTable over a lookup of weights; a vector is the weight's rows dequantized. */
export function weightTable(has: (name: string) => boolean, weight: (name: string) => Weight, jsOnly = false): WeightTable {
  return {
    jsOnly,
    has,
    weight,
    vector: (name) => {
      const w = weight(name);
      const out = new Float32Array(w.rows * w.cols);
      for (let r = 0; r < w.rows; r++) dequantRow(w, r, out, r * w.cols);
      return out;
    },
  };
}

export class Model {
  readonly graph: ModelGraph;
  private readonly interpreter: Interpreter;
  /** Routed experts read on demand (LoadOptions.experts), or null when every weight is resident. */
  readonly experts: ExpertStore | null;
  /** Threads its matmuls run on (LoadOptions.threads; 1 where no matmul is large enough to split). */
  threads = 1;
  private closers: (() => Promise<void>)[] = [];

  constructor(
    readonly spec: ArchSpec,
    private readonly table: WeightTable,
    /** The artifact's manifest when loaded from one (pass records such as elastic levels live in it). */
    readonly manifest?: ArtifactManifest,
    /** Each level's adapters (by level id), read on first use; `merged`: the one level whose adapters are in the weights. */
    private readonly levelAdapters: { get(id: string): LevelAdapters | undefined; merged?: { id: string; widths: LayerWidth[] } } = { get: () => undefined },
    /** Another graph over the same weights (default: the architecture's). */
    graph?: ModelGraph,
  ) {
    // Attention takes the speculative trees a call may feed (a call without one is causal as the model).
    this.graph = withTreeMasks(graph ?? buildModel(spec));
    this.interpreter = new Interpreter(spec, this.graph, table);
    this.experts = table.experts ?? null;
  }

  /** Run `fn` when the model is closed (e.g. the weights file an expert cache reads from). */
  onClose(fn: () => Promise<void>): void {
    this.closers.push(fn);
  }

  async close(): Promise<void> {
    for (const fn of this.closers.splice(0)) await fn();
  }

  /** The same weights without some decoder layers (a self-speculative draft); shares the weights. */
  withoutLayers(layers: readonly number[]): Model {
    return new Model(this.spec, this.table, this.manifest, this.levelAdapters, skipLayers(buildModel(this.spec), layers));
  }

  /** Another graph of this model over the same weights (a graph transform: other attention masks, …). */
  withGraph(graph: ModelGraph): Model {
    return new Model(this.spec, this.table, this.manifest, this.levelAdapters, graph);
  }

  /** An empty KV cache holding keys and values as `type` (default float32; see KvCache). */
  newCache(type?: KvType): KvCache {
    return this.interpreter.newCache(type);
  }

  /** Another interpreter of this model's graph over the same weights, with its own activation buffers (chunked prefill runs one per chunk). */
  newInterpreter(): Interpreter {
    return new Interpreter(this.spec, this.graph, this.table);
  }

  /**
   * Logits for `ids` appended after what `cache` holds (a fresh cache when omitted): [T, V] row-major,
   * or [V] with `lastOnly`. The cache is extended by the T positions.
   */
  forward(ids: ArrayLike<number>, cache: KvCache = this.newCache(), opts: ForwardOptions = {}): Float32Array {
    const T = ids.length;
    const positions = opts.logitRows ?? (opts.lastOnly ? [T - 1] : Array.from({ length: T }, (_, t) => t));
    this.checkMerged(opts.widths);
    return this.interpreter.run(ids, cache, positions, opts.widths, { tree: opts.tree, rowwise: opts.rowwise, adapters: opts.adapters, into: opts.into });
  }

  /** `forward` for any model, offloaded experts included (they are read as the layers need them). */
  async forwardAsync(ids: ArrayLike<number>, cache: KvCache = this.newCache(), opts: ForwardOptions = {}): Promise<Float32Array> {
    const T = ids.length;
    const positions = opts.lastOnly ? [T - 1] : Array.from({ length: T }, (_, t) => t);
    this.checkMerged(opts.widths);
    return this.interpreter.runAsync(ids, cache, positions, opts.widths, { adapters: opts.adapters });
  }

  /** A model loaded with a level's adapters merged runs only that level's widths. */
  private checkMerged(widths: LayerWidth[] | undefined): void {
    const merged = this.levelAdapters.merged;
    if (merged && JSON.stringify(widths) !== JSON.stringify(merged.widths)) {
      throw new LlmcError(`this model was loaded with level ${merged.id}'s adapters merged into its weights; it runs only that level's widths`);
    }
  }

  /**
   * An elastic level of the artifact (record `elastic-prefix`): by id (`L3`) or size fraction (`0.5`),
   * with its widths and its recovery adapters. Switching level moves no weights.
   */
  level(request: string, where?: string): RunnableLevel {
    const levels = findRecord(this.manifest?.passes, ELASTIC_LEVELS, where)?.levels ?? null;
    const level = selectLevel(levels, request, where);
    const merged = this.levelAdapters.merged;
    if (merged !== undefined && merged.id !== level.id) throw new LlmcError(`this model was loaded with level ${merged.id}'s adapters merged into its weights; it runs only that level`, where);
    const adapters = merged === undefined ? this.levelAdapters.get(level.id) : undefined;
    return { level, widths: levelWidths(level), ...(adapters ? { adapters } : {}) };
  }

  /** Generate up to `maxTokens` tokens after `ids`, yielding each as it is chosen. */
  async *generate(ids: ArrayLike<number>, options: GenerateOptions = {}): AsyncGenerator<number, void, undefined> {
    const max = options.maxTokens ?? 32;
    const stop = new Set(options.stopTokens ?? this.spec.eosTokenIds);
    const sampler = new Sampler(options);
    const cache = this.newCache(options.kvType);
    const fopts: ForwardOptions = { widths: options.widths, adapters: options.adapters, lastOnly: true };
    const step = (x: ArrayLike<number>) => (this.experts ? this.forwardAsync(x, cache, fopts) : this.forward(x, cache, fopts));
    let logits = options.prefill ? options.prefill(ids, cache) : await step(ids);
    // Every decode step writes one buffer: the sampler is done with it before the next step.
    fopts.into = new Float32Array(logits.length);
    for (let n = 0; n < max; n++) {
      const next = sampler.next(logits);
      yield next;
      if (stop.has(next) || n + 1 === max) return;
      logits = await step([next]);
    }
  }
}
