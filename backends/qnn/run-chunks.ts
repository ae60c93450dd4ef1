/**
 * `llmc run --chunk` on a qnn artifact compiled with chunk-partition: the prompt's chunks prefilled
 * through the artifact's static graphs and its chunk-index attention graphs (./chunks.ts) on
 * onnxruntime, task by task in the record's dispatch order (tabulated per N, the online heuristic
 * beyond), by the one chunked-prefill driver (src/core/chunks/drive.ts). Chunk i's tasks work on chunk i's own values; the only state chunks share is the per-layer
 * KV buffer, written when a chunk's qkv group ends (its RoPE'd keys and its values at slots
 * [i·c, (i+1)·c)) and read by attention i over slots [0, i·c) — what the record's Eq. 2 edges order.
 * So every order the record allows computes the same numbers. The last chunk's pad slots are masked
 * and never leave the prefill: decoding continues (QnnRunner.forwardChunk) from a cache of the P
 * prompt positions.
 */
import path from 'node:path';
import '../../src/exec/engine/ort-env.js'; // before onnxruntime-node loads
import * as ort from 'onnxruntime-node';
import { LlmcError, UsageError } from '../../src/core/errors.js';
import type { Artifact, ArtifactRunner, RunOptions } from '../../src/core/pipeline/target.js';
import { CHUNK_SCHEDULE, findRecord, MANIFEST_FILE, requireChunkSchedule } from '../../src/core/records/index.js';
import { chunkPlanOf, type ChunkSchedule } from '../../src/core/records/chunk-schedule.js';
import { chunkOrderFor } from '../../src/core/chunks/dispatch.js';
import { ChunkedPrompt, runChunksAsync } from '../../src/core/chunks/drive.js';
import { appendChunkRows, leadingSlots } from '../../src/exec/engine/chunks.js';
import { openArtifactSession } from '../../src/exec/engine/session-options.js';
import { Sampler } from '../../src/core/sampling.js';
import { chunkAttentionFile, type ChunkGroup, type QnnChunked } from './chunks.js';
import type { Kv, QnnRunner } from './run.js';

/** The prompt's tasks as [chunk i, record subgraph j], in the order they run. */
export type ChunkOrder = readonly (readonly [number, number])[];

export class QnnChunkPrefill {
  private readonly sessions = new Map<string, Promise<ort.InferenceSession>>();

  constructor(
    readonly runner: QnnRunner,
    readonly rec: ChunkSchedule,
    readonly chunked: QnnChunked,
    private readonly dir: string,
    private readonly threads?: number,
  ) {
    if (chunked.format !== 'llmc-qnn-chunked/1') throw new LlmcError(`graph/subgraphs.json: chunked is not llmc-qnn-chunked/1`, dir);
    if (chunked.groups.length !== rec.subgraphs.length || chunked.groups.some((g, j) => g.id !== rec.subgraphs[j].id)) {
      throw new LlmcError('graph/subgraphs.json does not group the chunk-schedule record\'s subgraphs', dir);
    }
  }

  get c(): number {
    return this.chunked.c;
  }

  private session(file: string): Promise<ort.InferenceSession> {
    let s = this.sessions.get(file);
    if (!s) {
      s = openArtifactSession(path.join(this.dir, file), this.threads ?? 1, 'the graph', { exactInt8: true });
      this.sessions.set(file, s);
    }
    return s;
  }

  /** The record's dispatch order for a prompt of P tokens (tabulated, or the heuristic online). */
  scheduleFor(P: number): { order: ChunkOrder; tabulated: boolean } {
    const plan = chunkPlanOf(this.rec, this.c);
    const N = Math.ceil(P / this.c);
    const { order, tabulated } = chunkOrderFor(this.rec, plan, N);
    const M = this.rec.subgraphs.length;
    return { order: Array.from(order, (t) => [Math.floor(t / M), t % M] as const), tabulated };
  }

  /**
   * Prefill `ids` in `order` (default: the record's): the KV cache of the P prompt positions and the
   * logits of every position [P, V] ('all'), or of the last one [V] ('last': the head graph runs on the
   * last chunk only). Any order that respects the record's edges gives the same result.
   */
  async prefill(ids: number[], order?: ChunkOrder, want: 'all' | 'last' = 'all'): Promise<{ logits: Float32Array; kv: Kv }> {
    const { c } = this;
    const spec = this.runner.spec;
    const P = ids.length;
    if (P < 1) throw new UsageError('the prompt is empty');
    if (P > spec.maxPositions) throw new UsageError(`the prompt (${P} tokens) is longer than the model's context (${spec.maxPositions} tokens)`);
    const prompt = new ChunkedPrompt(ids, c);
    const N = prompt.N;
    if (N > this.chunked.attentionGraphs) throw new LlmcError(`the artifact has attention graphs for ${this.chunked.attentionGraphs} chunks of ${c}, the prompt needs ${N}`, this.dir);
    const tasks = order ?? this.scheduleFor(P).order;
    const H = spec.numKvHeads;
    const d = spec.headDim;
    const T = N * c;
    const layers = this.chunked.attention;
    // Per layer the KV buffer [1, H, N·c, d] of every chunk's slots.
    const bufK = layers.map(() => new Float32Array(H * T * d));
    const bufV = layers.map(() => new Float32Array(H * T * d));
    const big = (xs: number[]) => BigInt64Array.from(xs, (x) => BigInt(x));
    const values = Array.from({ length: N }, (_, i) => {
      const m = new Map<string, ort.Tensor>();
      m.set('input_ids', new ort.Tensor('int64', big(prompt.chunk(i)), [1, c]));
      m.set('position_ids', new ort.Tensor('int64', big(prompt.positions(i, spec.maxPositions)), [1, c]));
      return { m, n: prompt.real(i) };
    });
    const M = this.rec.subgraphs.length;
    const task = async (i: number, j: number) => {
      // A chunk whose logits nobody asked for skips the head (nothing reads it).
      if (want === 'last' && this.rec.subgraphs[j].kind === 'head' && i !== N - 1) return;
      const g: ChunkGroup = this.chunked.groups[j];
      const { m, n } = values[i];
      if (g.attentionLayer !== undefined) await this.attention(g.attentionLayer, i, m, bufK, bufV, P);
      for (const id of g.run) {
        const rope = this.chunked.ropes.find((r) => r.id === id);
        if (!rope) {
          await this.runner.runSubgraph(this.runner.entry(id), m, n);
          continue;
        }
        const io = (v: string) => ({ name: v });
        await this.runner.runSubgraph({ id, device: 'CPU', inputs: [...rope.inputs, 'position_ids'].map(io), outputs: rope.outputs.map(io) }, m, n, await this.session(rope.file));
        // KV append: the chunk's RoPE'd keys and its values into slots [i·c, (i+1)·c).
        const a = layers.findIndex((x) => x.layer === rope.layer);
        const [, k, v] = layers[a].inputs;
        appendChunkRows(bufK[a], m.get(k)!.data as Float32Array, i, c, H, d, T);
        appendChunkRows(bufV[a], m.get(v)!.data as Float32Array, i, c, H, d, T);
      }
    };
    const flat = Array.from(tasks, ([i, j]) => i * M + j);
    await runChunksAsync({ task }, flat, N, M, { edges: this.rec.edges, ids: this.rec.subgraphs.map((s) => s.id), where: this.dir });
    const V = spec.vocabSize;
    const last = values[N - 1];
    const logits = want === 'last' ? (last.m.get('logits')!.data as Float32Array).slice((last.n - 1) * V, last.n * V) : new Float32Array(P * V);
    if (want === 'all') values.forEach(({ m, n }, i) => logits.set((m.get('logits')!.data as Float32Array).subarray(0, n * V), i * c * V));
    const cache = (buf: Float32Array) => new ort.Tensor('float32', leadingSlots(buf, H, T, P, d), [1, H, P, d]);
    return { logits, kv: { keys: bufK.map(cache), values: bufV.map(cache), length: P } };
  }

  /** Attention of chunk i at layer `layer`: its graph of index i over the buffer's first i·c slots. */
  private async attention(layer: number, i: number, m: Map<string, ort.Tensor>, bufK: Float32Array[], bufV: Float32Array[], P: number): Promise<void> {
    const { c } = this;
    const spec = this.runner.spec;
    const H = spec.numKvHeads;
    const d = spec.headDim;
    const a = this.chunked.attention.findIndex((x) => x.layer === layer);
    const entry = this.chunked.attention[a];
    const T = bufK[a].length / (H * d);
    const past = i * c;
    m.set(`past_key_values.${layer}.key`, new ort.Tensor('float32', leadingSlots(bufK[a], H, T, past, d), [1, H, past, d]));
    m.set(`past_key_values.${layer}.value`, new ort.Tensor('float32', leadingSlots(bufV[a], H, T, past, d), [1, H, past, d]));
    const mask = new BigInt64Array(past + c).fill(1n);
    mask.fill(0n, Math.min(P, past + c)); // the last chunk's pads
    m.set('attention_mask', new ort.Tensor('int64', mask, [1, past + c]));
    const io = (v: string) => ({ name: v });
    const inputs = [...entry.inputs, 'attention_mask', `past_key_values.${layer}.key`, `past_key_values.${layer}.value`].map(io);
    await this.runner.runSubgraph({ id: entry.id, device: 'CPU', inputs, outputs: [io(entry.outputs[0])] }, m, c, await this.session(chunkAttentionFile(c, layer, i)));
  }

  async close(): Promise<void> {
    for (const s of this.sessions.values()) await (await s).release();
  }
}

/** The qnn runner with chunked prefill in the record's order (`--chunk c`; `auto` is the one length a qnn artifact ships). */
export async function chunkedQnnRunner(a: Artifact, opts: RunOptions, runner: QnnRunner, base: ArtifactRunner, chunked: QnnChunked | undefined): Promise<ArtifactRunner> {
  const rec = requireChunkSchedule(findRecord(a.manifest.passes, CHUNK_SCHEDULE, path.join(a.dir, MANIFEST_FILE)), a.path);
  if (!chunked) throw new LlmcError('graph/subgraphs.json has no chunk graphs (compile with --passes outliers,chunk-partition)', a.dir);
  if (opts.chunk !== 'auto') chunkPlanOf(rec, opts.chunk!, a.path);
  const prefill = new QnnChunkPrefill(runner, rec, chunked, a.dir, opts.threads);
  const notes = [...base.notes, `chunked prefill: chunk length ${chunked.c}, the static graphs shared by every chunk and an attention graph per chunk index, in the record's order (${rec.costs.source})`];
  return {
    ...base,
    notes,
    logits: async (ids) => (await prefill.prefill(ids)).logits,
    async generate(promptIds, o) {
      const V = runner.spec.vocabSize;
      for (const id of promptIds) if (!Number.isInteger(id) || id < 0 || id >= V) throw new UsageError(`token id ${id} is outside the vocabulary [0, ${V})`);
      const out: number[] = [];
      if (o.maxTokens <= 0) return out;
      const { order, tabulated } = prefill.scheduleFor(promptIds.length);
      notes.push(`prompt of ${promptIds.length} tokens: ${Math.ceil(promptIds.length / chunked.c)} chunk(s) of ${chunked.c}, ${tabulated ? 'tabulated' : 'online heuristic'} schedule`);
      const first = await prefill.prefill(promptIds, order, 'last');
      const sampler = new Sampler(o);
      const stop = new Set(o.stopIds ?? runner.spec.eosTokenIds);
      let logits = first.logits.subarray(first.logits.length - V);
      let kv = first.kv;
      for (;;) {
        const next = sampler.next(logits);
        out.push(next);
        o.onToken?.(next);
        if (out.length >= o.maxTokens || stop.has(next) || kv.length >= runner.spec.maxPositions) return out;
        const r = await runner.forwardChunk([next], kv);
        logits = r.logits;
        kv = r.kv;
      }
    },
    async close() {
      await prefill.close();
      await base.close();
    },
  };
}
