/**
 * The cuda target's chunk graphs (record chunk-schedule/1): per chunk length c, onnx/chunk<c>.*.onnx:
 * the static subgraphs once (embed, l<ℓ>.qkv, l<ℓ>.mlp, head: weights by reference into
 * onnx/model.onnx_data, the bytes onnx/model.onnx uses) and one weightless attention graph per chunk
 * index up to the context (src/exec/onnx/chunks.ts). The manifest's targetInfo.chunks lists every graph
 * with its static I/O and what the sharing saves against one graph per chunk, from the written sizes.
 */
import path from 'node:path';
import { LlmcError } from '../../src/core/errors.js';
import { chunkMemoryRows, type ChunkMemoryRow } from '../../src/core/chunks/memory.js';
import { partitionGraph } from '../../src/core/chunks/partition.js';
import type { CompileUnit } from '../../src/core/pipeline/unit.js';
import type { ChunkSchedule } from '../../src/core/records/chunk-schedule.js';
import type { Progress } from '../../src/core/util/progress.js';
import { lowerChunkGraphs } from '../../src/exec/onnx/chunks.js';
import type { DecoderFormats } from '../../src/exec/onnx/decoder.js';
import { writeOnnx, type ExternalData, type ExternalRef } from '../../src/exec/onnx/external.js';

/**
 * A chunk graph's file: next to onnx/model.onnx, because onnxruntime refuses external data outside a
 * graph's own folder and the weights are model.onnx_data's.
 */
export const chunkGraphFile = (c: number, name: string) => `onnx/chunk${c}.${name}.onnx`;

export interface ChunkGraphInfo {
  name: string;
  file: string;
  kind: string;
  layer: number | null;
  /** Chunk index (attention graphs); null for static graphs. */
  i: number | null;
  inputs: { name: string; dtype: string; dims: number[] }[];
  outputs: { name: string; dtype: string; dims: number[] }[];
  graphBytes: number;
  /** Weight bytes it reads in the shared data file, and bytes it added there (none when they are the full graph's). */
  sharedBytes: number;
  ownBytes: number;
}

/** Bytes of graphs + weights (chunkMemoryRows), and SPEC §1.6's model with activation buffers (the record's A_stat, A_dyn) and W = the static graphs' real bytes. */
export interface CudaChunkMemoryRow extends ChunkMemoryRow {
  modelNaive: number;
  modelShared: number;
  modelSaved: number;
}

export interface ChunkSetInfo {
  c: number;
  /** Attention graphs for chunk indices 0..attentionGraphs−1 (prompts up to attentionGraphs·c tokens). */
  attentionGraphs: number;
  graphs: ChunkGraphInfo[];
  memory: { staticGraphBytes: number; staticWeightBytes: number; attentionGraphBytes: number[]; rows: CudaChunkMemoryRow[] };
}

const sameBytes = (a: Uint8Array, b: Uint8Array) => a.length === b.length && Buffer.from(a.buffer, a.byteOffset, a.length).equals(Buffer.from(b.buffer, b.byteOffset, b.length));

export async function writeChunkGraphs(
  unit: CompileUnit,
  rec: ChunkSchedule,
  formats: DecoderFormats,
  outDir: string,
  data: ExternalData,
  fullRefs: ReadonlyMap<string, { ref: ExternalRef; dataType: number }>,
  progress: Progress,
): Promise<{ files: string[]; info: ChunkSetInfo[] }> {
  const partition = partitionGraph(unit.graph, { shadowLayers: rec.shadowLayers });
  const same = partition.subgraphs.length === rec.subgraphs.length && partition.subgraphs.every((s, j) => s.id === rec.subgraphs[j].id && s.ops.join() === rec.subgraphs[j].ops.join());
  if (!same) throw new LlmcError('internal: the chunk-schedule record does not describe the unit\'s graph');
  const files: string[] = [];
  const info: ChunkSetInfo[] = [];
  const context = unit.source.spec.maxPositions;
  for (const plan of rec.chunks) {
    const count = Math.ceil(context / plan.c);
    const set = lowerChunkGraphs(unit.source, unit.graph, partition, formats, plan.c, count);
    const graphs: ChunkGraphInfo[] = [];
    const refsUsed = new Map<number, number>(); // offset → length, the static graphs' weights (each once)
    progress.start(`cuda: chunk graphs for c = ${plan.c}`, set.graphs.length);
    for (const g of set.graphs) {
      let sharedBytes = 0;
      const reuse = async (t: { name: string; dataType: number }, bytes: Uint8Array): Promise<ExternalRef | null> => {
        const f = fullRefs.get(t.name);
        if (!f || f.dataType !== t.dataType || f.ref.length !== bytes.length || !sameBytes(await data.read(f.ref), bytes)) return null;
        sharedBytes += bytes.length;
        if (g.i === null) refsUsed.set(f.ref.offset, f.ref.length);
        return f.ref;
      };
      const file = chunkGraphFile(plan.c, g.name);
      const w = await writeOnnx(path.join(outDir, file), g, data, { minExternalBytes: 0, reuse });
      if (g.i === null) for (const r of w.refs.values()) refsUsed.set(r.offset, r.length);
      files.push(file);
      graphs.push({ name: g.name, file, kind: g.subgraph.kind, layer: g.i === null ? g.subgraph.layer : null, i: g.i, inputs: g.inputs, outputs: g.outputs, graphBytes: w.graphBytes, sharedBytes, ownBytes: w.appendedBytes });
      progress.tick();
    }
    progress.done();
    const statics = graphs.filter((g) => g.i === null);
    const staticGraphBytes = statics.reduce((a, g) => a + g.graphBytes, 0);
    const staticWeightBytes = [...refsUsed.values()].reduce((a, b) => a + b, 0);
    const attentionGraphBytes = graphs.filter((g) => g.i !== null).map((g) => g.graphBytes);
    const W = staticGraphBytes + staticWeightBytes;
    const n = Math.min(count, plan.nMax);
    const model = chunkMemoryRows(W + plan.memory.staticActivationBytes, attentionGraphBytes.slice(0, n).map((b, i) => b + plan.memory.dynamicActivationBytes[i]), n);
    const rows: CudaChunkMemoryRow[] = chunkMemoryRows(W, attentionGraphBytes, n).map((r, k) => ({ ...r, modelNaive: model[k].naive, modelShared: model[k].shared, modelSaved: model[k].saved }));
    info.push({ c: plan.c, attentionGraphs: count, graphs, memory: { staticGraphBytes, staticWeightBytes, attentionGraphBytes, rows } });
  }
  return { files, info };
}
