/**
 * A runnable model of the TS runtime: the one model definition (the IR, src/core/ir) of an
 * artifact's architecture, executed by the interpreter over the artifact's weights. Llama / Mistral /
 * Qwen2 (dense) and Mixtral / Qwen2-MoE, GQA, biases, every RoPE scaling, tied embeddings, a KV
 * cache, and elastic widths (prefixes of heads / FFN neurons). Browser-safe: no Node imports.
 */
import type { ArchSpec } from '../../core/arch/spec.js';
import { buildModel } from '../../core/ir/build.js';
import type { ModelGraph } from '../../core/ir/ir.js';
import { Interpreter, KvCache, type LayerWidth, type WeightTable } from './interpreter.js';
import type { ArtifactManifest } from './format.js';
import type { LevelAdapters } from './lowrank.js';
import { Sampler, type SamplingOptions } from './sampling.js';
import { ELASTIC_LEVELS, levelWidths, selectLevel, type Level } from '../../core/records/elastic.js';
import { findRecord } from '../../core/records/types.js';
import { LlmcError } from '../../core/errors.js';

export { KvCache, type LayerWidth, type WeightTable, type LevelAdapters };

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
}

export interface GenerateOptions extends SamplingOptions {
  /** Tokens to generate (default 32). */
  maxTokens?: number;
  /** Stop after emitting one of these (default: the model's EOS ids; [] = never stop early). */
  stopTokens?: number[];
  widths?: LayerWidth[];
  adapters?: LevelAdapters;
}

export class Model {
  readonly graph: ModelGraph;
  private readonly interpreter: Interpreter;

  constructor(
    readonly spec: ArchSpec,
    table: WeightTable,
    /** The artifact's manifest when loaded from one (pass records such as elastic levels live in it). */
    readonly manifest?: ArtifactManifest,
    /** Each level's adapters (by level id), read on first use; `merged`: the one level whose adapters are in the weights. */
    private readonly levelAdapters: { get(id: string): LevelAdapters | undefined; merged?: { id: string; widths: LayerWidth[] } } = { get: () => undefined },
  ) {
    this.graph = buildModel(spec);
    this.interpreter = new Interpreter(spec, this.graph, table);
  }

  newCache(): KvCache {
    return this.interpreter.newCache();
  }

  /**
   * Logits for `ids` appended after what `cache` holds (a fresh cache when omitted): [T, V] row-major,
   * or [V] with `lastOnly`. The cache is extended by the T positions.
   */
  forward(ids: ArrayLike<number>, cache: KvCache = this.newCache(), opts: ForwardOptions = {}): Float32Array {
    const T = ids.length;
    const positions = opts.lastOnly ? [T - 1] : Array.from({ length: T }, (_, t) => t);
    const merged = this.levelAdapters.merged;
    if (merged && JSON.stringify(opts.widths) !== JSON.stringify(merged.widths)) {
      throw new LlmcError(`this model was loaded with level ${merged.id}'s adapters merged into its weights; it runs only that level's widths`);
    }
    return this.interpreter.run(ids, cache, positions, opts.widths, opts.adapters);
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
    const cache = this.newCache();
    const fopts = { widths: options.widths, adapters: options.adapters, lastOnly: true };
    let logits = this.forward(ids, cache, fopts);
    for (let n = 0; n < max; n++) {
      const next = sampler.next(logits);
      yield next;
      if (stop.has(next) || n + 1 === max) return;
      logits = this.forward([next], cache, fopts);
    }
  }
}
