/**
 * Lowering of the model IR (src/core/ir/ir.ts) to an ONNX ModelProto: opset 17, standard ops only,
 * float32 weights as initializers streamed from the ModelSource one tensor at a time straight
 * into the final protobuf buffer (peak memory ≈ model size + one tensor).
 */
import type { ModelSource } from '../../core/checkpoint/source.js';
import { LlmcError } from '../../core/errors.js';
import { buildModel } from '../../core/ir/build.js';
import { primitiveOps } from '../../core/ir/expand.js';
import type { ModelGraph, Op, TapKind, TapPoint } from '../../core/ir/ir.js';
import { LLMC_VERSION } from '../../core/version.js';
import { attr, DT_FLOAT, DT_INT64, lenKey, onnx, varint, type AttributeProto, type NodeProto, type TensorProto, type ValueInfoProto } from './proto.js';

export const OPSET = 17;
const IR_VERSION = 8;
/** Protobuf messages are limited to 2 GiB. */
const MAX_PROTO_BYTES = 2 ** 31 - 1;
/** Masked attention scores: float32's lowest finite value, as Hugging Face masks. */
const NEG = -3.4028234663852886e38;

/** Which profiling observations to add as graph outputs. */
export interface TapSpec {
  kind: TapKind;
  /** Only these layers (default: all). The lm_head input counts as layer numLayers. */
  layers?: number[];
  /** linear-input / mlp-act: also output the (masked) full activation [B,T,C] (large). */
  full?: boolean;
}

/** The graph outputs a tap point was lowered to (absent fields were not requested). */
export interface TapOutputs {
  point: TapPoint;
  /** [C] max over tokens of |x| (linear-input). */
  absMax?: string;
  /** [C] sum over tokens of x² (linear-input); [heads] sum over tokens and head dims (head-output). */
  sumSq?: string;
  /** [C] sum over tokens of |x| (mlp-act). */
  absSum?: string;
  /** scalar: tokens counted (masked points only; otherwise every token counts). */
  count?: string;
  /** The full value [B,T,C] (router-logits, or `full`). */
  full?: string;
}

export interface LoweredModel {
  bytes: Uint8Array;
  graph: ModelGraph;
  taps: TapOutputs[];
  outputNames: string[];
  /** Weights that are graph inputs (LowerOptions.weightInputs): each run feeds them, laid out as `dims`. */
  weightInputs: WeightInput[];
  /** Router bias inputs (LowerOptions.routerBias): graph input name → the router's logits value. */
  routerBiases: { input: string; logits: string; numExperts: number }[];
}

/** A weight fed at run time instead of stored: the HF tensor `source`, transposed from [out, in] when `transpose` is set. */
export interface WeightInput {
  name: string;
  source: string;
  dims: number[];
  transpose: [number, number] | null;
}

export interface LowerOptions {
  taps?: TapSpec[];
  graph?: ModelGraph;
  /**
   * HF tensors to lower as graph inputs rather than initializers, so one session runs the model with
   * any values for them (sensitivity measurements swap one expert's weights per run).
   */
  weightInputs?: ReadonlySet<string>;
  /** Add a float input `<logits>.bias` [E] per router, added to its logits (force-routing an expert). */
  routerBias?: boolean;
}

interface PendingWeight {
  name: string;
  dims: number[];
  /** HF tensor to read and, for linears, the [out, in] shape to transpose into [in, out]. */
  source: string;
  transpose: [number, number] | null;
}

class OnnxGraphBuilder {
  nodes: NodeProto[] = [];
  consts: TensorProto[] = [];
  weights = new Map<string, PendingWeight>();
  private n = 0;
  private constCache = new Map<string, string>();
  private memo = new Map<string, string>();

  fresh(hint: string): string {
    return `${hint}/${this.n++}`;
  }

  node(opType: string, inputs: string[], attrs: AttributeProto[] = [], out?: string): string {
    const o = out ?? this.fresh(opType);
    this.nodes.push({ opType, input: inputs, output: [o], name: `${opType}_${this.nodes.length}`, attribute: attrs });
    return o;
  }

  nodeN(opType: string, inputs: string[], nOut: number, attrs: AttributeProto[] = []): string[] {
    const outs = Array.from({ length: nOut }, () => this.fresh(opType));
    this.nodes.push({ opType, input: inputs, output: outs, name: `${opType}_${this.nodes.length}`, attribute: attrs });
    return outs;
  }

  /** Memoize a derived value shared by many ops (rope tables, the attention mask). */
  once(key: string, make: () => string): string {
    let v = this.memo.get(key);
    if (v === undefined) this.memo.set(key, (v = make()));
    return v;
  }

  i64(values: number[], scalar = false): string {
    const key = `i64:${scalar}:${values.join(',')}`;
    let name = this.constCache.get(key);
    if (!name) {
      name = `const_i64_${this.constCache.size}`;
      this.consts.push({ name, dataType: DT_INT64, dims: scalar ? [] : [values.length], int64Data: values });
      this.constCache.set(key, name);
    }
    return name;
  }

  f32(value: number): string {
    const key = `f32:${value}`;
    let name = this.constCache.get(key);
    if (!name) {
      name = `const_f32_${this.constCache.size}`;
      this.consts.push({ name, dataType: DT_FLOAT, dims: [], floatData: [value] });
      this.constCache.set(key, name);
    }
    return name;
  }

  /** A small float constant tensor. */
  constF32(name: string, values: Float32Array, dims: number[]): string {
    this.consts.push({ name, dataType: DT_FLOAT, dims, rawData: new Uint8Array(values.buffer, values.byteOffset, values.byteLength) });
    return name;
  }

  weight(source: string, dims: number[], transpose: [number, number] | null = null): string {
    const name = transpose ? `${source}^T` : source;
    if (!this.weights.has(name)) this.weights.set(name, { name, dims, source, transpose });
    return name;
  }
}

function lowerOp(b: OnnxGraphBuilder, op: Op, graph: ModelGraph, embedTables: ReadonlySet<string>, routerBias: boolean): void {
  const spec = graph.spec;
  switch (op.op) {
    case 'embed':
      b.node('Gather', [b.weight(op.table, [spec.vocabSize, spec.hiddenSize]), op.ids], [attr('axis', 0)], op.out);
      return;
    case 'rmsnorm': {
      // x / sqrt(mean(x²) + eps) · w: the pattern onnxruntime fuses into one SimplifiedLayerNormalization kernel.
      const ms = b.node('ReduceMean', [b.node('Pow', [op.x, b.f32(2)])], [attr('axes', [-1], 'ints'), attr('keepdims', 1)]);
      const norm = b.node('Div', [op.x, b.node('Sqrt', [b.node('Add', [ms, b.f32(op.eps)])])]);
      b.node('Mul', [norm, b.weight(op.weight, [op.dim])], [], op.out);
      return;
    }
    case 'linear': {
      const tiedHead = embedTables.has(op.weight);
      let y: string;
      if (tiedHead) {
        // Tied lm_head: Gemm(transB) on the embedding table itself, so it is stored once.
        const x2 = b.node('Reshape', [op.x, b.i64([-1, op.inFeatures])]);
        const w = b.weight(op.weight, [op.outFeatures, op.inFeatures]);
        const g = b.node('Gemm', [x2, w], [attr('transB', 1)]);
        const lead = b.node('Shape', [op.x], [attr('start', 0), attr('end', -1)]);
        const shape = b.node('Concat', [lead, b.i64([op.outFeatures])], [attr('axis', 0)]);
        y = b.node('Reshape', [g, shape], [], op.bias ? undefined : op.out);
      } else {
        const w = b.weight(op.weight, [op.inFeatures, op.outFeatures], [op.outFeatures, op.inFeatures]);
        y = b.node('MatMul', [op.x, w], [], op.bias ? undefined : op.out);
      }
      if (op.bias) b.node('Add', [y, b.weight(op.bias, [op.outFeatures])], [], op.out);
      return;
    }
    case 'rope': {
      const hd = op.headDim;
      const half = hd / 2;
      // HF: x·[cos, cos] + rotate_half(x)·[sin, sin], rotate_half(x) = [−x2, x1]. rotate_half is a
      // MatMul with a fixed ±1 permutation matrix (exact: one nonzero term per output), which
      // keeps the subgraph to 6 nodes. Tables [T, hd] → [T, 1, hd] broadcast over [B, T, heads, hd].
      const full = (t: string) => b.once(`full:${t}`, () => b.node('Unsqueeze', [b.node('Concat', [t, t], [attr('axis', -1)]), b.i64([1])]));
      const cos = full(op.cos);
      const sin = full(op.sin);
      const rot = b.once(`rotate_half:${hd}`, () => {
        const r = new Float32Array(hd * hd);
        for (let i = 0; i < half; i++) {
          r[(i + half) * hd + i] = -1; // out[i] = −x[i + half]
          r[i * hd + i + half] = 1; // out[i + half] = x[i]
        }
        return b.constF32(`rotate_half_${hd}`, r, [hd, hd]);
      });
      const x4 = b.node('Reshape', [op.x, b.i64([0, 0, op.heads, hd])]);
      const y = b.node('Add', [b.node('Mul', [x4, cos]), b.node('Mul', [b.node('MatMul', [x4, rot]), sin])]);
      b.node('Reshape', [y, b.i64([0, 0, op.heads * hd])], [], op.out);
      return;
    }
    case 'attention': {
      const { heads, kvHeads, headDim: hd } = op;
      const rep = heads / kvHeads;
      // GQA without copying K/V: q as [B, Hkv, rep, T, hd] against K/V as [B, Hkv, 1, S, hd].
      const q5 = b.node('Transpose', [b.node('Reshape', [op.q, b.i64([0, 0, kvHeads, rep, hd])])], [attr('perm', [0, 2, 3, 1, 4], 'ints')]);
      const toCache = (x: string) => b.node('Transpose', [b.node('Reshape', [x, b.i64([0, 0, kvHeads, hd])])], [attr('perm', [0, 2, 1, 3], 'ints')]);
      b.node('Concat', [op.pastK, toCache(op.k)], [attr('axis', 2)], op.presentK);
      b.node('Concat', [op.pastV, toCache(op.v)], [attr('axis', 2)], op.presentV);
      const kT = b.node('Transpose', [b.node('Unsqueeze', [op.presentK, b.i64([2])])], [attr('perm', [0, 1, 2, 4, 3], 'ints')]);
      const scores = b.node('Mul', [b.node('MatMul', [q5, kT]), b.f32(1 / Math.sqrt(hd))]);
      const allowed = b.once(`mask:${op.slidingWindow}`, () => causalMask(b, op.presentK, op.q, op.slidingWindow));
      const probs = b.node('Softmax', [b.node('Where', [allowed, scores, b.f32(NEG)])], [attr('axis', -1)]);
      const ctx = b.node('MatMul', [probs, b.node('Unsqueeze', [op.presentV, b.i64([2])])]);
      const ctxT = b.node('Transpose', [ctx], [attr('perm', [0, 3, 1, 2, 4], 'ints')]);
      b.node('Reshape', [ctxT, b.i64([0, 0, heads * hd])], [], op.out);
      return;
    }
    case 'silu':
      b.node('Mul', [op.x, b.node('Sigmoid', [op.x])], [], op.out);
      return;
    case 'sigmoid':
      b.node('Sigmoid', [op.x], [], op.out);
      return;
    case 'mul':
      b.node('Mul', [op.a, op.b], [], op.out);
      return;
    case 'add':
      b.node('Add', [op.a, op.b], [], op.out);
      return;
    case 'router': {
      const k = b.i64([op.topK]);
      const topk = (x: string) => b.nodeN('TopK', [x, k], 2, [attr('axis', -1), attr('largest', 1), attr('sorted', 1)]);
      let vals: string;
      let idx: string;
      // A router bias (measurements force-route rarely chosen experts) shifts the logits for everything below.
      const logits = routerBias ? b.node('Add', [op.logits, `${op.logits}.bias`]) : op.logits;
      if (op.mode === 'softmax-topk-renorm') {
        // softmax over the top-k logits ≡ softmax over all, top-k, renormalize.
        const [v, i] = topk(logits);
        vals = b.node('Softmax', [v], [attr('axis', -1)]);
        idx = i;
      } else {
        [vals, idx] = topk(b.node('Softmax', [logits], [attr('axis', -1)]));
      }
      const zeros = b.node('ConstantOfShape', [b.node('Shape', [op.logits])], [zeroAttr(0)]);
      b.node('ScatterElements', [zeros, idx, vals], [attr('axis', -1)], op.weights);
      const ones = b.node('ConstantOfShape', [b.node('Shape', [idx])], [zeroAttr(1)]);
      b.node('ScatterElements', [zeros, idx, ones], [attr('axis', -1)], op.mask);
      return;
    }
    case 'column':
      b.node('Slice', [op.x, b.i64([op.index]), b.i64([op.index + 1]), b.i64([-1])], [], op.out);
      return;
    case 'gatherPositions':
      b.node('Gather', [op.x, op.positions], [attr('axis', 1)], op.out);
      return;
    case 'moe':
      throw new LlmcError('internal: the ONNX lowering runs the expanded moe op (primitiveOps)');
  }
}

/** ConstantOfShape's float32 fill value. */
function zeroAttr(value: number): AttributeProto {
  return { name: 'value', type: onnx.AttributeProto.AttributeType.TENSOR, t: { dataType: DT_FLOAT, dims: [1], floatData: [value] } };
}

/** [T, S] bool: query t (at position P+t, P = S − T) may see key s ≤ P+t (and P+t − s < window). */
function causalMask(b: OnnxGraphBuilder, presentK: string, q: string, window: number | null): string {
  const scalar = (x: string) => b.node('Squeeze', [x, b.i64([0])]);
  const S = scalar(b.node('Shape', [presentK], [attr('start', 2), attr('end', 3)]));
  const T = scalar(b.node('Shape', [q], [attr('start', 1), attr('end', 2)]));
  const zero = b.i64([0], true);
  const one = b.i64([1], true);
  const rows = b.node('Unsqueeze', [b.node('Range', [b.node('Sub', [S, T]), S, one]), b.i64([1])]);
  const cols = b.node('Unsqueeze', [b.node('Range', [zero, S, one]), b.i64([0])]);
  const causal = b.node('LessOrEqual', [cols, rows]);
  if (window === null) return causal;
  const inWindow = b.node('Greater', [cols, b.node('Sub', [rows, b.i64([window], true)])]);
  return b.node('And', [causal, inWindow]);
}

function lowerTaps(b: OnnxGraphBuilder, graph: ModelGraph, specs: TapSpec[]): TapOutputs[] {
  const out: TapOutputs[] = [];
  const stats = new Map<string, TapOutputs>();
  for (const point of graph.taps) {
    const want = specs.find((s) => s.kind === point.kind && (!s.layers || s.layers.includes(point.layer)));
    if (!want) continue;
    // q/k/v (and gate/up) share one input value: reduce it once.
    const key = `${point.kind}|${point.value}|${point.mask}|${want.full ? 1 : 0}`;
    const seen = stats.get(key);
    if (seen) {
      out.push({ ...seen, point });
      continue;
    }
    const t: TapOutputs = { point };
    const x = point.mask ? b.node('Mul', [point.value, point.mask]) : point.value;
    const red = (opType: string, axes: number[]) => b.node(opType, [x], [attr('axes', axes, 'ints'), attr('keepdims', 0)]);
    if (point.mask) t.count = b.node('ReduceSum', [point.mask], [attr('keepdims', 0)]);
    switch (point.kind) {
      case 'linear-input':
        t.absMax = b.node('ReduceMax', [b.node('Abs', [x])], [attr('axes', [0, 1], 'ints'), attr('keepdims', 0)]);
        t.sumSq = red('ReduceSumSquare', [0, 1]);
        if (want.full) t.full = b.node('Identity', [x]);
        break;
      case 'head-output': {
        const x4 = b.node('Reshape', [x, b.i64([0, 0, point.heads!, point.channels / point.heads!])]);
        t.sumSq = b.node('ReduceSumSquare', [x4], [attr('axes', [0, 1, 3], 'ints'), attr('keepdims', 0)]);
        break;
      }
      case 'router-logits':
        t.full = b.node('Identity', [x]);
        break;
      case 'mlp-act':
        t.absSum = red('ReduceL1', [0, 1]);
        if (want.full) t.full = b.node('Identity', [x]);
        break;
    }
    stats.set(key, t);
    out.push(t);
  }
  return out;
}

function valueInfo(name: string, elemType: number, dims?: (number | string)[]): ValueInfoProto {
  const shape = dims && { dim: dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) };
  return { name, type: { tensorType: { elemType, shape } } };
}

/** Lower the model of `source` to ONNX bytes (and what its outputs mean). */
export async function lowerToOnnx(source: ModelSource, opts: LowerOptions = {}): Promise<LoweredModel> {
  const graph = opts.graph ?? buildModel(source.spec);
  const b = new OnnxGraphBuilder();
  const embedTables = new Set(graph.ops.flatMap((o) => (o.op === 'embed' ? [o.table] : [])));
  const ops = primitiveOps(graph);
  for (const op of ops) lowerOp(b, op, graph, embedTables, Boolean(opts.routerBias));
  const taps = lowerTaps(b, graph, opts.taps ?? []);

  const outputNames = [...graph.outputs];
  const outputs: ValueInfoProto[] = graph.outputs.map((o) => valueInfo(o, DT_FLOAT));
  for (const t of taps) {
    for (const name of [t.absMax, t.sumSq, t.absSum, t.count, t.full]) {
      if (name && !outputNames.includes(name)) {
        outputNames.push(name);
        outputs.push(valueInfo(name, DT_FLOAT));
      }
    }
  }
  const inputs = graph.inputs.map((i) => valueInfo(i.name, i.dtype === 'int64' ? DT_INT64 : DT_FLOAT, i.dims));
  const weightInputs = [...b.weights.values()].filter((w) => opts.weightInputs?.has(w.source));
  for (const w of weightInputs) inputs.push(valueInfo(w.name, DT_FLOAT, w.dims));
  const routerBiases = opts.routerBias
    ? ops.flatMap((o) => (o.op === 'router' ? [{ input: `${o.logits}.bias`, logits: o.logits, numExperts: o.numExperts }] : []))
    : [];
  for (const r of routerBiases) inputs.push(valueInfo(r.input, DT_FLOAT, [r.numExperts]));

  // Everything but the big initializers goes through protobufjs; those are spliced in raw.
  const graphHead = onnx.GraphProto.encode({ name: 'llmc', node: b.nodes, initializer: b.consts, input: inputs, output: outputs }).finish();
  const pending = [...b.weights.values()].filter((w) => !opts.weightInputs?.has(w.source));
  const tensorHeads = pending.map((w) => onnx.TensorProto.encode({ name: w.name, dims: w.dims, dataType: DT_FLOAT }).finish());
  const rawLen = pending.map((w) => 4 * w.dims.reduce((a, d) => a * d, 1));
  const tensorLen = tensorHeads.map((h, i) => h.length + lenKey(9).length + varint(rawLen[i]).length + rawLen[i]);
  const graphLen = graphHead.length + tensorLen.reduce((a, l) => a + lenKey(5).length + varint(l).length + l, 0);
  const modelHead = onnx.ModelProto.encode({
    irVersion: IR_VERSION,
    opsetImport: [{ domain: '', version: OPSET }],
    producerName: 'llmc',
    producerVersion: LLMC_VERSION,
    docString: `${source.spec.modelType} from ${source.description}`,
  }).finish();
  const total = modelHead.length + lenKey(7).length + varint(graphLen).length + graphLen;
  if (total > MAX_PROTO_BYTES) {
    throw new LlmcError(`model is ${(total / 2 ** 30).toFixed(2)} GiB as float32 ONNX, above protobuf's 2 GiB limit`, source.description);
  }
  const bytes = new Uint8Array(total);
  let at = 0;
  const put = (...parts: Uint8Array[]) => {
    for (const p of parts) {
      bytes.set(p, at);
      at += p.length;
    }
  };
  put(modelHead, lenKey(7), varint(graphLen), graphHead);
  for (let i = 0; i < pending.length; i++) {
    const w = pending[i];
    put(lenKey(5), varint(tensorLen[i]), tensorHeads[i], lenKey(9), varint(rawLen[i]));
    const data = await source.readF32(w.source);
    if (data.length * 4 !== rawLen[i]) {
      throw new LlmcError(`tensor "${w.source}" has ${data.length} values, the model needs [${w.transpose ?? w.dims}]`, source.description);
    }
    let out = data;
    if (w.transpose) {
      const [rows, cols] = w.transpose;
      out = new Float32Array(data.length);
      for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = data[r * cols + c];
    }
    // raw_data is little-endian float32, as Float32Array is on every platform Node runs on.
    put(new Uint8Array(out.buffer, out.byteOffset, out.byteLength));
  }
  return { bytes, graph, taps, outputNames, weightInputs, routerBiases };
}

/** A standalone model.onnx (for backends that ship ONNX files). */
export async function buildOnnxModel(source: ModelSource, options: { taps?: TapSpec[] } = {}): Promise<Uint8Array> {
  return (await lowerToOnnx(source, options)).bytes;
}
