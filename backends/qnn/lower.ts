/**
 * The qnn target's subgraphs as ONNX, through the one lowering of the IR (src/exec/onnx/lower.ts
 * lowerOp) in a mode whose linears are QDQ patterns:
 *
 *   x ─QuantizeLinear(s_x)─DequantizeLinear─┐
 *                  W_q int8 [in, out] ─DequantizeLinear(s_w)─ MatMul ─ <y>.mm ─QuantizeLinear(s_y)─DequantizeLinear─ y (+ bias)
 *
 * (symmetric: zero points 0; 16-bit activations need opset 21's int16 Q/DQ). RMSNorm is lowerOp's
 * decomposition (Pow, ReduceMean, Add, Sqrt, Div, Mul), SiLU x·Sigmoid(x). Static subgraphs take and
 * give [1, a, b, C] views of a chunk; tensor names are the IR's values, `<x>.q`/`<x>.dq` for a
 * quantized activation, the Hugging Face weight name for W_q and `<name>.scale` for scales. A linear
 * with shadow execution leaves its graph before its bias: its shadow node adds the bias after the
 * correction. The attention subgraph (RoPE, KV append, attention) is a float graph with the KV cache
 * as I/O and an explicit mask (src/exec/onnx/decoder.ts's conventions), embed and head float graphs.
 */
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import { IO } from '../../src/core/ir/build.js';
import type { ModelGraph, Op, V } from '../../src/core/ir/ir.js';
import type { Subgraph } from '../../src/core/ir/subgraphs.js';
import { opOutputs } from '../../src/core/ir/values.js';
import { localRopeSpec, positionTables } from '../../src/core/ir/rope.js';
import { LlmcError } from '../../src/core/errors.js';
import type { ActBits, QuantizedWeight } from '../../src/core/quant/w8a8.js';
import { LLMC_VERSION } from '../../src/core/version.js';
import { DECODER_IO, paddedCausalMask } from '../../src/exec/onnx/decoder.js';
import type { OnnxParts } from '../../src/exec/onnx/external.js';
import { FLOAT32_WEIGHTS, lowerOps, OnnxGraphBuilder, OPSET, valueInfo, type LinearOp, type LoweringMode, type WeightLowering } from '../../src/exec/onnx/lower.js';
import { attr, DT_FLOAT, DT_INT64, DT_INT8, type TensorProto } from '../../src/exec/onnx/proto.js';
import type { Chunk, QLinear } from './plan.js';

const DT_INT16 = 5;

/** One quantized tensor of a graph, for the encodings JSON. */
export interface Encoding {
  /** The float tensor quantized (activations) or the weight initializer (params). */
  name: string;
  kind: 'activation' | 'param';
  bits: ActBits;
  scale: number;
}

export interface LoweredGraph extends OnnxParts {
  encodings: Encoding[];
  inputs: { name: string; shape: (number | string)[]; dtype: string }[];
  outputs: { name: string; shape: (number | string)[]; dtype: string }[];
}

const view = (chunk: Chunk, C: number) => [1, chunk.a, chunk.b, C];

/** Linears as QDQ patterns; W_q comes from `quantized` when the file is written. */
class QdqWeights implements WeightLowering {
  readonly encodings: Encoding[] = [];
  private zp = new Map<ActBits, string>();
  /** Q/DQ pairs per float tensor (a tensor quantized at two scales gets numbered names). */
  private pairs = new Map<string, number>();

  constructor(
    private readonly linears: ReadonlyMap<string, QLinear>,
    private readonly quantized: (weight: string) => Promise<QuantizedWeight>,
  ) {}

  private scale(b: OnnxGraphBuilder, name: string, s: number): string {
    const t: TensorProto = { name: `${name}.scale`, dataType: DT_FLOAT, dims: [], floatData: [s] };
    b.consts.push(t);
    return `${name}.scale`;
  }

  private zeroPoint(b: OnnxGraphBuilder, bits: ActBits): string {
    const seen = this.zp.get(bits);
    if (seen) return seen;
    const name = bits === 8 ? 'zero_point.int8' : 'zero_point.int16';
    b.consts.push({ name, dataType: bits === 8 ? DT_INT8 : DT_INT16, dims: [], int32Data: [0] });
    this.zp.set(bits, name);
    return name;
  }

  /** QuantizeLinear → DequantizeLinear of float tensor `x` (one pair per tensor and scale). */
  qdq(b: OnnxGraphBuilder, x: string, s: number, bits: ActBits, out?: string): string {
    return b.once(`qdq:${x}:${s}:${bits}`, () => {
      const n = this.pairs.get(x) ?? 0;
      this.pairs.set(x, n + 1);
      const tag = n === 0 ? '' : String(n);
      const sc = this.scale(b, `${x}${tag}`, s);
      const zp = this.zeroPoint(b, bits);
      this.encodings.push({ name: x, kind: 'activation', bits, scale: s });
      const q = b.node('QuantizeLinear', [x, sc, zp], [], `${x}.q${tag}`);
      return b.node('DequantizeLinear', [q, sc, zp], [], out ?? `${x}.dq${tag}`);
    });
  }

  linear(b: OnnxGraphBuilder, op: LinearOp, _tied: boolean, out?: string): string {
    const q = this.linears.get(op.weight);
    if (!q) throw new Error(`internal: no quantization for ${op.weight}`);
    const K = op.inFeatures;
    const N = op.outFeatures;
    const xd = this.qdq(b, op.x, q.sx, q.inBits);
    const quantized = this.quantized;
    b.tensor({ name: op.weight, dims: [K, N], dataType: DT_INT8, byteLength: K * N, bytes: async () => { const w = await quantized(op.weight); return new Uint8Array(w.q.buffer, w.q.byteOffset, w.q.byteLength); } });
    this.encodings.push({ name: op.weight, kind: 'param', bits: 8, scale: q.sw });
    const wd = b.node('DequantizeLinear', [op.weight, this.scale(b, op.weight, q.sw), this.zeroPoint(b, 8)], [], `${op.weight}.dq`);
    const mm = b.node('MatMul', [xd, wd], [], `${op.out}.mm`);
    return this.qdq(b, mm, q.sy, q.outBits, out);
  }

  gather(): string {
    throw new Error('internal: static subgraphs gather nothing');
  }

  vector(b: OnnxGraphBuilder, name: string, dims: number[]): string {
    return b.weight(name, dims);
  }
}

function model(b: OnnxGraphBuilder, name: string, opset: number, inputs: LoweredGraph['inputs'], outputs: LoweredGraph['outputs'], doc: string): Omit<LoweredGraph, 'encodings'> {
  const vi = (x: LoweredGraph['inputs'][number]) => valueInfo(x.name, x.dtype === 'int64' ? DT_INT64 : DT_FLOAT, x.shape);
  return {
    model: { irVersion: opset >= 21 ? 10 : 8, opsetImport: [{ domain: '', version: opset }], producerName: 'llmc', producerVersion: LLMC_VERSION, docString: doc },
    graph: { name, node: b.nodes, initializer: b.consts, input: inputs.map(vi), output: outputs.map(vi) },
    tensors: [...b.weights.values()],
    inputs,
    outputs,
  };
}

const STATIC_MODE = (weights: WeightLowering, opset: number): LoweringMode => ({
  opset,
  compute: DT_FLOAT,
  weights,
  ropeAxis: 2,
  mask: () => {
    throw new Error('internal: static subgraphs hold no attention');
  },
  allPositions: true,
});

/** A static subgraph (NPU, or a CPU part without linears): QDQ linears over [1, a, b, C] views. */
export function lowerStatic(
  source: ModelSource,
  graph: ModelGraph,
  sg: Subgraph,
  linears: ReadonlyMap<string, QLinear>,
  quantized: (weight: string) => Promise<QuantizedWeight>,
  chunk: Chunk,
  channels: ReadonlyMap<V, number>,
): LoweredGraph {
  const used = sg.ops.flatMap((op) => (op.op === 'linear' ? [linears.get(op.weight)!] : []));
  const opset = used.some((l) => l.inBits === 16 || l.outBits === 16) ? 21 : OPSET;
  const weights = new QdqWeights(linears, quantized);
  const b = new OnnxGraphBuilder(source, STATIC_MODE(weights, opset));
  // A shadowed linear's bias is added by its shadow node, after the correction.
  const ops = sg.ops.map((op): Op => (op.op === 'linear' && op.bias && (linears.get(op.weight)?.inShadow || linears.get(op.weight)?.outShadow) ? { ...op, bias: null } : op));
  lowerOps(b, graph, ops);
  const io = (v: V) => ({ name: v, shape: view(chunk, channels.get(v)!), dtype: 'float32' });
  const lowered = model(b, sg.id, opset, sg.inputs.map(io), sg.outputs.map(io), `${sg.id}: static ${sg.device} subgraph (chunk ${chunk.c} as [1, ${chunk.a}, ${chunk.b}, C]) of ${source.description}`);
  return { ...lowered, encodings: weights.encodings };
}

/** A float graph's ONNX mode over [1, c, C] values. */
const floatMode = (mask: LoweringMode['mask']): LoweringMode => ({ opset: OPSET, compute: DT_FLOAT, weights: FLOAT32_WEIGHTS, ropeAxis: 2, mask, allPositions: true });

/** Reshape a [1, a, b, C] input to [1, c, C] (its name inside the graph). */
const flatten = (b: OnnxGraphBuilder, v: V, chunk: Chunk, C: number) => b.node('Reshape', [v, b.i64([1, chunk.c, C])], [], `${v}.seq`);

/** cos/sin of `position_ids` from tables baked into the graph (RoPE with positions as an input): the tables `ops` read (gemma3's sliding layers: their own base). */
function ropeFromPositions(b: OnnxGraphBuilder, graph: ModelGraph, ops: readonly Op[]): void {
  const spec = graph.spec;
  const reads = new Set(ops.flatMap((o) => (o.op === 'rope' ? [o.cos] : [])));
  const local = localRopeSpec(spec);
  for (const [cos, sin, s, suffix] of [[IO.cos, IO.sin, spec, ''], [IO.cosLocal, IO.sinLocal, local, '_local']] as const) {
    if (!reads.has(cos)) continue;
    if (!s) throw new LlmcError('internal: local rope tables of a model without a local rope');
    const tables = positionTables(s, 'the QNN graph');
    for (const which of ['cos', 'sin'] as const) {
      const table = b.constFloat(`${which}${suffix}_cache`, tables[which], [spec.maxPositions, spec.headDim / 2]);
      b.node('Gather', [table, DECODER_IO.positionIds], [attr('axis', 0)], which === 'cos' ? cos : sin);
    }
  }
}

/**
 * The attention subgraph of a layer: RoPE from position_ids (when its ops hold it), KV append, masked
 * attention; KV cache as I/O. `pastLength`: the static past of a chunk-index graph (i·c positions);
 * without it the past is dynamic (the decode graph).
 */
export function lowerAttention(source: ModelSource, graph: ModelGraph, sg: Subgraph, chunk: Chunk, channels: ReadonlyMap<V, number>, pastLength?: number): LoweredGraph {
  const b = new OnnxGraphBuilder(source, floatMode(paddedCausalMask(DECODER_IO.attentionMask)));
  const roped = sg.ops.some((o) => o.op === 'rope');
  if (roped) ropeFromPositions(b, graph, sg.ops);
  const acts = sg.inputs.filter((v) => channels.has(v));
  const renamed = new Map(acts.map((v) => [v, flatten(b, v, chunk, channels.get(v)!)]));
  const r = (v: V) => renamed.get(v) ?? v;
  const att = sg.ops.find((o) => o.op === 'attention') as Extract<Op, { op: 'attention' }>;
  const l = att.layer;
  const ops = sg.ops.map((op): Op => {
    if (op.op === 'rope') return { ...op, x: r(op.x) };
    if (op.op === 'attention') return { ...op, q: r(op.q), k: r(op.k), v: r(op.v), out: `${op.out}.seq`, pastK: DECODER_IO.pastKey(l), pastV: DECODER_IO.pastValue(l), presentK: DECODER_IO.presentKey(l), presentV: DECODER_IO.presentValue(l) };
    return op;
  });
  lowerOps(b, graph, ops);
  b.node('Reshape', [`${att.out}.seq`, b.i64(view(chunk, channels.get(att.out)!))], [], att.out);
  const past = pastLength ?? DECODER_IO.past;
  const total = pastLength === undefined ? DECODER_IO.total : pastLength + chunk.c;
  const kv = (name: string, len: string | number) => ({ name, shape: [1, att.kvHeads, len, att.headDim], dtype: 'float32' });
  const inputs = [
    ...acts.map((v) => ({ name: v, shape: view(chunk, channels.get(v)!), dtype: 'float32' })),
    ...(roped ? [{ name: DECODER_IO.positionIds, shape: [1, chunk.c], dtype: 'int64' }] : []),
    { name: DECODER_IO.attentionMask, shape: [1, total], dtype: 'int64' },
    kv(DECODER_IO.pastKey(l), past),
    kv(DECODER_IO.pastValue(l), past),
  ];
  const outputs = [{ name: att.out, shape: view(chunk, channels.get(att.out)!), dtype: 'float32' }, kv(DECODER_IO.presentKey(l), total), kv(DECODER_IO.presentValue(l), total)];
  const what = pastLength === undefined ? 'dynamic CPU subgraph (RoPE, KV append, attention)' : `CPU subgraph of chunk index ${pastLength / chunk.c} (KV append over ${pastLength} past positions, attention)`;
  return { ...model(b, sg.id, OPSET, inputs, outputs, `${sg.id}: ${what} of ${source.description}`), encodings: [] };
}

/** RoPE of a layer's q and k alone ([1, a, b, C] in and out, positions as an input): static, shared by every chunk. */
export function lowerRope(source: ModelSource, graph: ModelGraph, sg: Subgraph, chunk: Chunk, channels: ReadonlyMap<V, number>): LoweredGraph {
  const b = new OnnxGraphBuilder(source, floatMode(() => ''));
  ropeFromPositions(b, graph, sg.ops);
  const ropes = sg.ops as Extract<Op, { op: 'rope' }>[];
  lowerOps(b, graph, ropes.map((op) => ({ ...op, x: flatten(b, op.x, chunk, channels.get(op.x)!), out: `${op.out}.seq` })));
  for (const op of ropes) b.node('Reshape', [`${op.out}.seq`, b.i64(view(chunk, channels.get(op.out)!))], [], op.out);
  const io = (v: V) => ({ name: v, shape: view(chunk, channels.get(v)!), dtype: 'float32' });
  const inputs = [...ropes.map((op) => io(op.x)), { name: DECODER_IO.positionIds, shape: [1, chunk.c], dtype: 'int64' }];
  return { ...model(b, sg.id, OPSET, inputs, ropes.map((op) => io(op.out)), `${sg.id}: RoPE of q and k (positions as an input) of ${source.description}`), encodings: [] };
}

/** Token ids [1, c] → h0 as [1, a, b, D] (float table, on the CPU). */
export function lowerEmbed(source: ModelSource, graph: ModelGraph, sg: Subgraph, chunk: Chunk): LoweredGraph {
  const D = graph.spec.hiddenSize;
  const b = new OnnxGraphBuilder(source, floatMode(() => '')); // no attention here
  // The gather, then what scales it (granite's embedding multiplier): the last op gives the view.
  const last = sg.ops.at(-1)!;
  const out = opOutputs(last)[0];
  lowerOps(b, graph, [...sg.ops.slice(0, -1), { ...last, out: `${out}.seq` } as Op]);
  b.node('Reshape', [`${out}.seq`, b.i64(view(chunk, D))], [], out);
  return { ...model(b, sg.id, OPSET, [{ name: IO.ids, shape: [1, chunk.c], dtype: 'int64' }], [{ name: out, shape: view(chunk, D), dtype: 'float32' }], `embed of ${source.description}`), encodings: [] };
}

/** h [1, a, b, D] → final RMSNorm → lm_head in float: logits [1, c, V] at every position. */
export function lowerHead(source: ModelSource, graph: ModelGraph, sg: Subgraph, chunk: Chunk): LoweredGraph {
  const D = graph.spec.hiddenSize;
  const b = new OnnxGraphBuilder(source, floatMode(() => ''));
  const h = sg.inputs.find((v) => v !== IO.logitPositions)!;
  const seq = flatten(b, h, chunk, D);
  lowerOps(b, graph, sg.ops.map((op) => (op.op === 'gatherPositions' ? { ...op, x: seq } : op)));
  return {
    ...model(b, sg.id, OPSET, [{ name: h, shape: view(chunk, D), dtype: 'float32' }], [{ name: IO.logits, shape: [1, chunk.c, graph.spec.vocabSize], dtype: 'float32' }], `final norm and lm_head of ${source.description}`),
    encodings: [],
  };
}
