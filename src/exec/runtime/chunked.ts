/**
 * Chunked prefill on the TS runtime (mllm-NPU §3.2–3.4): the prompt is cut into chunks of c tokens
 * (the last one padded), and the subgraphs of every chunk (record chunk-schedule/1: embed, per layer
 * qkv / attention / mlp, head) run in a dispatch order where a chunk's subgraph may run before an
 * earlier chunk's later ones. Each chunk runs on its own interpreter (its own activations) over the
 * model's weights, on top of the ordinary forward pass: chunk i is a call at cache slot i·c
 * (`Interpreter.stage`), driven by the one chunked-prefill driver (core/chunks/drive.ts). The KV append happens when a chunk's qkv subgraph ends (its keys and values
 * go to slots i·c..), so the attention of chunk i reads the keys of chunks 0..i as soon as their qkv
 * subgraphs ran — the dependencies of Eq. 2, not the order chunks arrived in. Pad tokens sit after the
 * prompt: causal masking keeps them out of every real row, and the cache's length ends at the prompt,
 * so decoding overwrites their slots. Browser-safe.
 */
import { LlmcError } from '../../core/errors.js';
import type { Op } from '../../core/ir/ir.js';
import { ChunkedPrompt, runChunks } from '../../core/chunks/drive.js';
import { partitionGraph, type SubgraphKind } from '../../core/chunks/partition.js';
import { chunkPlanOf, type ChunkPlanRecord, type ChunkSchedule } from '../../core/records/chunk-schedule.js';
import { chunkOrderFor, pickChunkPlan } from '../../core/chunks/dispatch.js';
import type { Interpreter, KvCache, StagedCall } from './interpreter.js';
import type { Model } from './model.js';

export interface ChunkedPlan {
  c: number;
  /** The chunk's subgraphs in order: their ops graph.ops[from, to) tile the graph. */
  subgraphs: readonly { kind: SubgraphKind; layer: number | null; ops: readonly [number, number] | number[] }[];
  /** The order the N chunks' tasks run in: task t = i·M + j (chunk i, subgraph j). */
  order(N: number): ArrayLike<number>;
}

/** What to return: the logits of every prompt position [P, V], or of the last one [V]. */
export type PrefillLogits = 'all' | 'last';

export class ChunkedPrefill {
  private readonly pool: Interpreter[] = [];
  /** Per subgraph j: the cache layer and the values its keys / values are (qkv subgraphs), else null. */
  private readonly kvOf: ({ layer: number; k: string; v: string } | null)[];

  constructor(
    readonly model: Model,
    readonly plan: ChunkedPlan,
  ) {
    const ops = model.graph.ops;
    let at = 0;
    for (const s of plan.subgraphs) {
      if (s.ops[0] !== at || s.ops[1] < s.ops[0]) throw new LlmcError(`chunk plan: subgraph ops [${s.ops[0]}, ${s.ops[1]}) do not follow op ${at} (the plan is of another graph)`);
      at = s.ops[1];
    }
    if (at !== ops.length) throw new LlmcError(`chunk plan covers ${at} ops, the model has ${ops.length}`);
    if (!Number.isInteger(plan.c) || plan.c < 1) throw new LlmcError(`chunk length must be a positive integer, got ${plan.c}`);
    this.kvOf = plan.subgraphs.map((s) => {
      if (s.kind !== 'qkv') return null;
      const att = ops.find((op): op is Extract<Op, { op: 'attention' }> => op.op === 'attention' && op.layer === s.layer);
      if (!att) throw new LlmcError(`chunk plan: layer ${s.layer} has no attention op`);
      return { layer: att.layer, k: att.k, v: att.v };
    });
  }

  /**
   * Prefill `ids` after what `cache` holds; the cache then holds them (and no pad token). Logits of
   * every prompt position ([P, V] row-major) or of the last ([V]). `order`: the plan's order for these
   * N chunks when the caller already has it.
   */
  prefill(ids: ArrayLike<number>, cache: KvCache = this.model.newCache(), logits: PrefillLogits = 'last', order?: ArrayLike<number>): Float32Array {
    const { c, subgraphs } = this.plan;
    const prompt = new ChunkedPrompt(ids, c);
    const { P, N } = prompt;
    const M = subgraphs.length;
    const base = cache.length;
    const V = this.model.spec.vocabSize;
    // Room for every chunk before any runs: growing later would keep only `length` slots.
    cache.reserve(base + N * c);
    while (this.pool.length < N) this.pool.push(this.model.newInterpreter());
    const calls: StagedCall[] = [];
    const real = (i: number) => prompt.real(i);
    for (let i = 0; i < N; i++) {
      const chunk = prompt.chunk(i);
      const rows = logits === 'all' ? Array.from({ length: real(i) }, (_, t) => t) : i === N - 1 ? [real(i) - 1] : [];
      calls.push(this.pool[i].stage(chunk, cache, rows, { pos0: base + i * c }));
    }
    const task = (i: number, j: number) => {
      const s = subgraphs[j];
      // A chunk whose logits nobody asked for skips the head (nothing reads it).
      if (s.kind === 'head' && logits === 'last' && i !== N - 1) return;
      calls[i].runOps(s.ops[0], s.ops[1]);
      const kv = this.kvOf[j];
      if (kv) {
        // The KV append: chunk i's keys and values in slots base + i·c.. (rows past the prompt are pads).
        cache.store(kv.layer, base + i * c, calls[i].value(kv.k), calls[i].value(kv.v), c);
      }
    };
    runChunks({ task }, order ?? this.plan.order(N), N, M);
    cache.length = base + P;
    if (logits === 'last') return calls[N - 1].logits();
    const out = new Float32Array(P * V);
    calls.forEach((call, i) => out.set(call.logits(), i * c * V));
    return out;
  }
}

/** A prompt's chunk plan (RecordChunks.planFor). */
export interface PlannedPrompt {
  plan: ChunkPlanRecord;
  /** Chunks of the prompt. */
  N: number;
  /** The N chunks' tasks in dispatch order. */
  order: ArrayLike<number>;
  /** The order came from the record's table (else the heuristic, online). */
  tabulated: boolean;
  predictedMs: number;
}

/**
 * The runtime's side of record chunk-schedule/1: a prefill per chunk length (the record's subgraphs
 * must tile the model's graph), each prompt on the asked length or, with 'auto', the one the record
 * predicts fastest for it; the tasks in the tabulated order (the heuristic online past nMax).
 */
export class RecordChunks {
  private readonly prefills = new Map<number, ChunkedPrefill>();

  constructor(
    readonly model: Model,
    readonly rec: ChunkSchedule,
    readonly chunk: number | 'auto',
    where?: string,
  ) {
    if (chunk !== 'auto') chunkPlanOf(rec, chunk, where);
    // The record's cut of the IR must be the model's.
    const ours = partitionGraph(model.graph, { shadowLayers: rec.shadowLayers }).subgraphs;
    const same = ours.length === rec.subgraphs.length && ours.every((s, j) => s.id === rec.subgraphs[j].id && s.ops[0] === rec.subgraphs[j].ops[0] && s.ops[1] === rec.subgraphs[j].ops[1]);
    if (!same) throw new LlmcError("the chunk plan's subgraphs are not this model's (record chunk-schedule/1 was made for another graph)", where);
  }

  /** The plan a prompt of P tokens runs on, its order, and how that order was found. */
  planFor(P: number): PlannedPrompt {
    const plan = this.chunk === 'auto' ? pickChunkPlan(this.rec, P) : chunkPlanOf(this.rec, this.chunk);
    const N = Math.ceil(P / plan.c);
    const o = chunkOrderFor(this.rec, plan, N);
    return { plan, N, order: o.order, tabulated: o.tabulated, predictedMs: o.makespan };
  }

  /** `planned`: planFor(ids.length) when the caller already has it (past the record's table the order is searched online). */
  prefill(ids: ArrayLike<number>, cache: KvCache, logits: PrefillLogits = 'last', planned: PlannedPrompt = this.planFor(ids.length)): Float32Array {
    const { plan } = planned;
    let p = this.prefills.get(plan.c);
    if (!p) {
      const rec = this.rec;
      p = new ChunkedPrefill(this.model, { c: plan.c, subgraphs: rec.subgraphs, order: (N) => chunkOrderFor(rec, plan, N).order });
      this.prefills.set(plan.c, p);
    }
    return p.prefill(ids, cache, logits, planned.order);
  }
}
