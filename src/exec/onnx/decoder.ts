/**
 * The IR lowered as an exported decoder graph, in the I/O convention of Hugging Face Optimum's
 * decoder export, which transformers.js, onnxruntime-genai and TensorRT's ONNX parser read:
 *
 *   inputs   input_ids       int64 [batch_size, sequence_length]
 *            attention_mask  int64 [batch_size, total_sequence_length]   (1 = attend; padding 0)
 *            position_ids    int64 [batch_size, sequence_length]
 *            past_key_values.{l}.key|value  [batch_size, kv_heads_l, past_sequence_length, head_dim]
 *   outputs  logits          float32 [batch_size, sequence_length, vocab]
 *            present.{l}.key|value          [batch_size, kv_heads_l, total_sequence_length, head_dim]
 *
 * The KV cache keeps the KV heads (GQA stays GQA: no repeated K/V). Rope tables are initializers
 * [max_position_embeddings, head_dim/2] gathered by position_ids; the mask is explicit: causal over
 * the cache index and the attention_mask's padding. The ops are lowerOp's (./lower.ts) in a
 * LoweringMode whose weights follow a format per tensor (float32, float16, int8 per channel, int4
 * blockwise as MatMulNBits or opset-21 DequantizeLinear). These pieces (decoderIo, paddedCausalMask,
 * the weight lowering, ./external.ts) are what other exporters of the IR reuse.
 */
import type { ModelSource } from '../../core/checkpoint/source.js';
import { LlmcError } from '../../core/errors.js';
import { IO } from '../../core/ir/build.js';
import { primitiveOps } from '../../core/ir/expand.js';
import type { ModelGraph, Op } from '../../core/ir/ir.js';
import { assertPositionTables, localRopeSpec, positionTables } from '../../core/ir/rope.js';
import { encodeF16 } from '../../core/util/half.js';
import { transpose } from '../../core/util/transpose.js';
import { LLMC_VERSION } from '../../core/version.js';
import { causalMask, floatLinear, lowerOps, OnnxGraphBuilder, valueInfo, type LinearOp, type LoweringMode, type PendingTensor, type WeightLowering } from './lower.js';
import { attr, DT_BOOL, DT_FLOAT, DT_FLOAT16, DT_INT4, DT_INT64, DT_INT8, DT_UINT4, DT_UINT8, type GraphProto, type ModelProto, type ValueInfoProto } from './proto.js';
import {
  dqCodes,
  packMatMulNBitsZeroPoints,
  packNibbles,
  paddedInt4Codes,
  quantizeInt4Rows,
  quantizeInt8Rows,
  scaleBytes,
  type Int4Weights,
  type ScaleDtype,
} from './quant.js';

export type Int4Encoding = 'matmulnbits' | 'dequantizelinear';

/** How one weight is stored and computed with. */
export type WeightFormat =
  | { kind: 'fp32' }
  | { kind: 'fp16' }
  /** Symmetric, per output channel. */
  | { kind: 'int8' }
  /** Blockwise along the input axis. */
  | { kind: 'int4'; block: number; zeroPoints: boolean; encoding: Int4Encoding };

/**
 * How a linear's weight is laid out: `in-out` = [in, out] (MatMul's own); `out-in` = W's [out, in]
 * with a Transpose in the graph (no transposing while exporting; a prefix of output rows is a prefix
 * of the bytes, which elastic levels share). Default: out-in for float formats, in-out for int8 and
 * int4 DequantizeLinear (onnxruntime fuses DequantizeLinear → MatMul). MatMulNBits is always
 * [out, in/block, ...].
 */
export type Layout = 'in-out' | 'out-in';

export interface DecoderFormats {
  /** Activations and the KV cache: float32, or float16 with RMSNorm, softmax and routing in float32. */
  compute: 'fp32' | 'fp16';
  /** The format of a linear's weight ('linear') or of an embedding table read by Gather ('embedding'). */
  format(name: string, role: 'linear' | 'embedding', op?: LinearOp): WeightFormat;
  /** Default: in-out. */
  layout?(name: string): Layout;
}

/** Graph I/O names and symbolic dims of the decoder convention. */
export const DECODER_IO = {
  inputIds: 'input_ids',
  attentionMask: 'attention_mask',
  positionIds: 'position_ids',
  logits: 'logits',
  pastKey: (l: number) => `past_key_values.${l}.key`,
  pastValue: (l: number) => `past_key_values.${l}.value`,
  presentKey: (l: number) => `present.${l}.key`,
  presentValue: (l: number) => `present.${l}.value`,
  batch: 'batch_size',
  sequence: 'sequence_length',
  past: 'past_sequence_length',
  total: 'total_sequence_length',
} as const;

/** The shapes of a decoder graph's KV cache (per layer: KV heads kept). */
export interface DecoderIo {
  kvHeads: number[];
  headDim: number;
  vocab: number;
  /** 'float32' | 'float16': the KV cache's and activations' element type. */
  cacheDtype: 'float32' | 'float16';
  maxPositions: number;
}

export interface DecoderGraph {
  model: ModelProto;
  /** Nodes, small constants and I/O; the weights are `tensors`, written by ./external.ts. */
  graph: GraphProto;
  tensors: PendingTensor[];
  opset: number;
  io: DecoderIo;
  /** Weights by format, for the manifest: HF tensor → format label. */
  formats: Record<string, string>;
}

export const formatLabel = (f: WeightFormat): string =>
  f.kind === 'int4' ? `int4-b${f.block}${f.zeroPoints ? '-zp' : ''}-${f.encoding === 'matmulnbits' ? 'MatMulNBits' : 'DequantizeLinear'}` : f.kind;

/**
 * Parts of one quantized weight (codes, scales, zero points) computed on the first read and released
 * once every part was taken: the source is read once and one tensor's parts are in memory at a time.
 */
function sharedParts(n: number, compute: () => Promise<Uint8Array[]>): (() => Promise<Uint8Array>)[] {
  let pending: Promise<Uint8Array[]> | null = null;
  let taken = 0;
  return Array.from({ length: n }, (_, i) => async () => {
    pending ??= compute();
    const parts = await pending;
    if (++taken === n) pending = null;
    return parts[i];
  });
}

const u8 = (a: Int8Array | Float32Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

/** The [rows, cols] = [out, in] matrix of a weight, checked against the model. */
async function readMatrix(source: ModelSource, name: string, rows: number, cols: number): Promise<Float32Array> {
  const data = await source.readF32(name);
  if (data.length !== rows * cols) throw new LlmcError(`tensor "${name}" has ${data.length} values, the model needs [${rows}, ${cols}]`, source.description);
  return data;
}

/** Weights in the formats `formats` chooses (see WeightFormat), each lowered its ecosystem's way. */
export class FormattedWeights implements WeightLowering {
  readonly used = new Map<string, WeightFormat>();

  constructor(private readonly formats: DecoderFormats) {}

  private get scaleDtype(): ScaleDtype {
    return this.formats.compute;
  }

  private floatType(f: WeightFormat): number {
    return f.kind === 'fp16' ? DT_FLOAT16 : DT_FLOAT;
  }

  private note(name: string, f: WeightFormat): WeightFormat {
    this.used.set(name, f);
    return f;
  }

  vector(b: OnnxGraphBuilder, name: string, dims: number[]): string {
    return b.weight(name, dims, null, b.mode.compute);
  }

  gather(b: OnnxGraphBuilder, op: Extract<Op, { op: 'embed' }>, dims: [number, number]): string {
    const f = this.note(op.table, this.formats.format(op.table, 'embedding'));
    const [V, D] = dims;
    if (f.kind === 'fp32' || f.kind === 'fp16') {
      const dt = this.floatType(f);
      const rows = b.node('Gather', [b.weight(op.table, dims, null, dt), op.ids], [attr('axis', 0)], dt === b.mode.compute ? op.out : undefined);
      if (dt !== b.mode.compute) b.node('Cast', [rows], [attr('to', b.mode.compute)], op.out);
      return op.out;
    }
    if (f.kind !== 'int8') throw new LlmcError(`embeddings cannot be ${formatLabel(f)} (fp32, fp16 or int8)`);
    // Per-row int8: gather the codes and each row's scale, multiply (no dequantized table).
    const { q, s } = this.int8(b, op.table, V, D, 'out-in');
    const codes = b.node('Cast', [b.node('Gather', [q, op.ids], [attr('axis', 0)])], [attr('to', b.mode.compute)]);
    const scale = b.node('Unsqueeze', [b.node('Gather', [s, op.ids], [attr('axis', 0)]), b.i64([-1])]);
    return b.node('Mul', [codes, scale], [], op.out);
  }

  linear(b: OnnxGraphBuilder, op: LinearOp, tied: boolean, out?: string): string {
    const f = this.note(op.weight, this.formats.format(op.weight, 'linear', op));
    const N = op.outFeatures;
    const K = op.inFeatures;
    // A tied lm_head reads the embedding table as it is stored, [vocab, hidden] = [out, in]. Float
    // weights default to their own [out, in] too: nothing to transpose while exporting (a Transpose of
    // an initializer, which runtimes fold when they load the graph).
    const float = f.kind === 'fp32' || f.kind === 'fp16';
    const layout: Layout = tied ? 'out-in' : (this.formats.layout?.(op.weight) ?? (float ? 'out-in' : 'in-out'));
    const apply = (w: string) => {
      if (tied) {
        const x2 = b.node('Reshape', [op.x, b.i64([-1, K])]);
        const g = b.node('Gemm', [x2, w], [attr('transB', 1)]);
        const lead = b.node('Shape', [op.x], [attr('start', 0), attr('end', -1)]);
        return b.node('Reshape', [g, b.node('Concat', [lead, b.i64([N])], [attr('axis', 0)])], [], out);
      }
      const wT = layout === 'out-in' ? b.node('Transpose', [w], [attr('perm', [1, 0], 'ints')]) : w;
      return b.node('MatMul', [op.x, wT], [], out);
    };
    switch (f.kind) {
      case 'fp32':
      case 'fp16': {
        const dt = this.floatType(f);
        if (layout === 'in-out' || tied) return floatLinear(b, op, tied, out, dt);
        const w = b.weight(op.weight, [N, K], null, dt);
        return apply(dt === b.mode.compute ? w : b.node('Cast', [w], [attr('to', b.mode.compute)]));
      }
      case 'int8': {
        const { q, s } = this.int8(b, op.weight, N, K, layout);
        return apply(b.node('DequantizeLinear', [q, s], [attr('axis', layout === 'in-out' ? 1 : 0)]));
      }
      case 'int4':
        if (f.encoding === 'matmulnbits') return this.matMulNBits(b, op, f, out);
        return apply(this.dqInt4(b, op.weight, N, K, f, layout));
    }
  }

  /** int8 codes and per-output-channel scales, stored [in, out] or [out, in]. */
  private int8(b: OnnxGraphBuilder, name: string, N: number, K: number, layout: Layout): { q: string; s: string } {
    const base = layout === 'in-out' ? `${name}^T` : name;
    const qName = `${base}.int8`;
    const sName = `${name}.int8_scales`;
    if (!b.weights.has(qName)) {
      const dtype = this.scaleDtype;
      const [qBytes, sBytes] = sharedParts(2, async () => {
        const w = await readMatrix(b.source, name, N, K);
        const { q, scales } = quantizeInt8Rows(w, N, K, dtype);
        return [layout === 'in-out' ? transpose(u8(q), N, K) : u8(q), scaleBytes(scales, dtype)];
      });
      b.tensor({ name: qName, dims: layout === 'in-out' ? [K, N] : [N, K], dataType: DT_INT8, byteLength: N * K, bytes: qBytes });
      b.tensor({ name: sName, dims: [N], dataType: b.mode.compute, byteLength: N * (dtype === 'fp16' ? 2 : 4), bytes: sBytes });
    }
    return { q: qName, s: sName };
  }

  private int4(b: OnnxGraphBuilder, name: string, N: number, K: number, f: Extract<WeightFormat, { kind: 'int4' }>): () => Promise<Int4Weights> {
    const dtype = this.scaleDtype;
    return async () => quantizeInt4Rows(await readMatrix(b.source, name, N, K), N, K, f.block, f.zeroPoints, dtype);
  }

  private matMulNBits(b: OnnxGraphBuilder, op: LinearOp, f: Extract<WeightFormat, { kind: 'int4' }>, out?: string): string {
    const N = op.outFeatures;
    const K = op.inFeatures;
    const nb = Math.ceil(K / f.block);
    const base = `${op.weight}.MatMulNBits`;
    const names = [`${base}.B`, `${base}.scales`, ...(f.zeroPoints ? [`${base}.zero_points`] : [])];
    if (!b.weights.has(names[0])) {
      const quantize = this.int4(b, op.weight, N, K, f);
      const dtype = this.scaleDtype;
      const parts = sharedParts(names.length, async () => {
        const q = await quantize();
        return [packNibbles(paddedInt4Codes(q)), scaleBytes(q.scales, dtype), ...(q.zeroPoints ? [packMatMulNBitsZeroPoints(q.zeroPoints, N, nb)] : [])];
      });
      b.tensor({ name: names[0], dims: [N, nb, f.block / 2], dataType: DT_UINT8, byteLength: (N * nb * f.block) / 2, bytes: parts[0] });
      b.tensor({ name: names[1], dims: [N * nb], dataType: b.mode.compute, byteLength: N * nb * (dtype === 'fp16' ? 2 : 4), bytes: parts[1] });
      if (f.zeroPoints) b.tensor({ name: names[2], dims: [N * Math.ceil(nb / 2)], dataType: DT_UINT8, byteLength: N * Math.ceil(nb / 2), bytes: parts[2] });
    }
    const attrs = [attr('K', K), attr('N', N), attr('bits', 4), attr('block_size', f.block)];
    return b.node('MatMulNBits', [op.x, ...names], attrs, out, 'com.microsoft');
  }

  /** DequantizeLinear (opset 21) of blockwise int4: blocks run along the input axis in either layout. */
  private dqInt4(b: OnnxGraphBuilder, name: string, N: number, K: number, f: Extract<WeightFormat, { kind: 'int4' }>, layout: Layout): string {
    const nb = Math.ceil(K / f.block);
    const base = layout === 'in-out' ? `${name}^T` : name;
    const names = [`${base}.int4`, `${base}.int4_scales`, ...(f.zeroPoints ? [`${base}.int4_zero_points`] : [])];
    const dims = layout === 'in-out' ? [K, N] : [N, K];
    const sDims = layout === 'in-out' ? [nb, N] : [N, nb];
    if (!b.weights.has(names[0])) {
      const quantize = this.int4(b, name, N, K, f);
      const dtype = this.scaleDtype;
      const flip = layout === 'in-out';
      const parts = sharedParts(names.length, async () => {
        const q = await quantize();
        const codes = dqCodes(q);
        return [
          packNibbles(flip ? transpose(codes, N, K) : codes),
          scaleBytes(flip ? transpose(q.scales, N, nb) : q.scales, dtype),
          ...(q.zeroPoints ? [packNibbles(flip ? transpose(q.zeroPoints, N, nb) : q.zeroPoints)] : []),
        ];
      });
      const codeType = f.zeroPoints ? DT_UINT4 : DT_INT4;
      b.tensor({ name: names[0], dims, dataType: codeType, byteLength: Math.ceil((N * K) / 2), bytes: parts[0] });
      b.tensor({ name: names[1], dims: sDims, dataType: b.mode.compute, byteLength: N * nb * (dtype === 'fp16' ? 2 : 4), bytes: parts[1] });
      if (f.zeroPoints) b.tensor({ name: names[2], dims: sDims, dataType: DT_UINT4, byteLength: Math.ceil((N * nb) / 2), bytes: parts[2] });
    }
    return b.node('DequantizeLinear', names, [attr('axis', layout === 'in-out' ? 0 : 1), attr('block_size', f.block)]);
  }
}

/**
 * The decoder convention's mask: causal over the cache index (query t at P+t sees keys s ≤ P+t, and
 * within the sliding window) and the attention_mask's zeros (padding), [B, 1, 1, T, S].
 */
export function paddedCausalMask(attentionMask: string): LoweringMode['mask'] {
  return (b, presentK, q, window) => {
    const causal = causalMask(b, presentK, q, window);
    const keep = b.once('padding', () => b.node('Unsqueeze', [b.node('Cast', [attentionMask], [attr('to', DT_BOOL)]), b.i64([1, 2, 3])]));
    return b.node('And', [causal, keep]);
  };
}

/** Graph inputs and outputs of the decoder convention for these KV-cache shapes. */
export function decoderIo(io: DecoderIo): { inputs: ValueInfoProto[]; outputs: ValueInfoProto[] } {
  const D = DECODER_IO;
  const cache = io.cacheDtype === 'float16' ? DT_FLOAT16 : DT_FLOAT;
  const inputs = [
    valueInfo(D.inputIds, DT_INT64, [D.batch, D.sequence]),
    valueInfo(D.attentionMask, DT_INT64, [D.batch, D.total]),
    valueInfo(D.positionIds, DT_INT64, [D.batch, D.sequence]),
  ];
  const outputs = [valueInfo(D.logits, DT_FLOAT, [D.batch, D.sequence, io.vocab])];
  io.kvHeads.forEach((h, l) => {
    inputs.push(valueInfo(D.pastKey(l), cache, [D.batch, h, D.past, io.headDim]), valueInfo(D.pastValue(l), cache, [D.batch, h, D.past, io.headDim]));
    outputs.push(valueInfo(D.presentKey(l), cache, [D.batch, h, D.total, io.headDim]), valueInfo(D.presentValue(l), cache, [D.batch, h, D.total, io.headDim]));
  });
  return { inputs, outputs };
}

/**
 * Lower `graph` (the unit's IR, or a level's narrowed one) with weights from `source` as a decoder
 * graph. The opset is 17, or 21 where int4 DequantizeLinear needs it.
 */
/**
 * The opset a graph of these ops needs: 17; 19 where an int8 DequantizeLinear has float16 scales
 * (DequantizeLinear-13 takes float32 scales only); 21 where int4 DequantizeLinear is used.
 */
export function opsetFor(ops: readonly Op[], formats: DecoderFormats): number {
  let opset = 17;
  for (const op of ops) {
    if (op.op !== 'linear') continue;
    const f = formats.format(op.weight, 'linear', op);
    if (f.kind === 'int4' && f.encoding === 'dequantizelinear') return 21;
    if (f.kind === 'int8' && formats.compute === 'fp16') opset = 19;
  }
  return opset;
}

/**
 * Rope tables for every position (initializers cos_cache / sin_cache [max_position_embeddings, hd/2]
 * in the compute dtype), gathered by `positionIds` into the IR's cos/sin values [B, T, hd/2].
 */
export function gatherRope(b: OnnxGraphBuilder, spec: ModelGraph['spec'], positionIds: string, which: 'global' | 'local' = 'global'): void {
  const compute = b.mode.compute;
  const half = spec.headDim / 2;
  const maxPositions = spec.maxPositions;
  assertPositionTables(spec, 'the ONNX decoder graph (position_ids in)');
  const local = which === 'local' ? localRopeSpec(spec) : null;
  if (which === 'local' && !local) throw new LlmcError('internal: local rope tables of a model without a local rope');
  const tables = () => positionTables(local ?? spec, 'the ONNX decoder graph (position_ids in)');
  const suffix = local ? '_local' : '';
  let cache: ReturnType<typeof tables> | null = null;
  const table = (which: 'cos' | 'sin'): PendingTensor => ({
    name: `${which}${suffix}_cache`,
    dims: [maxPositions, half],
    dataType: compute,
    byteLength: maxPositions * half * (compute === DT_FLOAT16 ? 2 : 4),
    bytes: async () => {
      cache ??= tables();
      const v = cache[which];
      if (which === 'sin') cache = null;
      return compute === DT_FLOAT16 ? new Uint8Array(encodeF16(v).buffer) : new Uint8Array(v.buffer);
    },
  });
  for (const which of ['cos', 'sin'] as const) {
    b.node('Gather', [b.tensor(table(which)), positionIds], [attr('axis', 0)], which === 'cos' ? (local ? IO.cosLocal : IO.cos) : local ? IO.sinLocal : IO.sin);
  }
}

export function lowerDecoder(source: ModelSource, graph: ModelGraph, formats: DecoderFormats): DecoderGraph {
  const spec = graph.spec;
  const compute = formats.compute === 'fp16' ? DT_FLOAT16 : DT_FLOAT;
  const weights = new FormattedWeights(formats);
  const ops = primitiveOps(graph);
  const opset = opsetFor(ops, formats);
  const mode: LoweringMode = { opset, compute, weights, ropeAxis: 2, mask: paddedCausalMask(DECODER_IO.attentionMask), allPositions: true };
  const b = new OnnxGraphBuilder(source, mode);
  const maxPositions = spec.maxPositions;

  // Rope tables for every position, gathered by position_ids into the IR's cos/sin values [B, T, hd/2].
  gatherRope(b, spec, DECODER_IO.positionIds);
  if (spec.localRope) gatherRope(b, spec, DECODER_IO.positionIds, 'local');

  // The IR's KV-cache values take the convention's names; logits leave as float32.
  const kvHeads: number[] = [];
  const renamed = ops.map((op): Op => {
    if (op.op === 'attention') {
      kvHeads[op.layer] = op.kvHeads;
      const l = op.layer;
      return { ...op, pastK: DECODER_IO.pastKey(l), pastV: DECODER_IO.pastValue(l), presentK: DECODER_IO.presentKey(l), presentV: DECODER_IO.presentValue(l) };
    }
    if ('out' in op && op.out === IO.logits && compute !== DT_FLOAT) return { ...op, out: 'logits_fp16' } as Op;
    return op;
  });
  lowerOps(b, graph, renamed);
  if (compute !== DT_FLOAT) b.node('Cast', ['logits_fp16'], [attr('to', DT_FLOAT)], DECODER_IO.logits);

  const io: DecoderIo = { kvHeads, headDim: spec.headDim, vocab: spec.vocabSize, cacheDtype: compute === DT_FLOAT16 ? 'float16' : 'float32', maxPositions };
  const { inputs, outputs } = decoderIo(io);
  const domains = b.nodes.some((n) => n.domain === 'com.microsoft') ? [{ domain: 'com.microsoft', version: 1 }] : [];
  return {
    model: {
      irVersion: opset >= 21 ? 10 : 8,
      opsetImport: [{ domain: '', version: opset }, ...domains],
      producerName: 'llmc',
      producerVersion: LLMC_VERSION,
      docString: `${spec.modelType} decoder (${formats.compute} compute) from ${source.description}`,
    },
    graph: { name: 'llmc-decoder', node: b.nodes, initializer: b.consts, input: inputs, output: outputs },
    tensors: [...b.weights.values()],
    opset,
    io,
    formats: Object.fromEntries([...weights.used].map(([k, f]) => [k, formatLabel(f)])),
  };
}
