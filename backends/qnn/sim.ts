/**
 * What the device computes, in TS: a qnn artifact's subgraphs run from the artifact alone (the IR ops
 * of graph/subgraphs.json, every weight, scale and zero point read from the emitted ONNX files), with
 * the NPU's integer arithmetic for every QDQ linear:
 *   q = sat(round_half_even(x/s_x)),  acc = q·W_q (int8 × int8, exact int32 accumulation),
 *   code = sat(round_half_even(f32(acc)·f32(f32(s_x·s_w)/s_y))),  y = code·s_y (+ bias)
 * (16-bit activations: the product in float32, as QDQ's float path; src/core/quant/w8a8.ts). Everything
 * else (RMSNorm, SiLU, residual adds, RoPE, the masked attention over the KV cache, embed, head) is the
 * shared TS interpreter (src/exec/runtime/interpreter.ts) rounding as onnxruntime does (`rounding:
 * 'ort'`), one per subgraph, fed the subgraph's inputs, with the kernels here plugged in for its
 * linears (`WeightTable.linearKernel`). The shadow nodes between subgraphs stay with the runner
 * (./shadow-exec.ts on shadow_{hot,cold}.bin), so this executor and onnxruntime are interchangeable
 * under it (./run.ts: `--engine sim|onnxruntime`).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { LlmcError, summarize } from '../../src/core/errors.js';
import type { Op } from '../../src/core/ir/ir.js';
import { normalizeConfig, type ArchSpec } from '../../src/core/arch/spec.js';
import { clampCodes, dequantize, intMatmul, quantizeUnclamped, requantize, roundHalfEven, type ActBits } from '../../src/core/quant/w8a8.js';
import { parseJsonObject } from '../../src/core/util/json.js';
import { DECODER_IO } from '../../src/exec/onnx/decoder.js';
import { Interpreter, KvCache, type WeightTable } from '../../src/exec/runtime/interpreter.js';
import { Weight } from '../../src/exec/runtime/kernels.js';
import { DT_FLOAT, DT_INT8, onnx, type ModelProto, type NodeProto, type TensorProto } from '../../src/exec/onnx/proto.js';
import type { SubgraphEntry } from './emit.js';
import { irOp } from './files.js';

type Feeds = Record<string, ort.Tensor>;

/** Runs one subgraph of the artifact on its named inputs (onnxruntime or this simulation). */
export interface SubgraphExecutor {
  run(sg: SubgraphEntry, feeds: Feeds): Promise<Feeds>;
  close(): Promise<void>;
}

/** A QDQ linear as its graph holds it. */
interface IntLinear {
  wq: Int8Array;
  K: number;
  O: number;
  sx: number;
  inBits: ActBits;
  sw: number;
  sy: number;
  outBits: ActBits;
  bias: Float32Array | null;
}

/** A float linear (the head's lm_head): W as [K, O]. */
interface FloatLinear {
  w: Float32Array;
  K: number;
  O: number;
  bias: Float32Array | null;
}

/** One subgraph's ONNX file: its initializers and nodes. */
class OnnxFile {
  readonly inits = new Map<string, TensorProto>();
  readonly producer = new Map<string, NodeProto>();
  readonly consumers = new Map<string, NodeProto[]>();

  constructor(readonly file: string) {
    let model: ModelProto;
    try {
      model = onnx.ModelProto.decode(readFileSync(file));
    } catch (e) {
      throw new LlmcError(`cannot read the graph: ${(e as Error).message.split('\n')[0]}`, file);
    }
    for (const t of model.graph?.initializer ?? []) this.inits.set(t.name!, t);
    for (const n of model.graph?.node ?? []) {
      for (const o of n.output ?? []) this.producer.set(o, n);
      for (const i of n.input ?? []) {
        const list = this.consumers.get(i) ?? [];
        list.push(n);
        this.consumers.set(i, list);
      }
    }
  }

  has(name: string): boolean {
    return this.inits.has(name);
  }

  private init(name: string): TensorProto {
    const t = this.inits.get(name);
    if (!t) throw new LlmcError(`the graph has no initializer ${name}`, this.file);
    return t;
  }

  dims(name: string): number[] {
    return (this.init(name).dims ?? []).map(Number);
  }

  floats(name: string): Float32Array {
    const t = this.init(name);
    if (t.dataType !== DT_FLOAT) throw new LlmcError(`initializer ${name} is not float32`, this.file);
    if (t.rawData?.length) return new Float32Array(new Uint8Array(t.rawData).buffer);
    return Float32Array.from(t.floatData ?? []);
  }

  int8(name: string): Int8Array {
    const t = this.init(name);
    if (t.dataType !== DT_INT8) throw new LlmcError(`initializer ${name} is not int8`, this.file);
    if (t.rawData?.length) return new Int8Array(new Uint8Array(t.rawData).buffer);
    return Int8Array.from(t.int32Data ?? []);
  }

  scalar(name: string): number {
    const v = this.floats(name);
    if (v.length !== 1) throw new LlmcError(`initializer ${name} is not a scalar`, this.file);
    return v[0];
  }

  /** Bits of a Q/DQ pair from its zero point's type (int8 or int16), which must be 0 (symmetric). */
  zeroPointBits(name: string): ActBits {
    const t = this.init(name);
    const zp = t.rawData?.length ? t.rawData[0] : (t.int32Data?.[0] ?? 0);
    if (zp !== 0) throw new LlmcError(`zero point ${name} is not 0 (the qnn target writes symmetric encodings)`, this.file);
    return t.dataType === DT_INT8 ? 8 : 16;
  }

  node(output: string, opType: string): NodeProto {
    const n = this.producer.get(output);
    if (!n || n.opType !== opType) throw new LlmcError(`${output} is not the output of a ${opType} node`, this.file);
    return n;
  }

  /** The QDQ pattern of linear `op`: MatMul(DQ(Q(x)), DQ(W_q)) → Q → DQ (./lower.ts). */
  intLinear(op: Extract<Op, { op: 'linear' }>): IntLinear {
    const mm = this.node(`${op.out}.mm`, 'MatMul');
    const xdq = this.node(mm.input![0], 'DequantizeLinear');
    const wdq = this.node(mm.input![1], 'DequantizeLinear');
    const yq = (this.consumers.get(mm.output![0]) ?? []).find((n) => n.opType === 'QuantizeLinear');
    if (!yq) throw new LlmcError(`${mm.output![0]} is not quantized`, this.file);
    const W = wdq.input![0];
    const [K, O] = this.dims(W);
    if (K !== op.inFeatures || O !== op.outFeatures) throw new LlmcError(`${W} is [${K}, ${O}], its linear [${op.inFeatures}, ${op.outFeatures}]`, this.file);
    return {
      wq: this.int8(W),
      K,
      O,
      sx: this.scalar(xdq.input![1]),
      inBits: this.zeroPointBits(xdq.input![2]),
      sw: this.scalar(wdq.input![1]),
      sy: this.scalar(yq.input![1]),
      outBits: this.zeroPointBits(yq.input![2]),
      // A shadowed linear's graph leaves its bias out (its shadow node adds it).
      bias: op.bias && this.has(op.bias) ? this.floats(op.bias) : null,
    };
  }

  floatLinear(op: Extract<Op, { op: 'linear' }>): FloatLinear {
    const K = op.inFeatures;
    const O = op.outFeatures;
    const bias = op.bias && this.has(op.bias) ? this.floats(op.bias) : null;
    // Stored transposed as `<weight>^T` [K, O]; a tied lm_head reads the embedding table [O, K] (Gemm transB).
    if (this.has(`${op.weight}^T`)) return { w: this.floats(`${op.weight}^T`), K, O, bias };
    const raw = this.floats(op.weight);
    const w = new Float32Array(K * O);
    for (let o = 0; o < O; o++) for (let k = 0; k < K; k++) w[k * O + o] = raw[o * K + k];
    return { w, K, O, bias };
  }
}

function intLinear(l: IntLinear, x: Float32Array): Float32Array {
  const T = x.length / l.K;
  const q = clampCodes(quantizeUnclamped(x, l.sx), l.inBits);
  const codes = l.inBits === 16 ? floatPathCodes(l, q, T) : requantize(intMatmul(q, T, { q: l.wq, inFeatures: l.K, outFeatures: l.O, scale: l.sw }), l.sx, l.sw, l.sy, 8, l.outBits);
  const y = dequantize(codes, l.sy);
  if (l.bias) for (let i = 0; i < y.length; i++) y[i] += l.bias[i % l.O];
  return y;
}

/**
 * A 16-bit QDQ linear as onnxruntime runs it: no integer kernel takes int16 activations, so it is
 * the float path DequantizeLinear → MatMul → QuantizeLinear. The operands are f32(q·s); MLAS's SGEMM
 * sums each output in k order with float32 fused multiply-adds from zero (one K slice: its stride is
 * 128 grown to 256 when N < K, and these linears have K ≤ 256); QuantizeLinear rounds f32(y / s_y)
 * half to even. The exact integer sum scaled once (the 8-bit path) differs from this by float32
 * rounding, which at 32,767 codes flips output LSBs (5e-3–1.1e-2 on stories260K's logits).
 */
function floatPathCodes(l: IntLinear, q: Float64Array, T: number): Float64Array {
  const { K, O } = l;
  if (K > 256) throw new LlmcError(`internal: a 16-bit linear with ${K} inputs (the simulation follows onnxruntime's one-slice SGEMM, K ≤ 256)`);
  const a = new Float32Array(q.length);
  for (let i = 0; i < q.length; i++) a[i] = q[i] * l.sx;
  const b = new Float32Array(l.wq.length);
  for (let i = 0; i < b.length; i++) b[i] = l.wq[i] * l.sw;
  const acc = new Float32Array(O);
  const u = new Float64Array(T * O);
  for (let t = 0; t < T; t++) {
    acc.fill(0);
    for (let k = 0; k < K; k++) {
      const v = a[t * K + k];
      if (v === 0) continue;
      const row = k * O;
      // fma in float32: the product of two float32 values is exact in a double; one rounding to float32 after the add.
      for (let o = 0; o < O; o++) acc[o] = v * b[row + o] + acc[o];
    }
    for (let o = 0; o < O; o++) u[t * O + o] = roundHalfEven(Math.fround(acc[o] / l.sy));
  }
  return clampCodes(u, l.outBits);
}

/** onnxruntime's float MatMul as the head's graph runs it: float64 sums in k order, rounded once. */
function floatLinear(l: FloatLinear, x: Float32Array, y: Float32Array): void {
  const T = x.length / l.K;
  const acc = new Float64Array(l.O);
  for (let t = 0; t < T; t++) {
    acc.fill(0);
    for (let k = 0; k < l.K; k++) {
      const v = x[t * l.K + k];
      if (v === 0) continue;
      const row = k * l.O;
      for (let o = 0; o < l.O; o++) acc[o] += v * l.w[row + o];
    }
    for (let o = 0; o < l.O; o++) y[t * l.O + o] = acc[o] + (l.bias ? l.bias[o] : 0);
  }
}

const int64s = (t: ort.Tensor) => Array.from(t.data as BigInt64Array, Number);

/** The interpreter's weights from one subgraph's ONNX file; its linears run the integer (or float MatMul) kernel. */
function weightTable(g: OnnxFile): WeightTable {
  return {
    weight: (name) => {
      const data = g.floats(name);
      const [rows, cols] = g.dims(name);
      return new Weight(name, 'F32', rows, cols, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    },
    vector: (name) => g.floats(name),
    has: (name) => g.has(name),
    jsOnly: true,
    linearKernel: (op) => {
      if (g.producer.has(`${op.out}.mm`)) {
        const l = g.intLinear(op);
        return (x, _n, y) => y.set(intLinear(l, x));
      }
      const l = g.floatLinear(op);
      return (x, _n, y) => floatLinear(l, x, y);
    },
  };
}

/** One subgraph compiled to a function of its feeds: the shared interpreter over its ops, rounding as onnxruntime. */
type Program = (feeds: Feeds) => Feeds;

function compileSubgraph(spec: ArchSpec, sg: SubgraphEntry, g: OnnxFile): Program {
  const known = new Set(['embed', 'rmsnorm', 'scale', 'linear', 'rope', 'attention', 'silu', 'sigmoid', 'gelu_tanh', 'softcap', 'mul', 'add', 'gatherPositions']);
  for (const op of sg.ops) if (!known.has(op.op)) throw new LlmcError(`the qnn simulation has no ${op.op} op (subgraph ${sg.id})`, g.file);
  const past = new Set(sg.ops.flatMap((op) => (op.op === 'attention' ? [DECODER_IO.pastKey(op.layer), DECODER_IO.pastValue(op.layer)] : [])));
  const floats = sg.inputs.filter((i) => i.dtype === 'float32' && !past.has(i.name)).map((i) => ({ name: i.name, channels: Number(i.shape[i.shape.length - 1]) }));
  const interp = new Interpreter(spec, { ops: sg.ops }, weightTable(g), { rounding: 'ort', inputs: floats });
  const attention = sg.ops.filter((op): op is Extract<Op, { op: 'attention' }> => op.op === 'attention');
  const kvDim = spec.numKvHeads * spec.headDim;
  return (given) => {
    // A feed the subgraph's ops read but its listed inputs do not provide (a damaged graph/subgraphs.json): one line.
    const feeds = new Proxy(given, {
      get: (f, name: string) => {
        const v = f[name];
        if (v === undefined && name !== DECODER_IO.inputIds && name !== DECODER_IO.positionIds) {
          throw new LlmcError(`subgraph ${sg.id}: its ops read ${summarize(name)}, which it is not fed`, 'graph/subgraphs.json');
        }
        return v;
      },
    });
    const ids = feeds[DECODER_IO.inputIds];
    const T = ids ? ids.data.length : floats.length ? feeds[floats[0].name].data.length / floats[0].channels : Number(feeds[DECODER_IO.positionIds]?.data.length);
    const P = attention.length ? Number(feeds[DECODER_IO.pastKey(attention[0].layer)].dims[2]) : 0;
    // Each float input holds T rows of the width its listed shape says (a damaged graph/subgraphs.json may say otherwise).
    for (const i of floats) {
      const n = feeds[i.name]?.data.length;
      if (!Number.isSafeInteger(T) || T <= 0 || !Number.isSafeInteger(i.channels) || i.channels <= 0 || n !== T * i.channels) {
        throw new LlmcError(`subgraph ${sg.id}: input ${i.name} is fed ${n} values, not rows of the ${summarize(i.channels)} its shape lists`, 'graph/subgraphs.json');
      }
    }
    const cache = new KvCache(spec.numLayers, kvDim);
    cache.reserve(P + T);
    // The past keys and values [1, Hkv, P, hd] into the interpreter's cache rows [P, Hkv·hd].
    for (const op of attention) {
      for (const [name, rows] of [[DECODER_IO.pastKey(op.layer), cache.k[op.layer]], [DECODER_IO.pastValue(op.layer), cache.v[op.layer]]] as const) {
        const src = feeds[name].data as Float32Array;
        for (let h = 0; h < op.kvHeads; h++) for (let p = 0; p < P; p++) rows.set(src.subarray((h * P + p) * op.headDim, (h * P + p + 1) * op.headDim), p * kvDim + h * op.headDim);
      }
    }
    cache.length = P;
    const pos = feeds[DECODER_IO.positionIds];
    const call = interp.stage(ids ? int64s(ids) : new Array<number>(T).fill(0), cache, Array.from({ length: T }, (_, t) => t), {
      pos0: P,
      feeds: new Map(floats.map((i) => [i.name, feeds[i.name].data as Float32Array])),
      positionIds: pos ? Int32Array.from(int64s(pos)) : undefined,
      keyMask: attention.length ? int64s(feeds[DECODER_IO.attentionMask]) : undefined,
    });
    call.runOps(0, sg.ops.length);
    const out: Feeds = {};
    const S = P + T;
    for (const op of attention) {
      for (const [name, rows] of [[DECODER_IO.presentKey(op.layer), cache.k[op.layer]], [DECODER_IO.presentValue(op.layer), cache.v[op.layer]]] as const) {
        const y = new Float32Array(op.kvHeads * S * op.headDim);
        for (let h = 0; h < op.kvHeads; h++) for (let p = 0; p < S; p++) y.set(rows.subarray(p * kvDim + h * op.headDim, p * kvDim + (h + 1) * op.headDim), (h * S + p) * op.headDim);
        out[name] = new ort.Tensor('float32', y, [1, op.kvHeads, S, op.headDim]);
      }
    }
    for (const o of sg.outputs) {
      if (out[o.name]) continue;
      const data = call.value(o.name).slice();
      // The listed shape must hold what the ops computed (a damaged graph/subgraphs.json may say otherwise).
      const dims = o.shape.map(Number);
      if (!dims.every((d) => Number.isSafeInteger(d) && d > 0) || dims.reduce((a, b) => a * b, 1) !== data.length) {
        throw new LlmcError(`subgraph ${sg.id}: output ${o.name} of shape ${summarize(o.shape)} does not hold the ${data.length} values its ops compute`, 'graph/subgraphs.json');
      }
      out[o.name] = new ort.Tensor('float32', data, dims);
    }
    return out;
  };
}

/** The integer-pipeline simulation of every subgraph of the artifact in `dir` (its config.json unless `spec`). */
export function openSimulation(dir: string, subgraphs: readonly SubgraphEntry[], spec?: ArchSpec): SubgraphExecutor {
  const configFile = path.join(dir, 'config.json');
  let s = spec;
  if (!s) {
    let text: string;
    try {
      text = readFileSync(configFile, 'utf8');
    } catch (e) {
      throw new LlmcError(`cannot read the model config: ${(e as Error).message.split('\n')[0]}`, configFile);
    }
    s = normalizeConfig(parseJsonObject(text, configFile), configFile);
  }
  const programs = new Map<string, Program>();
  for (const sg of subgraphs) if (sg.file) programs.set(sg.id, compileSubgraph(s, { ...sg, ops: sg.ops.map(irOp) }, new OnnxFile(path.join(dir, sg.file))));
  return {
    run: async (sg, feeds) => programs.get(sg.id)!(feeds),
    close: async () => {},
  };
}
