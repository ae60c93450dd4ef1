/**
 * Chunk graphs: the chunk-sharing partition (src/core/chunks/partition.ts) lowered to ONNX with static
 * shapes for chunk length c (batch 1), by the one lowering of every op (./lower.ts lowerOp) in the
 * exported decoders' mode (./decoder.ts: formats per tensor, float32 islands in fp16 graphs):
 *   embed.onnx         input_ids [1, c] → h [1, c, D]
 *   l<ℓ>.qkv.onnx      h [1, c, D], position_ids [1, c] → q, k, v (roped) [1, c, ·]
 *   l<ℓ>.mlp.onnx      attention output, residual → h' [1, c, D]
 *   head.onnx          h [1, c, D] → logits [1, c, V] (float32)
 *   attention.<i>.onnx q [1, c, H·hd], k, v [1, c, Hkv·hd], past_key / past_value [1, Hkv, i·c, hd]
 *                      → attn [1, c, H·hd], present_key / present_value [1, Hkv, (i+1)·c, hd]
 * Static graphs are built once per chunk length and run for every chunk; the attention graph of chunk
 * index i holds no weights and serves every layer (their attention has the same shapes; the mask is
 * chunk i's causal mask, from the shapes). Weights keep their decoder names, so the graphs refer to
 * the same bytes of one external data file as onnx/model.onnx.
 */
import { IO } from '../../core/ir/build.js';
import { expandMoe } from '../../core/ir/expand.js';
import type { ModelGraph, Op } from '../../core/ir/ir.js';
import type { ModelSource } from '../../core/checkpoint/source.js';
import { CHUNK_IO, chunkIo, type Partition, type Subgraph, type TensorShape } from '../../core/chunks/partition.js';
import { LLMC_VERSION } from '../../core/version.js';
import { FormattedWeights, formatLabel, gatherRope, opsetFor, type DecoderFormats } from './decoder.js';
import { causalMask, lowerOps, OnnxGraphBuilder, splicedBytes, splicedModel, valueInfo, type LoweringMode, type PendingTensor } from './lower.js';
import { attr, DT_FLOAT, DT_FLOAT16, DT_INT64, type GraphProto, type ModelProto } from './proto.js';

/** The names the shared attention graphs give their activations (the layer's own are mapped onto them). */
export const ATTENTION_IO = { q: 'q', k: 'k', v: 'v', out: 'attn' } as const;

export interface ChunkGraph {
  /** File stem: embed, l<ℓ>.qkv, l<ℓ>.mlp, head, attention.<i>. */
  name: string;
  /** The subgraph it runs (attention graphs: layer 0's, for every layer). */
  subgraph: Subgraph;
  /** Chunk index of a dynamic graph; null for static ones. */
  i: number | null;
  model: ModelProto;
  graph: GraphProto;
  tensors: PendingTensor[];
  opset: number;
  inputs: TensorShape[];
  outputs: TensorShape[];
}

export interface ChunkGraphSet {
  c: number;
  graphs: ChunkGraph[];
  /** HF tensor → format label of the weights the graphs read. */
  formats: Record<string, string>;
}

const rename = (s: TensorShape, name: string): TensorShape => ({ ...s, name });

/**
 * Every chunk graph for chunk length `c`: the static ones once, attention graphs for chunk indices
 * 0..nMax−1.
 */
export function lowerChunkGraphs(source: ModelSource, graph: ModelGraph, partition: Partition, formats: DecoderFormats, c: number, nMax: number): ChunkGraphSet {
  const weights = new FormattedWeights(formats);
  const compute = formats.compute === 'fp16' ? DT_FLOAT16 : DT_FLOAT;
  const allOps = graph.ops.flatMap((op) => (op.op === 'moe' ? expandMoe(op) : [op]));
  const opset = opsetFor(allOps, formats);
  const mode: LoweringMode = { opset, compute, weights, ropeAxis: 2, mask: (b, presentK, q, window) => causalMask(b, presentK, q, window), allPositions: true };
  const spec = graph.spec;
  const out: ChunkGraph[] = [];

  const finish = (name: string, s: Subgraph, i: number | null, b: OnnxGraphBuilder, io: { inputs: TensorShape[]; outputs: TensorShape[] }): ChunkGraph => {
    const vi = (t: TensorShape) => valueInfo(t.name, t.dtype === 'int64' ? DT_INT64 : t.name === CHUNK_IO.logits ? DT_FLOAT : compute, t.dims);
    const domains = b.nodes.some((n) => n.domain === 'com.microsoft') ? [{ domain: 'com.microsoft', version: 1 }] : [];
    return {
      name,
      subgraph: s,
      i,
      model: {
        irVersion: opset >= 21 ? 10 : 8,
        opsetImport: [{ domain: '', version: opset }, ...domains],
        producerName: 'llmc',
        producerVersion: LLMC_VERSION,
        docString: `${spec.modelType} chunk graph ${name} (c = ${c}, ${formats.compute} compute) from ${source.description}`,
      },
      graph: { name: `llmc-chunk-${name}`, node: b.nodes, initializer: b.consts, input: io.inputs.map(vi), output: io.outputs.map(vi) },
      tensors: [...b.weights.values()],
      opset,
      inputs: io.inputs,
      outputs: io.outputs,
    };
  };

  for (const s of partition.subgraphs) {
    if (s.share !== 'static' || s.ops[0] === s.ops[1]) continue;
    const b = new OnnxGraphBuilder(source, mode);
    const io = chunkIo(graph, s, c);
    if (s.feeds.includes(IO.cos)) gatherRope(b, spec, CHUNK_IO.positionIds);
    if (s.feeds.includes(IO.cosLocal)) gatherRope(b, spec, CHUNK_IO.positionIds, 'local');
    let ops: Op[] = graph.ops.slice(s.ops[0], s.ops[1]).flatMap((op) => (op.op === 'moe' ? expandMoe(op) : [op]));
    // logits leave as float32 (an fp16 graph casts its lm_head output).
    if (compute !== DT_FLOAT) ops = ops.map((op) => ('out' in op && op.out === IO.logits ? ({ ...op, out: 'logits_fp16' } as Op) : op));
    lowerOps(b, graph, ops);
    if (compute !== DT_FLOAT && s.kind === 'head') b.node('Cast', ['logits_fp16'], [attr('to', DT_FLOAT)], CHUNK_IO.logits);
    out.push(finish(s.id, s, null, b, io));
  }

  // One attention graph per chunk index, shared by the layers.
  const s = partition.subgraphs.find((x) => x.kind === 'attention')!;
  const att = graph.ops[s.ops[0]] as Extract<Op, { op: 'attention' }>;
  const shared: Op = { ...att, q: ATTENTION_IO.q, k: ATTENTION_IO.k, v: ATTENTION_IO.v, out: ATTENTION_IO.out, pastK: CHUNK_IO.pastKey, pastV: CHUNK_IO.pastValue, presentK: CHUNK_IO.presentKey, presentV: CHUNK_IO.presentValue };
  for (let i = 0; i < nMax; i++) {
    const b = new OnnxGraphBuilder(source, mode);
    lowerOps(b, graph, [shared]);
    const io = chunkIo(graph, s, c, i);
    const names = [att.q, att.k, att.v];
    const short = [ATTENTION_IO.q, ATTENTION_IO.k, ATTENTION_IO.v];
    const inputs = io.inputs.map((t) => (names.includes(t.name) ? rename(t, short[names.indexOf(t.name)]) : t));
    const outputs = io.outputs.map((t) => (t.name === att.out ? rename(t, ATTENTION_IO.out) : t));
    out.push(finish(`attention.${i}`, s, i, b, { inputs, outputs }));
  }
  return { c, graphs: out, formats: Object.fromEntries([...weights.used].map(([k, f]) => [k, formatLabel(f)])) };
}

/** A chunk graph as one .onnx buffer (weights inline), for onnxruntime in memory. */
export async function inlineBytes(g: Pick<ChunkGraph, 'model' | 'graph' | 'tensors'>): Promise<Uint8Array> {
  return splicedBytes(splicedModel({ ...g.model }, g.graph, g.tensors), g.tensors);
}
