/**
 * The streamed decoder's weights as the checkpoint stores them. A piece above the keep budget is
 * fed its weights again at every step, so what a feed costs is the decoder's main cost at scale.
 *
 * - `storedLayoutPiece`: the lowering feeds a linear's weight transposed ([in, out], MatMul's
 *   layout); this rewrites the piece to take it as stored ([out, in]) through a Transpose that
 *   onnxruntime folds into the MatMul (FusedMatMul transB, at graph level `all`). No transpose is
 *   made per step, and the result is bit-identical (the same packed GEMM: MLAS packs B from either
 *   layout into the same panels; checked on TinyLlama's layer at 2–80 rows, and by the tests' ids).
 * - `WeightReader`: a plain bf16 or float32 tensor is read in chunks into one reused scratch and
 *   widened (bf16 is float32's upper half; core's WebAssembly SIMD kernel, ≈ 0.8 ns a value against
 *   ≈ 2 for a JS shift loop) into a float32 buffer the caller reuses, so a step allocates nothing;
 *   any other storage goes through the source's readF32.
 */
import { open, type FileHandle } from 'node:fs/promises';
import type { ModelSource } from '../../core/checkpoint/source.js';
import { LlmcError } from '../../core/errors.js';
import { bf16ToF32Into } from '../../core/quant/bf16.js';
import { onnx, type NodeProto } from '../onnx/proto.js';
import type { WeightInput } from '../onnx/lower.js';

/** A weight a piece is fed: its graph input, the HF tensor and the dims it is fed as (its stored shape for a linear). */
export interface FedWeight {
  input: string;
  source: string;
  dims: number[];
}

/** The piece's model with every transposed weight input taken as stored, and what it is fed. */
export function storedLayoutPiece(bytes: Uint8Array, weightInputs: readonly WeightInput[]): { bytes: Uint8Array; weights: FedWeight[] } {
  const transposed = new Map(weightInputs.filter((w) => w.transpose).map((w) => [w.name, w]));
  if (!transposed.size) return { bytes, weights: weightInputs.map((w) => ({ input: w.name, source: w.source, dims: w.dims })) };
  const model = onnx.ModelProto.decode(bytes);
  const g = model.graph!;
  const inputs = g.input ?? [];
  const taken = new Set(inputs.map((i) => i.name));
  const transposes: NodeProto[] = [];
  const weights: FedWeight[] = weightInputs.map((w) => ({ input: w.name, source: w.source, dims: w.dims }));
  for (const inp of inputs) {
    const w = transposed.get(inp.name!);
    if (!w) continue;
    let name = `${w.name}.stored`;
    while (taken.has(name)) name += '_';
    taken.add(name);
    transposes.push({ opType: 'Transpose', input: [name], output: [w.name], name: `${name}.T`, attribute: [{ name: 'perm', type: onnx.AttributeProto.AttributeType.INTS, ints: [1, 0] }] });
    inp.name = name;
    inp.type!.tensorType!.shape!.dim = w.transpose!.map((d) => ({ dimValue: d }));
    weights[weightInputs.indexOf(w)] = { input: name, source: w.source, dims: [...w.transpose!] };
  }
  g.node = [...transposes, ...(g.node ?? [])];
  return { bytes: onnx.ModelProto.encode(model).finish(), weights };
}

/** Values of a chunked read: 4 MiB of bf16 at a time. */
const CHUNK = 1 << 21;

/** Reads weights into caller-owned float32 buffers through one reused scratch. */
export class WeightReader {
  private scratch = new Uint16Array(CHUNK);

  constructor(private readonly source: ModelSource) {}

  /** Tensor `w`'s values into `into` (its length: the tensor's size) or a new array. */
  async read(w: FedWeight, into?: Float32Array): Promise<Float32Array> {
    const n = w.dims.reduce((a, d) => a * d, 1);
    if (into && into.length !== n) throw new LlmcError(`internal: a ${into.length}-value buffer for "${w.source}" (${n} values)`);
    const at = this.source.layout(w.source);
    if (at && !at.rowMap && !at.colMap && at.rows * at.cols === n && (at.dtype === 'BF16' || at.dtype === 'F32')) {
      const out = into ?? new Float32Array(n);
      const fd = await open(at.file, 'r');
      try {
        // a non-finite weight: readF32 refuses it (or reads it, --allow-nonfinite) as every other path does
        if (at.dtype === 'F32' ? await readF32Into(fd, at.offset, out, at.file, w.source) : await this.widenInto(fd, at.offset, out, at.file, w.source)) return out;
      } finally {
        await fd.close();
      }
    }
    const values = await this.source.readF32(w.source);
    if (values.length !== n) throw new LlmcError(`tensor "${w.source}" has ${values.length} values, the model needs ${n}`, this.source.description);
    if (!into) return values;
    into.set(values);
    return into;
  }

  /** bf16 at `offset` widened into `out`; false when a value is Inf/NaN. */
  private async widenInto(fd: FileHandle, offset: number, out: Float32Array, file: string, what: string): Promise<boolean> {
    const raw = this.scratch;
    for (let at = 0; at < out.length; at += CHUNK) {
      const m = Math.min(CHUNK, out.length - at);
      await readFully(fd, new Uint8Array(raw.buffer, 0, 2 * m), offset + 2 * at, file, what);
      if (!bf16ToF32Into(raw.subarray(0, m), out.subarray(at, at + m))) return false;
    }
    return true;
  }
}

async function readF32Into(fd: FileHandle, offset: number, out: Float32Array, file: string, what: string): Promise<boolean> {
  await readFully(fd, new Uint8Array(out.buffer, out.byteOffset, out.byteLength), offset, file, what);
  for (let i = 0; i < out.length; i++) if (!Number.isFinite(out[i])) return false;
  return true;
}

async function readFully(fd: FileHandle, buf: Uint8Array, offset: number, file: string, what: string): Promise<void> {
  for (let got = 0; got < buf.byteLength; ) {
    const { bytesRead } = await fd.read(buf, got, buf.byteLength - got, offset + got);
    if (bytesRead === 0) throw new LlmcError(`tensor "${what}" is cut short`, file);
    got += bytesRead;
  }
}
