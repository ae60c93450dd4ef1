/**
 * The qnn target under the chunk-partition pass (record chunk-schedule/1, mllm-NPU §3.2–3.4): the
 * chunk length comes from the record, the static subgraphs (embed, the QDQ qkv/mlp graphs, shadow
 * nodes, head, and per layer a RoPE graph with positions as an input) are the artifact's graphs,
 * written once and shared by every chunk, and the chunk-dependent part — KV append and attention over
 * the (i+1)·c keys of chunks 0..i with chunk i's mask — is one weightless graph per layer and chunk
 * index with static shapes (past i·c positions):
 *
 *   cpu/l<ℓ>_rope.onnx                 static: RoPE(q, k), positions as an input (the KV a chunk appends)
 *   cpu/chunk<c>/l<ℓ>_attn.<i>.onnx    dynamic: KV append + attention of chunk index i
 *
 * The record's subgraphs (embed, l<ℓ>.qkv, l<ℓ>.attention, l<ℓ>.mlp, l<ℓ>.shadow, head) are groups of
 * the qnn subgraphs (`groups`); RoPE runs at the end of its layer's qkv group, so chunk i's attention
 * reads only what the qkv groups of chunks k ≤ i wrote — the record's Eq. 2 edges hold as they are.
 * graph/subgraphs.json gets the groups and the schedule table per N, graph/deps.json the record's
 * edges; the memory the sharing saves is computed from the written files' sizes.
 */
import { chunkMemoryRows, type ChunkMemoryRow } from '../../src/core/chunks/memory.js';
import { LlmcError } from '../../src/core/errors.js';
import type { ModelGraph, Op, V } from '../../src/core/ir/ir.js';
import type { Subgraph } from '../../src/core/ir/subgraphs.js';
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import type { ChunkSchedule, ChunkSubgraphRecord } from '../../src/core/records/chunk-schedule.js';
import type { Progress } from '../../src/core/util/progress.js';
import { lowerAttention, lowerRope } from './lower.js';
import type { Output } from './output.js';
import type { Chunk } from './plan.js';

/** The chunk length a qnn artifact takes from the record; `qnn.chunk` must agree. Exit 2 otherwise. */
export function recordChunkLength(rec: ChunkSchedule, qnnChunk: number | null, where: string): number {
  const lengths = rec.chunks.map((p) => p.c);
  if (lengths.length > 1) {
    throw new LlmcError(`chunk-partition chose chunk lengths ${lengths.join(', ')}; a qnn artifact's static NPU graphs have one shape: give one length (--opt chunk-partition.chunk=${lengths[0]} or chunk-partition.lengths=1)`, where, 2);
  }
  if (qnnChunk !== null && qnnChunk !== lengths[0]) {
    throw new LlmcError(`qnn.chunk=${qnnChunk} conflicts with the chunk length ${lengths[0]} of chunk-partition: drop qnn.chunk (the record decides) or give chunk-partition.chunk=${qnnChunk}`, where, 2);
  }
  return lengths[0];
}

export const ropeId = (layer: number) => `l${layer}_rope`;
export const ropeFile = (layer: number) => `cpu/${ropeId(layer)}.onnx`;
export const chunkAttentionFile = (c: number, layer: number, i: number) => `cpu/chunk${c}/l${layer}_attn.${i}.onnx`;

/** A graph the chunked prefill runs besides the artifact's subgraphs. */
export interface ChunkGraphEntry {
  id: string;
  layer: number;
  inputs: V[];
  outputs: V[];
}

/** One record subgraph as the qnn subgraphs (and chunk graphs) that make it, in order. */
export interface ChunkGroup {
  /** The record's id and index j. */
  id: string;
  j: number;
  kind: ChunkSubgraphRecord['kind'];
  device: string;
  /** qnn subgraph ids of graph/subgraphs.json, and `l<ℓ>_rope` (qkv groups). */
  run: string[];
  /** attention groups: the layer whose chunk-index graphs run. */
  attentionLayer?: number;
}

/** `chunked` in graph/subgraphs.json. */
export interface QnnChunked {
  format: 'llmc-qnn-chunked/1';
  c: number;
  /** Attention graphs per layer for chunk indices 0..attentionGraphs−1 (prompts up to attentionGraphs·c tokens). */
  attentionGraphs: number;
  attentionFile: string;
  groups: ChunkGroup[];
  ropes: (ChunkGraphEntry & { file: string })[];
  attention: ChunkGraphEntry[];
  /** Per N = 1..nMax the record's dispatch order as [chunk i, group j]. */
  schedules: { N: number; makespanMs: number; inOrderMs: number; lowerBoundMs: number; order: [number, number][] }[];
}

/** targetInfo.chunks[] (the shape the cuda target writes and the report reads). */
export interface QnnChunkInfo {
  c: number;
  attentionGraphs: number;
  memory: { staticGraphBytes: number; attentionGraphBytes: number[]; rows: ChunkMemoryRow[] };
}

/** The qnn subgraphs of each record subgraph (same layers, same split; RoPE moves to the end of qkv). */
export function chunkGroups(rec: ChunkSchedule, subgraphs: readonly Subgraph[]): ChunkGroup[] {
  const groupOf = (s: Subgraph): string => {
    if (s.kind === 'embed' || s.kind === 'head') return s.kind;
    if (s.kind === 'attention') return `l${s.layer}.attention`;
    return s.j === 3 * s.layer ? `l${s.layer}.qkv` : `l${s.layer}.mlp`;
  };
  const runs = new Map(rec.subgraphs.map((r) => [r.id, [] as string[]]));
  for (const s of subgraphs) {
    const g = groupOf(s);
    const run = runs.get(g);
    if (!run) throw new LlmcError(`internal: the chunk-schedule record has no subgraph ${g} for qnn subgraph ${s.id}`);
    if (s.kind !== 'attention') run.push(s.id);
    if (g.endsWith('.qkv') && s === subgraphs.filter((x) => x.layer === s.layer && x.j === s.j).at(-1)) run.push(ropeId(s.layer));
  }
  return rec.subgraphs.map((r) => ({
    id: r.id,
    j: r.j,
    kind: r.kind,
    device: r.device,
    run: runs.get(r.id)!,
    ...(r.kind === 'attention' ? { attentionLayer: r.layer! } : {}),
  }));
}

/** Split a qnn attention subgraph into its RoPE graph (static) and its attention (dynamic). */
function splitAttention(sg: Subgraph): { rope: Subgraph; attention: Subgraph } {
  const ropes = sg.ops.filter((o): o is Extract<Op, { op: 'rope' }> => o.op === 'rope');
  const att = sg.ops.find((o): o is Extract<Op, { op: 'attention' }> => o.op === 'attention')!;
  if (ropes.length + 1 !== sg.ops.length) throw new LlmcError(`internal: ${sg.id} holds ops other than RoPE and attention`);
  const ropeOuts = ropes.map((r) => r.out);
  return {
    rope: { ...sg, id: ropeId(sg.layer), kind: 'static', share: 'static', ops: ropes, inputs: ropes.map((r) => r.x), outputs: ropeOuts },
    attention: { ...sg, ops: [att], inputs: [att.q, att.k, att.v], outputs: [att.out] },
  };
}

/**
 * Write the RoPE graphs and the chunk-index attention graphs, and compute what the sharing saves
 * from the files' sizes: W = every static graph (weights inline) once, A_i = the attention graphs of
 * index i over all layers; naive(N) = N·W + Σ_{i<N} A_i, shared(N) = W + Σ_{i<N} A_i.
 */
export async function writeQnnChunkGraphs(
  rec: ChunkSchedule,
  source: ModelSource,
  graph: ModelGraph,
  subgraphs: readonly Subgraph[],
  staticFiles: readonly string[],
  chunk: Chunk,
  channels: ReadonlyMap<V, number>,
  out: Output,
  progress: Progress,
): Promise<{ files: string[]; chunked: QnnChunked; info: QnnChunkInfo }> {
  const plan = rec.chunks.find((p) => p.c === chunk.c)!;
  const count = Math.ceil(graph.spec.maxPositions / chunk.c);
  const attentionSgs = subgraphs.filter((s) => s.kind === 'attention').map(splitAttention);
  const files: string[] = [];
  const ropes: QnnChunked['ropes'] = [];
  const attentionGraphBytes = new Array<number>(count).fill(0);
  progress.start(`qnn: chunk graphs for c = ${chunk.c}`, attentionSgs.length * (count + 1));
  for (const { rope, attention } of attentionSgs) {
    const file = ropeFile(rope.layer);
    await out.onnx(file, lowerRope(source, graph, rope, chunk, channels));
    files.push(file);
    ropes.push({ id: rope.id, layer: rope.layer, inputs: rope.inputs, outputs: rope.outputs, file });
    progress.tick();
    for (let i = 0; i < count; i++) {
      const f = chunkAttentionFile(chunk.c, attention.layer, i);
      await out.onnx(f, lowerAttention(source, graph, attention, chunk, channels, i * chunk.c));
      attentionGraphBytes[i] += await out.size(f);
      files.push(f);
      progress.tick();
    }
  }
  progress.done();
  let staticGraphBytes = 0;
  for (const f of [...staticFiles, ...ropes.map((r) => r.file)]) staticGraphBytes += await out.size(f);
  // The graphs carry their weights inline: W is the static graphs' bytes.
  const rows = chunkMemoryRows(staticGraphBytes, attentionGraphBytes, Math.min(count, plan.nMax));
  const M = rec.subgraphs.length;
  const chunked: QnnChunked = {
    format: 'llmc-qnn-chunked/1',
    c: chunk.c,
    attentionGraphs: count,
    attentionFile: `cpu/chunk${chunk.c}/l{layer}_attn.{i}.onnx`,
    groups: chunkGroups(rec, subgraphs),
    ropes,
    attention: attentionSgs.map(({ attention: a }) => ({ id: a.id, layer: a.layer, inputs: a.inputs, outputs: a.outputs })),
    schedules: plan.schedules.map((r) => ({
      N: r.N,
      makespanMs: r.makespan.improved,
      inOrderMs: r.makespan.inOrder,
      lowerBoundMs: r.lowerBound,
      order: r.order.map((t): [number, number] => [Math.floor(t / M), t % M]),
    })),
  };
  return { files, chunked, info: { c: chunk.c, attentionGraphs: count, memory: { staticGraphBytes, attentionGraphBytes, rows } } };
}

/** graph/deps.json's `chunks` part: the record's template edges (Eq. 3 intra, Eq. 2 cross) over its groups. */
export function chunkDeps(rec: ChunkSchedule): { subgraphs: string[]; edges: { from: string; to: string; kind: 'intra' | 'cross' }[] } {
  return {
    subgraphs: rec.subgraphs.map((s) => s.id),
    edges: rec.edges.map((e) => ({ from: rec.subgraphs[e.from].id, to: rec.subgraphs[e.to].id, kind: e.cross ? 'cross' : 'intra' })),
  };
}
