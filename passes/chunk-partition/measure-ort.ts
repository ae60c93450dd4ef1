/**
 * Subgraph costs on onnxruntime (CPU): the chunk graphs of one chunk length lowered in memory (fp32,
 * weights inline), every subgraph of `probes` chunks run in order and timed (./measure.ts fits them).
 */
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import type { ModelGraph } from '../../src/core/ir/ir.js';
import { SUBGRAPH_KINDS, type Partition, type Subgraph } from '../../src/core/chunks/partition.js';
import { OrtChunkPrefill } from '../../src/exec/engine/chunks.js';
import { inlineBytes, lowerChunkGraphs } from '../../src/exec/onnx/chunks.js';
import type { ChunkTimes } from './measure.js';

const sessions = new Map<string, Promise<OrtChunkPrefill>>();

export async function timeOrt(source: ModelSource, graph: ModelGraph, partition: Partition, c: number, probes: number, timed: (s: Subgraph) => boolean = () => true): Promise<ChunkTimes> {
  const key = `${source.description}|${c}|${probes}`;
  let open = sessions.get(key);
  if (!open) {
    const set = lowerChunkGraphs(source, graph, partition, { compute: 'fp32', format: () => ({ kind: 'fp32' }) }, c, probes);
    const spec = source.spec;
    open = OrtChunkPrefill.open(c, partition.subgraphs, probes, async (name) => inlineBytes(set.graphs.find((g) => g.name === name)!), { kvHeads: spec.numKvHeads, headDim: spec.headDim, vocab: spec.vocabSize, maxPositions: spec.maxPositions });
    sessions.clear(); // one chunk length at a time
    sessions.set(key, open);
  }
  const runner = await open;
  const M = partition.subgraphs.length;
  const sums = Object.fromEntries(SUBGRAPH_KINDS.map((k) => [k, new Array<number>(probes).fill(0)])) as ChunkTimes;
  const count = (k: string) => partition.subgraphs.filter((s) => s.kind === k && timed(s)).length || 1;
  const ids = Array.from({ length: probes * c }, (_, t) => (t * 37 + 11) % source.spec.vocabSize);
  await runner.prefill(ids, Int32Array.from({ length: probes * M }, (_, t) => t), (i, j, ms) => {
    if (timed(partition.subgraphs[j])) sums[partition.subgraphs[j].kind][i] += ms;
  });
  for (const k of SUBGRAPH_KINDS) sums[k] = sums[k].map((x) => x / count(k));
  return sums;
}
