/**
 * Lowering of the model IR (src/core/ir/ir.ts) to ONNX. One implementation of each op (lowerOp),
 * run in two modes:
 * - the engine's graph (lowerToOnnx): opset 17, standard ops only, float32 weights as initializers
 *   streamed from the ModelSource one tensor at a time straight into the final protobuf buffer
 *   (peak memory ≈ model size + one tensor);
 * - exported decoder graphs (./decoder.ts): a LoweringMode sets the opset, the compute dtype
 *   (float16 with float32 islands), the weight formats, the rope tables' layout and the mask.
 * The engine mode adds no node, constant or attribute the other modes need: its bytes are the ones
 * this lowering always wrote.
 */
import { promises as fsp } from 'node:fs';
import { readStoredRange, type ModelSource } from '../../core/checkpoint/source.js';
import { LlmcError } from '../../core/errors.js';
import { buildModel } from '../../core/ir/build.js';
import { primitiveOps } from '../../core/ir/expand.js';
import type { ModelGraph, Op, TapKind, TapPoint } from '../../core/ir/ir.js';
import { causalWindow, type MaskKind } from '../../core/ir/mask.js';
import { bf16ToF16Into } from '../../core/quant/bf16.js';
import { encodeF16 } from '../../core/util/half.js';
import { transpose } from '../../core/util/transpose.js';
import { LLMC_VERSION } from '../../core/version.js';
import { attr, DT_FLOAT, DT_FLOAT16, DT_INT64, lenKey, onnx, varint, type AttributeProto, type GraphProto, type ModelProto, type NodeProto, type TensorProto, type ValueInfoProto } from './proto.js';

export const OPSET = 17;
const IR_VERSION = 8;
/** Protobuf messages are limited to 2 GiB. */
export const MAX_PROTO_BYTES = 2 ** 31 - 1;
/** Masked attention scores: float32's lowest finite value, as Hugging Face masks. */
const NEG = -3.4028234663852886e38;

export type LinearOp = Extract<Op, { op: 'linear' }>;
export type EmbedOp = Extract<Op, { op: 'embed' }>;

/** Which profiling observations to add as graph outputs. */
export interface TapSpec {
  kind: TapKind;
  /** Only these layers (default: all). The lm_head input counts as layer numLayers. */
  layers?: number[];
  /** linear-input / mlp-act: also output the (masked) full activation [B,T,C] (large). */
  full?: boolean;
  /** linear-input / linear-output: also per-channel sums (with sumSq: mean and std). */
  sums?: boolean;
  /**
   * linear-input / linear-output: also the `top` elements of largest |x| of each forward pass (signed,
   * with their flat index): merged over passes they are the exact top of the whole calibration set,
   * from which its percentiles and outlier counts follow without holding the activations.
   */
  top?: number;
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
  /** [C] sum over tokens of x (`sums`). */
  sum?: string;
  /** [≤ top] the elements of largest |x|, signed, largest first, and [≤ top] int64 their indices into the flattened [B,T,C] value (`top`). */
  top?: string;
  topIndex?: string;
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

/** An initializer whose bytes are produced when it is written (weights stream one at a time). */
export interface PendingTensor {
  name: string;
  dims: number[];
  dataType: number;
  /** Bytes of its raw_data. */
  byteLength: number;
  bytes(): Promise<Uint8Array>;
  /** For a weight read from the model: its HF tensor, and the [out, in] shape it is stored transposed from. */
  source?: string;
  transpose?: [number, number] | null;
  /**
   * The same bytes in pieces, when they can be produced a piece at a time (a piece is only valid until
   * the next one is asked for): writers stream them through one small buffer.
   */
  chunks?(): AsyncIterable<Uint8Array>;
}

/** How weights become graph values: float32 initializers (the engine) or a format per tensor (exports). */
export interface WeightLowering {
  /** x · Wᵀ of a linear op, bias not included; `tied`: W is an embedding table (the tied lm_head). */
  linear(b: OnnxGraphBuilder, op: LinearOp, tied: boolean, out?: string): string;
  /** Rows `ids` of an embedding table [vocab, hidden], in the compute dtype. */
  gather(b: OnnxGraphBuilder, op: EmbedOp, dims: [number, number]): string;
  /** A float tensor used as it is (norm weights, biases), in the compute dtype. */
  vector(b: OnnxGraphBuilder, name: string, dims: number[]): string;
}

/** The attention masks the ONNX lowering builds (from the shapes): a target lowering to ONNX declares these. */
export const ONNX_MASKS: ReadonlySet<MaskKind> = new Set(['causal', 'sliding']);

/** What distinguishes the engine's graph from exported ones; lowerOp reads nothing else. */
export interface LoweringMode {
  opset: number;
  /** Element type of activations: DT_FLOAT, or DT_FLOAT16 with RMSNorm, softmax and routing in float32. */
  compute: number;
  weights: WeightLowering;
  /**
   * Where rope tables gain their heads axis: the engine feeds cos/sin as [T, hd/2] (axis 1);
   * exported graphs gather them by position_ids as [B, T, hd/2] (axis 2).
   */
  ropeAxis: number;
  /** The boolean mask [.., T, S] that broadcasts over the scores [B, Hkv, rep, T, S]. */
  mask(b: OnnxGraphBuilder, presentK: string, q: string, window: number | null): string;
  /** gatherPositions gathers the asked positions (false) or keeps them all (true: logits [B, T, V]). */
  allPositions: boolean;
  /** Routers add a per-run bias input `<logits>.bias` to their logits (measurements force-route experts). */
  routerBias?: boolean;
}

const bytesOf = (a: Float32Array | Uint16Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

/**
 * A tensor's values as float16 bits straight from its stored f16 / bf16 bytes (through any gather
 * view), or null when it is stored otherwise or computed.
 */
async function stored16(source: ModelSource, name: string, n: number): Promise<Uint16Array | null> {
  let all: Uint16Array | null = null;
  for await (const piece of stored16Chunks(source, name, n, n) ?? []) all = Uint16Array.from(new Uint16Array(piece.buffer, piece.byteOffset, piece.byteLength / 2));
  return all;
}

/** Values per piece when streaming a stored tensor (8 MB of f16). */
const CHUNK = 4 << 20;

/**
 * stored16 in pieces of `chunk` values through two reused buffers (f16 bits as they are, bf16
 * converted by the gguf target's WebAssembly SIMD kernel: the same bits as via float32), or null.
 */
function stored16Chunks(source: ModelSource, name: string, n: number, chunk = CHUNK): AsyncIterable<Uint8Array> | null {
  const lay = source.layout(name);
  if (!lay || (lay.dtype !== 'F16' && lay.dtype !== 'BF16')) return null;
  return (async function* () {
    const size = Math.min(chunk, n);
    const raw = new Uint8Array(2 * size);
    const out = lay.dtype === 'BF16' ? new Uint16Array(size) : null;
    const h = await fsp.open(lay.file, 'r');
    try {
      for (let e = 0; e < n; e += size) {
        const m = Math.min(size, n - e);
        await readStoredRange((b, o, l, p) => h.read(b, o, l, p).then((r) => r.bytesRead), lay, e, e + m, raw, `tensor "${name}"`);
        if (!out) yield raw.subarray(0, 2 * m);
        else {
          bf16ToF16Into(new Uint16Array(raw.buffer, 0, m), out.subarray(0, m));
          yield new Uint8Array(out.buffer, 0, 2 * m);
        }
      }
    } finally {
      await h.close();
    }
  })();
}

export class OnnxGraphBuilder {
  nodes: NodeProto[] = [];
  consts: TensorProto[] = [];
  weights = new Map<string, PendingTensor>();
  private n = 0;
  private constCache = new Map<string, string>();
  private memo = new Map<string, string>();
  /** A biased linear's output value → its value before the bias (linear-output taps observe that). */
  readonly preBias = new Map<string, string>();

  constructor(
    readonly source: ModelSource,
    readonly mode: LoweringMode,
  ) {}

  fresh(hint: string): string {
    return `${hint}/${this.n++}`;
  }

  node(opType: string, inputs: string[], attrs: AttributeProto[] = [], out?: string, domain?: string): string {
    const o = out ?? this.fresh(opType);
    this.nodes.push({ opType, input: inputs, output: [o], name: `${opType}_${this.nodes.length}`, attribute: attrs, ...(domain ? { domain } : {}) });
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

  /** A small float constant tensor in the compute dtype. */
  constFloat(name: string, values: Float32Array, dims: number[]): string {
    const raw = this.mode.compute === DT_FLOAT16 ? bytesOf(encodeF16(values)) : bytesOf(values);
    this.consts.push({ name, dataType: this.mode.compute, dims, rawData: raw });
    return name;
  }

  /** x in float32 (the islands of a float16 graph); x itself in a float32 graph. */
  toF32(x: string): string {
    return this.mode.compute === DT_FLOAT ? x : this.node('Cast', [x], [attr('to', DT_FLOAT)]);
  }

  /** A float32 value back in the compute dtype. */
  toCompute(x: string, out?: string): string {
    if (this.mode.compute === DT_FLOAT) return out === undefined ? x : this.node('Identity', [x], [], out);
    return this.node('Cast', [x], [attr('to', this.mode.compute)], out);
  }

  /** Reduce over `axes`: an attribute up to opset 17, an input from 18 on. */
  reduce(opType: string, x: string, axes: number[], keepdims: number, out?: string): string {
    if (this.mode.opset < 18) return this.node(opType, [x], [attr('axes', axes, 'ints'), attr('keepdims', keepdims)], out);
    return this.node(opType, [x, this.i64(axes)], [attr('keepdims', keepdims)], out);
  }

  /** Register an initializer (its bytes are read when the model is written). */
  tensor(t: PendingTensor): string {
    if (!this.weights.has(t.name)) this.weights.set(t.name, t);
    return t.name;
  }

  /**
   * A float weight read from the source: `from` = the [out, in] shape to store transposed as [in, out].
   * Stored as float32 or float16 (`dataType`).
   */
  weight(source: string, dims: number[], from: [number, number] | null = null, dataType = DT_FLOAT): string {
    let name = from ? `${source}^T` : source;
    const seen = this.weights.get(name);
    if (seen && seen.dataType !== dataType) name = `${name}.${dataType === DT_FLOAT16 ? 'f16' : 'f32'}`;
    if (this.weights.has(name)) return name;
    const src = this.source;
    const n = dims.reduce((a, d) => a * d, 1);
    // Untransposed float16 from f16 / bf16 storage streams in pieces.
    const pieces = dataType === DT_FLOAT16 && !from ? stored16Chunks(src, source, n) : null;
    return this.tensor({
      name,
      dims,
      dataType,
      source,
      transpose: from,
      byteLength: n * (dataType === DT_FLOAT16 ? 2 : 4),
      ...(pieces ? { chunks: () => stored16Chunks(src, source, n)! } : {}),
      bytes: async () => {
        if (dataType === DT_FLOAT16) {
          // f16 / bf16 checkpoints: their stored bits, converted by table (no float32 round trip).
          const bits = await stored16(src, source, n);
          if (bits) return bytesOf(from ? transpose(bits, from[0], from[1]) : bits);
        }
        const data = await src.readF32(source);
        if (data.length !== n) {
          throw new LlmcError(`tensor "${source}" has ${data.length} values, the model needs [${from ?? dims}]`, src.description);
        }
        const out = from ? transpose(data, from[0], from[1]) : data;
        // raw_data is little-endian, as typed arrays are on every platform Node runs on.
        return dataType === DT_FLOAT16 ? bytesOf(encodeF16(out)) : bytesOf(out);
      },
    });
  }
}

/**
 * The float path of a linear: MatMul by the transposed weight, or for a tied lm_head a Gemm(transB)
 * on the embedding table itself, so it is stored once. `dataType`: the weight's storage dtype (a
 * Cast to the compute dtype follows when they differ).
 */
export function floatLinear(b: OnnxGraphBuilder, op: LinearOp, tied: boolean, out: string | undefined, dataType = b.mode.compute): string {
  const cast = (w: string) => (dataType === b.mode.compute ? w : b.node('Cast', [w], [attr('to', b.mode.compute)]));
  if (tied) {
    const x2 = b.node('Reshape', [op.x, b.i64([-1, op.inFeatures])]);
    const w = cast(b.weight(op.weight, [op.outFeatures, op.inFeatures], null, dataType));
    const g = b.node('Gemm', [x2, w], [attr('transB', 1)]);
    const lead = b.node('Shape', [op.x], [attr('start', 0), attr('end', -1)]);
    const shape = b.node('Concat', [lead, b.i64([op.outFeatures])], [attr('axis', 0)]);
    return b.node('Reshape', [g, shape], [], out);
  }
  const w = cast(b.weight(op.weight, [op.inFeatures, op.outFeatures], [op.outFeatures, op.inFeatures], dataType));
  return b.node('MatMul', [op.x, w], [], out);
}

/** The engine's weights: float32 initializers. */
export const FLOAT32_WEIGHTS: WeightLowering = {
  linear: (b, op, tied, out) => floatLinear(b, op, tied, out, DT_FLOAT),
  gather: (b, op, dims) => b.node('Gather', [b.weight(op.table, dims), op.ids], [attr('axis', 0)], op.out),
  vector: (b, name, dims) => b.weight(name, dims),
};

/** The engine's mode: float32, cos/sin [T, hd/2] inputs, a causal mask from the shapes, logits where asked. */
export const ENGINE_MODE: LoweringMode = {
  opset: OPSET,
  compute: DT_FLOAT,
  weights: FLOAT32_WEIGHTS,
  ropeAxis: 1,
  mask: (b, presentK, q, window) => causalMask(b, presentK, q, window),
  allPositions: false,
};

export function lowerOp(b: OnnxGraphBuilder, op: Op, graph: ModelGraph, embedTables: ReadonlySet<string>): void {
  const spec = graph.spec;
  const mode = b.mode;
  switch (op.op) {
    case 'embed':
      mode.weights.gather(b, op, [spec.vocabSize, spec.hiddenSize]);
      return;
    case 'rmsnorm': {
      // x / sqrt(mean(x²) + eps) · w: the pattern onnxruntime fuses into one SimplifiedLayerNormalization
      // kernel. A float16 graph normalizes in float32 and scales in float16, as Hugging Face's LlamaRMSNorm.
      // Per-head norms (heads): x as [..., heads, dim] (its own leading dims, whatever layout it has:
      // [B, T, C] in the decoder, qnn's [1, a, b, C] chunk views), normalized over dim.
      const xf = b.toF32(op.x);
      const shape = op.heads ? b.node('Shape', [xf]) : '';
      const lead = op.heads ? b.node('Shape', [xf], [attr('start', 0), attr('end', -1)]) : '';
      const x = op.heads ? b.node('Reshape', [xf, b.node('Concat', [lead, b.i64([-1, op.dim])], [attr('axis', 0)])]) : xf;
      const ms = b.reduce('ReduceMean', b.node('Pow', [x, b.f32(2)]), [-1], 1);
      const norm = b.toCompute(b.node('Div', [x, b.node('Sqrt', [b.node('Add', [ms, b.f32(op.eps)])])]));
      const stored = mode.weights.vector(b, op.weight, [op.dim]);
      const w = op.offset ? b.node('Add', [stored, b.toCompute(b.f32(1))]) : stored;
      if (!op.heads) b.node('Mul', [norm, w], [], op.out);
      else b.node('Reshape', [b.node('Mul', [norm, w]), shape], [], op.out);
      return;
    }
    case 'scale':
      b.node('Mul', [op.x, b.toCompute(b.f32(op.by))], [], op.out);
      return;
    case 'linear': {
      const y = mode.weights.linear(b, op, embedTables.has(op.weight), op.bias ? undefined : op.out);
      if (op.bias) {
        b.preBias.set(op.out, y);
        b.node('Add', [y, mode.weights.vector(b, op.bias, [op.outFeatures])], [], op.out);
      }
      return;
    }
    case 'rope': {
      const hd = op.headDim;
      const half = hd / 2;
      // HF: x·[cos, cos] + rotate_half(x)·[sin, sin], rotate_half(x) = [−x2, x1]. rotate_half is a
      // MatMul with a fixed ±1 permutation matrix (exact: one nonzero term per output), which
      // keeps the subgraph to 6 nodes. Tables [.., T, hd] gain a heads axis to broadcast over
      // [B, T, heads, hd].
      const full = (t: string) => b.once(`full:${t}`, () => b.node('Unsqueeze', [b.node('Concat', [t, t], [attr('axis', -1)]), b.i64([mode.ropeAxis])]));
      const cos = full(op.cos);
      const sin = full(op.sin);
      const rot = b.once(`rotate_half:${hd}`, () => {
        const r = new Float32Array(hd * hd);
        for (let i = 0; i < half; i++) {
          r[(i + half) * hd + i] = -1; // out[i] = −x[i + half]
          r[i * hd + i + half] = 1; // out[i + half] = x[i]
        }
        return b.constFloat(`rotate_half_${hd}`, r, [hd, hd]);
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
      // Scores, mask and softmax in float32 (a float16 graph casts around them).
      const scaled = b.node('Mul', [b.toF32(b.node('MatMul', [q5, kT])), b.f32(op.scale ?? 1 / Math.sqrt(hd))]);
      const scores = op.softcap === undefined ? scaled : softcap(b, scaled, op.softcap);
      const window = causalWindow(op.mask, 'the ONNX lowering');
      const allowed = b.once(`mask:${window}`, () => mode.mask(b, op.presentK, op.q, window));
      const probs = b.toCompute(b.node('Softmax', [b.node('Where', [allowed, scores, b.f32(NEG)])], [attr('axis', -1)]));
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
    case 'gelu_tanh': {
      // 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))), in float32 (opset 17 has no Gelu).
      const x = b.toF32(op.x);
      const inner = b.node('Mul', [b.node('Add', [x, b.node('Mul', [b.node('Pow', [x, b.f32(3)]), b.f32(0.044715)])]), b.f32(Math.sqrt(2 / Math.PI))]);
      const y = b.node('Mul', [b.node('Mul', [x, b.f32(0.5)]), b.node('Add', [b.node('Tanh', [inner]), b.f32(1)])]);
      b.toCompute(y, op.out);
      return;
    }
    case 'softcap':
      b.toCompute(softcap(b, b.toF32(op.x), op.cap), op.out);
      return;
    case 'mul':
      b.node('Mul', [op.a, op.b], [], op.out);
      return;
    case 'add':
      b.node('Add', [op.a, op.b], [], op.out);
      return;
    case 'router': {
      // Routing in float32, as Hugging Face's MoE blocks do (softmax with dtype=torch.float).
      const logits = b.toF32(op.logits);
      // A router bias (measurements force-route rarely chosen experts) shifts the logits for the choice below.
      const chosen = mode.routerBias ? b.node('Add', [logits, `${op.logits}.bias`]) : logits;
      const f32Out = mode.compute === DT_FLOAT;
      const k = b.i64([op.topK]);
      const topk = (x: string) => b.nodeN('TopK', [x, k], 2, [attr('axis', -1), attr('largest', 1), attr('sorted', 1)]);
      let vals: string;
      let idx: string;
      if (op.mode === 'softmax-topk-renorm') {
        // softmax over the top-k logits ≡ softmax over all, top-k, renormalize.
        const [v, i] = topk(chosen);
        vals = b.node('Softmax', [v], [attr('axis', -1)]);
        idx = i;
      } else {
        [vals, idx] = topk(b.node('Softmax', [chosen], [attr('axis', -1)]));
      }
      const zeros = b.node('ConstantOfShape', [b.node('Shape', [logits])], [zeroAttr(0)]);
      const w = b.node('ScatterElements', [zeros, idx, vals], [attr('axis', -1)], f32Out ? op.weights : undefined);
      const ones = b.node('ConstantOfShape', [b.node('Shape', [idx])], [zeroAttr(1)]);
      const m = b.node('ScatterElements', [zeros, idx, ones], [attr('axis', -1)], f32Out ? op.mask : undefined);
      if (!f32Out) {
        b.toCompute(w, op.weights);
        b.toCompute(m, op.mask);
      }
      return;
    }
    case 'column':
      b.node('Slice', [op.x, b.i64([op.index]), b.i64([op.index + 1]), b.i64([-1])], [], op.out);
      return;
    case 'gatherPositions':
      if (mode.allPositions) b.node('Identity', [op.x], [], op.out);
      else b.node('Gather', [op.x, op.positions], [attr('axis', 1)], op.out);
      return;
    case 'moe':
      throw new LlmcError('internal: the ONNX lowering runs the expanded moe op (primitiveOps)');
  }
}

/** cap · tanh(x / cap) of a float32 value. */
function softcap(b: OnnxGraphBuilder, x: string, cap: number): string {
  return b.node('Mul', [b.node('Tanh', [b.node('Div', [x, b.f32(cap)])]), b.f32(cap)]);
}

/** ConstantOfShape's float32 fill value. */
function zeroAttr(value: number): AttributeProto {
  return { name: 'value', type: onnx.AttributeProto.AttributeType.TENSOR, t: { dataType: DT_FLOAT, dims: [1], floatData: [value] } };
}

/** [T, S] bool: query t (at position P+t, P = S − T) may see key s ≤ P+t (and P+t − s < window). */
export function causalMask(b: OnnxGraphBuilder, presentK: string, q: string, window: number | null): string {
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
    const key = `${point.kind}|${point.value}|${point.mask}|${want.full ? 1 : 0}|${want.sums ? 1 : 0}|${want.top ?? 0}`;
    const seen = stats.get(key);
    if (seen) {
      out.push({ ...seen, point });
      continue;
    }
    const t: TapOutputs = { point };
    const value = point.kind === 'linear-output' ? (b.preBias.get(point.value) ?? point.value) : point.value;
    const x = point.mask ? b.node('Mul', [value, point.mask]) : value;
    const red = (opType: string, axes: number[]) => b.node(opType, [x], [attr('axes', axes, 'ints'), attr('keepdims', 0)]);
    if (point.mask) t.count = b.node('ReduceSum', [point.mask], [attr('keepdims', 0)]);
    switch (point.kind) {
      case 'linear-input':
      case 'linear-output': {
        const abs = b.node('Abs', [x]);
        t.absMax = b.node('ReduceMax', [abs], [attr('axes', [0, 1], 'ints'), attr('keepdims', 0)]);
        t.sumSq = red('ReduceSumSquare', [0, 1]);
        if (want.sums) t.sum = b.node('ReduceSum', [x, b.i64([0, 1])], [attr('keepdims', 0)]); // axes: an input from opset 13
        if (want.top) {
          // TopK of |x| over the flattened value (k capped at its size), then the signed values there.
          const flat = b.node('Reshape', [x, b.i64([-1])]);
          const k = b.node('Min', [b.node('Unsqueeze', [b.node('Size', [flat]), b.i64([0])]), b.i64([want.top])]);
          const [, idx] = b.nodeN('TopK', [b.node('Reshape', [abs, b.i64([-1])]), k], 2, [attr('axis', 0), attr('largest', 1), attr('sorted', 1)]);
          t.top = b.node('Gather', [flat, idx], [attr('axis', 0)]);
          t.topIndex = idx;
        }
        if (want.full) t.full = b.node('Identity', [x]);
        break;
      }
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

export function valueInfo(name: string, elemType: number, dims?: (number | string)[]): ValueInfoProto {
  const shape = dims && { dim: dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) };
  return { name, type: { tensorType: { elemType, shape } } };
}

/** Every op of the graph (moe expanded) through lowerOp; tied embedding tables are found once. */
export function lowerOps(b: OnnxGraphBuilder, graph: ModelGraph, ops: readonly Op[] = primitiveOps(graph)): void {
  const embedTables = new Set(graph.ops.flatMap((o) => (o.op === 'embed' ? [o.table] : [])));
  for (const op of ops) lowerOp(b, op, graph, embedTables);
}

/**
 * A ModelProto whose big initializers are spliced in as raw_data after protobufjs encoded the rest:
 * `head` is everything before the first tensor, `tensorHead(i)` the bytes before tensor i's data.
 */
export interface SplicedModel {
  total: number;
  head: Uint8Array;
  tensorHead(i: number): Uint8Array;
}

export function splicedModel(model: ModelProto, graph: GraphProto, tensors: readonly PendingTensor[]): SplicedModel {
  const graphHead = onnx.GraphProto.encode(graph).finish();
  const tensorHeads = tensors.map((w) => onnx.TensorProto.encode({ name: w.name, dims: w.dims, dataType: w.dataType }).finish());
  const rawLen = tensors.map((w) => w.byteLength);
  const tensorLen = tensorHeads.map((h, i) => h.length + lenKey(9).length + varint(rawLen[i]).length + rawLen[i]);
  const graphLen = graphHead.length + tensorLen.reduce((a, l) => a + lenKey(5).length + varint(l).length + l, 0);
  const modelHead = onnx.ModelProto.encode(model).finish();
  const cat = (...parts: Uint8Array[]) => Buffer.concat(parts);
  return {
    total: modelHead.length + lenKey(7).length + varint(graphLen).length + graphLen,
    head: cat(modelHead, lenKey(7), varint(graphLen), graphHead),
    tensorHead: (i) => cat(lenKey(5), varint(tensorLen[i]), tensorHeads[i], lenKey(9), varint(rawLen[i])),
  };
}

/** A spliced model as one buffer (its tensors' bytes read in order). */
export async function splicedBytes(spliced: SplicedModel, tensors: readonly PendingTensor[]): Promise<Uint8Array> {
  const bytes = new Uint8Array(spliced.total);
  let at = 0;
  const put = (p: Uint8Array) => {
    bytes.set(p, at);
    at += p.length;
  };
  put(spliced.head);
  for (let i = 0; i < tensors.length; i++) {
    put(spliced.tensorHead(i));
    put(await tensors[i].bytes());
  }
  return bytes;
}

/** Lower the model of `source` to ONNX bytes (and what its outputs mean). */
export async function lowerToOnnx(source: ModelSource, opts: LowerOptions = {}): Promise<LoweredModel> {
  const graph = opts.graph ?? buildModel(source.spec);
  const b = new OnnxGraphBuilder(source, opts.routerBias ? { ...ENGINE_MODE, routerBias: true } : ENGINE_MODE);
  lowerOps(b, graph);
  const taps = lowerTaps(b, graph, opts.taps ?? []);

  const outputNames = [...graph.outputs];
  const outputs: ValueInfoProto[] = graph.outputs.map((o) => valueInfo(o, DT_FLOAT));
  for (const t of taps) {
    for (const name of [t.absMax, t.sumSq, t.absSum, t.count, t.full, t.sum, t.top, t.topIndex]) {
      if (name && !outputNames.includes(name)) {
        outputNames.push(name);
        outputs.push(valueInfo(name, name === t.topIndex ? DT_INT64 : DT_FLOAT));
      }
    }
  }
  const inputs = graph.inputs.map((i) => valueInfo(i.name, i.dtype === 'int64' ? DT_INT64 : DT_FLOAT, i.dims));
  const fed = (t: PendingTensor) => t.source !== undefined && opts.weightInputs?.has(t.source) === true;
  const weightInputs: WeightInput[] = [...b.weights.values()].filter(fed).map((t) => ({ name: t.name, source: t.source!, dims: t.dims, transpose: t.transpose ?? null }));
  for (const w of weightInputs) inputs.push(valueInfo(w.name, DT_FLOAT, w.dims));
  const routerBiases = opts.routerBias
    ? primitiveOps(graph).flatMap((o) => (o.op === 'router' ? [{ input: `${o.logits}.bias`, logits: o.logits, numExperts: o.numExperts }] : []))
    : [];
  for (const r of routerBiases) inputs.push(valueInfo(r.input, DT_FLOAT, [r.numExperts]));

  // Everything but the big initializers goes through protobufjs; those are spliced in raw.
  const pending = [...b.weights.values()].filter((t) => !fed(t));
  const spliced = splicedModel(
    {
      irVersion: IR_VERSION,
      opsetImport: [{ domain: '', version: OPSET }],
      producerName: 'llmc',
      producerVersion: LLMC_VERSION,
      docString: `${source.spec.modelType} from ${source.description}`,
    },
    { name: 'llmc', node: b.nodes, initializer: b.consts, input: inputs, output: outputs },
    pending,
  );
  if (spliced.total > MAX_PROTO_BYTES) {
    throw new LlmcError(`model is ${(spliced.total / 2 ** 30).toFixed(2)} GiB as float32 ONNX, above protobuf's 2 GiB limit`, source.description);
  }
  const bytes = await splicedBytes(spliced, pending);
  return { bytes, graph, taps, outputNames, weightInputs, routerBiases };
}

/** A standalone model.onnx (for backends that ship ONNX files). */
export async function buildOnnxModel(source: ModelSource, options: { taps?: TapSpec[] } = {}): Promise<Uint8Array> {
  return (await lowerToOnnx(source, options)).bytes;
}
