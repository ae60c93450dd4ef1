/**
 * Writing lowered ONNX graphs to disk, streaming one tensor at a time:
 * - inline: one .onnx file, initializers spliced in as raw_data (protobuf caps a file at 2 GiB);
 * - external data: the graph in the .onnx file, tensors of EXTERNAL_MIN_BYTES or more in a data file
 *   beside it (TensorProto.data_location = EXTERNAL, external_data = location / offset / length,
 *   the location relative to the .onnx file's folder, as onnxruntime and TensorRT resolve it).
 *   Offsets are 64-byte aligned, 4096 for tensors of 1 MiB or more (onnxruntime maps page-aligned
 *   data instead of copying it). Several graphs may share one data file: a graph may refer to bytes
 *   another one wrote (a prefix of a tensor, for elastic levels) instead of writing its own.
 * Every file is written under a temp name and renamed when complete.
 */
import { promises as fsp } from 'node:fs';
import { LlmcError } from '../../core/errors.js';
import { AtomicFile } from '../../core/util/atomic.js';
import { MAX_PROTO_BYTES, splicedModel, type PendingTensor } from './lower.js';
import { onnx, type GraphProto, type ModelProto, type TensorProto } from './proto.js';

/** Tensors this big or bigger go to the data file (onnx's own size_threshold). */
export const EXTERNAL_MIN_BYTES = 1024;

export interface ExternalRef {
  offset: number;
  length: number;
}

const alignOf = (bytes: number) => (bytes >= 1 << 20 ? 4096 : 64);

/** A data file being written; graphs append tensors to it. */
export class ExternalData {
  private end = 0;

  private constructor(
    private readonly file: AtomicFile,
    /** The data file's name as graphs beside it refer to it. */
    readonly location: string,
  ) {}

  /** `expectedSize`: about how big it will be (a big file is then hashed while it is written). */
  static async create(finalPath: string, location: string, expectedSize?: number): Promise<ExternalData> {
    return new ExternalData(await AtomicFile.open(finalPath, { expectedSize }), location);
  }

  get size(): number {
    return this.end;
  }

  async append(bytes: Uint8Array): Promise<ExternalRef> {
    return this.appendPieces(bytes.length, [bytes]);
  }

  /** A tensor of `length` bytes given in pieces. */
  async appendPieces(length: number, pieces: Iterable<Uint8Array> | AsyncIterable<Uint8Array>): Promise<ExternalRef> {
    const offset = Math.ceil(this.end / alignOf(length)) * alignOf(length);
    if (offset > this.end) await this.file.write(new Uint8Array(offset - this.end));
    this.end = offset + (await writePieces(this.file, pieces, length, this.file.finalPath));
    return { offset, length };
  }

  commit(): Promise<void> {
    return this.file.commit();
  }

  abort(): Promise<void> {
    return this.file.abort();
  }

  /** Bytes written so far (to compare a tensor with what is there). */
  async read(ref: ExternalRef): Promise<Uint8Array> {
    const h = await fsp.open(this.file.tempPath, 'r');
    try {
      const buf = new Uint8Array(ref.length);
      const { bytesRead } = await h.read(buf, 0, ref.length, ref.offset);
      if (bytesRead !== ref.length) throw new LlmcError(`internal: short read of the data file at ${ref.offset}`, this.file.finalPath);
      return buf;
    } finally {
      await h.close();
    }
  }
}

/** Write a tensor's pieces; their total must be the announced length. */
async function writePieces(f: AtomicFile, pieces: Iterable<Uint8Array> | AsyncIterable<Uint8Array>, length: number, where: string): Promise<number> {
  let n = 0;
  for await (const p of pieces) {
    await f.write(p);
    n += p.length;
  }
  if (n !== length) throw new LlmcError(`internal: a tensor of ${length} bytes came out as ${n}`, where);
  return n;
}

/** A TensorProto whose data lies in `location` at `ref`. */
export function externalTensor(t: Pick<PendingTensor, 'name' | 'dims' | 'dataType'>, location: string, ref: ExternalRef): TensorProto {
  return {
    name: t.name,
    dims: t.dims,
    dataType: t.dataType,
    dataLocation: onnx.TensorProto.DataLocation.EXTERNAL,
    externalData: [
      { key: 'location', value: location },
      { key: 'offset', value: String(ref.offset) },
      { key: 'length', value: String(ref.length) },
    ],
  };
}

export interface OnnxParts {
  model: ModelProto;
  graph: GraphProto;
  tensors: readonly PendingTensor[];
}

/**
 * The sizes writeOnnx gives `g` with a data file of its own (`location`), without reading a weight:
 * the data file laid out as ExternalData lays it, small tensors inline as zeros of their length
 * (the same encoded size). For dry runs.
 */
export function externalSizes(g: OnnxParts, location: string): { graphBytes: number; dataBytes: number } {
  let end = 0;
  const initializers: TensorProto[] = [...(g.graph.initializer ?? [])];
  for (const t of g.tensors) {
    if (t.byteLength < EXTERNAL_MIN_BYTES) {
      initializers.push({ name: t.name, dims: t.dims, dataType: t.dataType, rawData: new Uint8Array(t.byteLength) });
      continue;
    }
    const offset = Math.ceil(end / alignOf(t.byteLength)) * alignOf(t.byteLength);
    end = offset + t.byteLength;
    initializers.push(externalTensor(t, location, { offset, length: t.byteLength }));
  }
  return { graphBytes: onnx.ModelProto.encode({ ...g.model, graph: { ...g.graph, initializer: initializers } }).finish().length, dataBytes: end };
}
/** Bytes of the graph written inline (one file). */
export function inlineSize(g: OnnxParts): number {
  return splicedModel(g.model, g.graph, g.tensors).total;
}

/**
 * Whether graph `g` goes out with external data: `true` always, `auto` when one file would pass
 * protobuf's 2 GiB, `false` never (refused above 2 GiB, before anything is written). `option` is the
 * target's key (`qnn.externalData`), `file` names the graph in the refusal.
 */
export function externalFor(g: OnnxParts, externalData: 'auto' | boolean, option: string, file: string): boolean {
  if (externalData === true) return true;
  const inline = inlineSize(g);
  if (inline <= MAX_PROTO_BYTES) return false;
  if (externalData === false) throw new LlmcError(`the graph would be ${(inline / 2 ** 30).toFixed(2)} GiB in one .onnx file, above protobuf's 2 GiB limit: use --opt ${option}=auto (or true)`, file, 2);
  return true;
}

export interface WrittenGraph {
  /** Bytes of the .onnx file. */
  graphBytes: number;
  /** Bytes this graph appended to the data file (0 inline). */
  appendedBytes: number;
  /** Where each external tensor's bytes are. */
  refs: Map<string, ExternalRef>;
}

/**
 * Write a graph to `graphPath`: inline when `data` is null (refused above 2 GiB), else its tensors of
 * EXTERNAL_MIN_BYTES or more go to `data` — or, where `reuse` names bytes already there, nowhere.
 */
export async function writeOnnx(
  graphPath: string,
  g: OnnxParts,
  data: ExternalData | null,
  opts: {
    /** Bytes already in the data file that equal these (a graph then refers to them instead). */
    reuse?: (t: PendingTensor, bytes: Uint8Array) => Promise<ExternalRef | null>;
    /** Tensors this big or bigger go to the data file (default EXTERNAL_MIN_BYTES). */
    minExternalBytes?: number;
    onTensor?: () => void;
  } = {},
): Promise<WrittenGraph> {
  const refs = new Map<string, ExternalRef>();
  if (!data) {
    const spliced = splicedModel(g.model, g.graph, g.tensors);
    if (spliced.total > MAX_PROTO_BYTES) {
      throw new LlmcError(`the graph is ${(spliced.total / 2 ** 30).toFixed(2)} GiB, above protobuf's 2 GiB limit for one .onnx file; write its weights as external data`, graphPath);
    }
    const f = await AtomicFile.open(graphPath, { expectedSize: spliced.total });
    try {
      await f.write(spliced.head);
      for (let i = 0; i < g.tensors.length; i++) {
        const t = g.tensors[i];
        await f.write(spliced.tensorHead(i));
        await writePieces(f, t.chunks?.() ?? [await t.bytes()], t.byteLength, `${graphPath}: ${t.name}`);
        opts.onTensor?.();
      }
      await f.commit();
    } catch (err) {
      await f.abort();
      throw err;
    }
    return { graphBytes: spliced.total, appendedBytes: 0, refs };
  }
  const before = data.size;
  const initializers: TensorProto[] = [...(g.graph.initializer ?? [])];
  for (const t of g.tensors) {
    let ref: ExternalRef | null = null;
    if (t.byteLength < (opts.minExternalBytes ?? EXTERNAL_MIN_BYTES)) {
      initializers.push({ name: t.name, dims: t.dims, dataType: t.dataType, rawData: await t.bytes() });
    } else if (t.chunks && !opts.reuse) {
      ref = await data.appendPieces(t.byteLength, t.chunks());
    } else {
      const bytes = await t.bytes();
      if (bytes.length !== t.byteLength) throw new LlmcError(`internal: tensor ${t.name} has ${bytes.length} bytes, ${t.byteLength} announced`);
      ref = (await opts.reuse?.(t, bytes)) ?? (await data.append(bytes));
    }
    if (ref) {
      refs.set(t.name, ref);
      initializers.push(externalTensor(t, data.location, ref));
    }
    opts.onTensor?.();
  }
  const bytes = onnx.ModelProto.encode({ ...g.model, graph: { ...g.graph, initializer: initializers } }).finish();
  const f = await AtomicFile.open(graphPath);
  try {
    await f.write(bytes);
    await f.commit();
  } catch (err) {
    await f.abort();
    throw err;
  }
  return { graphBytes: bytes.length, appendedBytes: data.size - before, refs };
}
