/**
 * What the device computes, in TS: a qnn artifact's subgraphs run from the artifact alone (the IR ops
 * of graph/subgraphs.json, every weight, scale and zero point read from the emitted ONNX files), with
 * the NPU's integer arithmetic for every QDQ linear:
 *   q = sat(round_half_even(x/s_x)),  acc = q·W_q (int8 × int8, exact int32 accumulation),
 *   code = sat(round_half_even(f32(acc)·f32(f32(s_x·s_w)/s_y))),  y = code·s_y (+ bias)
 * (16-bit activations: the product in float32, as QDQ's float path; src/core/quant/w8a8.ts). Everything
 * else (RMSNorm, SiLU, residual adds, RoPE, the masked attention over the KV cache, embed, head) in
 * float32 as the CPU graphs compute it. The shadow nodes between subgraphs stay with the runner
 * (./shadow-exec.ts on shadow_{hot,cold}.bin), so this executor and onnxruntime are interchangeable
 * under it (./run.ts: `--engine sim|onnxruntime`).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { LlmcError } from '../../src/core/errors.js';
import type { Op } from '../../src/core/ir/ir.js';
import { firstVisible } from '../../src/core/ir/mask.js';
import { clampCodes, dequantize, intMatmul, quantizeUnclamped, requantize, type ActBits } from '../../src/core/quant/w8a8.js';
import { DECODER_IO } from '../../src/exec/onnx/decoder.js';
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

const f = Math.fround;

function rmsnorm(x: Float32Array, w: Float32Array, D: number, eps: number): Float32Array {
  const y = new Float32Array(x.length);
  for (let r = 0; r < x.length / D; r++) {
    let ss = 0;
    for (let i = 0; i < D; i++) ss += x[r * D + i] * x[r * D + i];
    const den = f(Math.sqrt(f(f(ss / D) + eps)));
    for (let i = 0; i < D; i++) y[r * D + i] = f(x[r * D + i] / den) * w[i];
  }
  return y;
}

function intLinear(l: IntLinear, x: Float32Array): Float32Array {
  const T = x.length / l.K;
  const q = clampCodes(quantizeUnclamped(x, l.sx), l.inBits);
  const acc = intMatmul(q, T, { q: l.wq, inFeatures: l.K, outFeatures: l.O, scale: l.sw });
  const y = dequantize(requantize(acc, l.sx, l.sw, l.sy, l.inBits, l.outBits), l.sy);
  if (l.bias) for (let i = 0; i < y.length; i++) y[i] += l.bias[i % l.O];
  return y;
}

function floatLinear(l: FloatLinear, x: Float32Array): Float32Array {
  const T = x.length / l.K;
  const y = new Float32Array(T * l.O);
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
  return y;
}

/** HF rotate-half RoPE on [T, heads·hd] with cos/sin [T, hd/2]. */
function rope(x: Float32Array, cos: Float32Array, sin: Float32Array, heads: number, hd: number): Float32Array {
  const half = hd / 2;
  const T = x.length / (heads * hd);
  const y = new Float32Array(x.length);
  for (let t = 0; t < T; t++) {
    for (let h = 0; h < heads; h++) {
      const o = (t * heads + h) * hd;
      for (let i = 0; i < hd; i++) {
        const c = cos[t * half + (i % half)];
        const s = sin[t * half + (i % half)];
        const rot = i < half ? -x[o + i + half] : x[o + i - half];
        y[o + i] = f(f(x[o + i] * c) + f(rot * s));
      }
    }
  }
  return y;
}

const int64s = (t: ort.Tensor) => Array.from(t.data as BigInt64Array, Number);

/** Masked attention of a chunk after `past` cached positions; the cache as [1, Hkv, S, hd]. */
function attention(op: Extract<Op, { op: 'attention' }>, q: Float32Array, k: Float32Array, v: Float32Array, feeds: Feeds): Feeds {
  const { heads: H, kvHeads: Hk, headDim: hd, layer } = op;
  const T = q.length / (H * hd);
  const pastK = feeds[DECODER_IO.pastKey(layer)];
  const pastV = feeds[DECODER_IO.pastValue(layer)];
  const P = Number(pastK.dims[2]);
  const S = P + T;
  const append = (past: Float32Array, now: Float32Array) => {
    const out = new Float32Array(Hk * S * hd);
    for (let h = 0; h < Hk; h++) {
      out.set(past.subarray(h * P * hd, (h + 1) * P * hd), h * S * hd);
      for (let t = 0; t < T; t++) out.set(now.subarray((t * Hk + h) * hd, (t * Hk + h + 1) * hd), (h * S + P + t) * hd);
    }
    return out;
  };
  const K = append(pastK.data as Float32Array, k);
  const V = append(pastV.data as Float32Array, v);
  const mask = int64s(feeds[DECODER_IO.attentionMask]);
  const scale = f(1 / Math.sqrt(hd));
  const out = new Float32Array(T * H * hd);
  const scores = new Float64Array(S);
  const rep = H / Hk;
  for (let t = 0; t < T; t++) {
    for (let h = 0; h < H; h++) {
      const g = Math.floor(h / rep);
      const qo = (t * H + h) * hd;
      let max = -Infinity;
      for (let j = 0; j < S; j++) {
        const allowed = j <= P + t && mask[j] !== 0 && j >= firstVisible(op.mask, P + t);
        if (!allowed) {
          scores[j] = -Infinity;
          continue;
        }
        let dot = 0;
        const ko = (g * S + j) * hd;
        for (let i = 0; i < hd; i++) dot += q[qo + i] * K[ko + i];
        scores[j] = f(f(dot) * scale);
        if (scores[j] > max) max = scores[j];
      }
      let sum = 0;
      for (let j = 0; j < S; j++) {
        scores[j] = scores[j] === -Infinity ? 0 : Math.exp(scores[j] - max);
        sum += scores[j];
      }
      for (let i = 0; i < hd; i++) {
        let acc = 0;
        for (let j = 0; j < S; j++) if (scores[j]) acc += f(scores[j] / sum) * V[(g * S + j) * hd + i];
        out[qo + i] = acc;
      }
    }
  }
  return {
    [op.out]: new ort.Tensor('float32', out, [T, H * hd]),
    [DECODER_IO.presentKey(layer)]: new ort.Tensor('float32', K, [1, Hk, S, hd]),
    [DECODER_IO.presentValue(layer)]: new ort.Tensor('float32', V, [1, Hk, S, hd]),
  };
}

/** One subgraph compiled to a function of its feeds, over the weights of its ONNX file. */
type Program = (feeds: Feeds) => Feeds;

function compileSubgraph(sg: SubgraphEntry, g: OnnxFile): Program {
  // A step reads and writes float values `v`; the attention step also gives the KV cache (`out`).
  const steps: ((v: Map<string, Float32Array>, feeds: Feeds, out: Feeds) => void)[] = [];
  for (const op of sg.ops) {
    switch (op.op) {
      case 'embed': {
        const table = g.floats(op.table);
        const [, D] = g.dims(op.table);
        steps.push((v, feeds) => {
          const ids = int64s(feeds[op.ids]);
          const y = new Float32Array(ids.length * D);
          ids.forEach((id, t) => y.set(table.subarray(id * D, (id + 1) * D), t * D));
          v.set(op.out, y);
        });
        break;
      }
      case 'rmsnorm': {
        const w = g.floats(op.weight);
        steps.push((v) => v.set(op.out, rmsnorm(v.get(op.x)!, w, op.dim, op.eps)));
        break;
      }
      case 'linear': {
        if (g.producer.has(`${op.out}.mm`)) {
          const l = g.intLinear(op);
          steps.push((v) => v.set(op.out, intLinear(l, v.get(op.x)!)));
        } else {
          const l = g.floatLinear(op);
          steps.push((v) => v.set(op.out, floatLinear(l, v.get(op.x)!)));
        }
        break;
      }
      case 'rope': {
        // cos/sin: rows of the graph's tables at position_ids.
        const tables = { cos: g.floats('cos_cache'), sin: g.floats('sin_cache') };
        const half = op.headDim / 2;
        steps.push((v, feeds) => {
          for (const [which, name] of [['cos', op.cos], ['sin', op.sin]] as const) {
            if (v.has(name)) continue;
            const pos = int64s(feeds[DECODER_IO.positionIds]);
            const y = new Float32Array(pos.length * half);
            pos.forEach((p, t) => y.set(tables[which].subarray(p * half, (p + 1) * half), t * half));
            v.set(name, y);
          }
          v.set(op.out, rope(v.get(op.x)!, v.get(op.cos)!, v.get(op.sin)!, op.heads, op.headDim));
        });
        break;
      }
      case 'attention':
        steps.push((v, feeds, out) => {
          const r = attention(op, v.get(op.q)!, v.get(op.k)!, v.get(op.v)!, feeds);
          v.set(op.out, r[op.out].data as Float32Array);
          for (const name of [DECODER_IO.presentKey(op.layer), DECODER_IO.presentValue(op.layer)]) out[name] = r[name];
        });
        break;
      case 'silu':
        steps.push((v) => v.set(op.out, v.get(op.x)!.map((x) => f(x * f(1 / (1 + Math.exp(-x)))))));
        break;
      case 'sigmoid':
        steps.push((v) => v.set(op.out, v.get(op.x)!.map((x) => 1 / (1 + Math.exp(-x)))));
        break;
      case 'mul':
      case 'add': {
        const mul = op.op === 'mul';
        steps.push((v) => {
          const a = v.get(op.a)!;
          const b = v.get(op.b)!;
          v.set(op.out, a.map((x, i) => (mul ? x * b[i] : x + b[i])));
        });
        break;
      }
      case 'gatherPositions': // the artifact's head gives logits at every position
        steps.push((v) => v.set(op.out, v.get(op.x)!));
        break;
      default:
        throw new LlmcError(`the qnn simulation has no ${op.op} op (subgraph ${sg.id})`, g.file);
    }
  }
  return (feeds) => {
    const v = new Map<string, Float32Array>();
    for (const i of sg.inputs) if (i.dtype === 'float32') v.set(i.name, feeds[i.name].data as Float32Array);
    const out: Feeds = {};
    for (const s of steps) s(v, feeds, out);
    for (const o of sg.outputs) {
      if (out[o.name]) continue;
      const data = v.get(o.name);
      if (!data) throw new Error(`internal: ${sg.id} computed no ${o.name}`);
      // The listed shape must hold what the ops computed (a damaged graph/subgraphs.json may say otherwise).
      const dims = o.shape.map(Number);
      if (!dims.every((d) => Number.isSafeInteger(d) && d > 0) || dims.reduce((a, b) => a * b, 1) !== data.length) {
        throw new LlmcError(`subgraph ${sg.id}: output ${o.name} of shape [${o.shape.join(', ')}] does not hold the ${data.length} values its ops compute`, 'graph/subgraphs.json');
      }
      out[o.name] = new ort.Tensor('float32', data, dims);
    }
    return out;
  };
}

/** The integer-pipeline simulation of every subgraph of the artifact in `dir`. */
export function openSimulation(dir: string, subgraphs: readonly SubgraphEntry[]): SubgraphExecutor {
  const programs = new Map<string, Program>();
  for (const s of subgraphs) if (s.file) programs.set(s.id, compileSubgraph({ ...s, ops: s.ops.map(irOp) }, new OnnxFile(path.join(dir, s.file))));
  return {
    run: async (sg, feeds) => programs.get(sg.id)!(feeds),
    close: async () => {},
  };
}
