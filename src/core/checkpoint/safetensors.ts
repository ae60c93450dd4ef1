/**
 * safetensors, read lazily with positional reads and validated before anything is trusted,
 * and written the way Hugging Face's `safetensors` library writes it.
 */
import { promises as fsp } from 'node:fs';
import { LlmcError, summarize } from '../errors.js';
import { AtomicFile, ioError } from '../util/atomic.js';
import { decodeBf16, decodeF16, encodeBf16, encodeF16 } from '../util/half.js';
import { parseJsonObject } from '../util/json.js';

export const DTYPE_BYTES = { F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, BOOL: 1 } as const;
export type DType = keyof typeof DTYPE_BYTES;
/** The dtypes llmc reads as float weights. */
export type FloatDType = 'F32' | 'F16' | 'BF16';

export interface TensorInfo {
  name: string;
  dtype: DType;
  shape: number[];
  /** The file that holds it. */
  file: string;
  /** Absolute byte offset in `file`. */
  offset: number;
  byteLength: number;
}

export const numel = (shape: readonly number[]) => shape.reduce((a, b) => a * b, 1);

/** Largest header we accept (the format's own limit is 100 MB). */
const MAX_HEADER = 100_000_000;

export class SafetensorsFile {
  private constructor(
    readonly path: string,
    private handle: fsp.FileHandle,
    readonly size: number,
    readonly headerBytes: Buffer,
    readonly tensors: Map<string, TensorInfo>,
    readonly metadata: Record<string, string>,
  ) {}

  static async open(file: string): Promise<SafetensorsFile> {
    let handle: fsp.FileHandle;
    try {
      // Only regular files (checked before opening: opening a FIFO blocks).
      if (!(await fsp.stat(file)).isFile()) throw new LlmcError('not a regular file', file);
      handle = await fsp.open(file, 'r');
    } catch (err) {
      throw ioError(err, file, 'open safetensors file');
    }
    try {
      const { size } = await handle.stat();
      if (size < 8) throw new LlmcError(`truncated safetensors file: ${size} bytes, shorter than the 8-byte header length`, file);
      const lenBuf = Buffer.alloc(8);
      await handle.read(lenBuf, 0, 8, 0);
      const n = lenBuf.readBigUInt64LE(0);
      if (n > BigInt(Math.min(size - 8, MAX_HEADER))) {
        throw new LlmcError(`corrupt or truncated safetensors file: header length ${n} exceeds the file (${size} bytes)`, file);
      }
      const headerBytes = Buffer.alloc(Number(n));
      await handle.read(headerBytes, 0, headerBytes.length, 8);
      let header: Record<string, unknown>;
      try {
        header = parseJsonObject(headerBytes.toString('utf8'), file);
      } catch (e) {
        throw new LlmcError(`corrupt safetensors header: ${(e as Error).message}`, file);
      }
      const dataStart = 8 + headerBytes.length;
      const { tensors, metadata } = parseHeader(header, file, dataStart, size - dataStart);
      return new SafetensorsFile(file, handle, size, headerBytes, tensors, metadata);
    } catch (err) {
      await handle.close();
      throw err;
    }
  }

  /** The raw little-endian bytes of one tensor, in a fresh buffer. */
  async readRaw(info: TensorInfo): Promise<Buffer> {
    return this.readInto(info, Buffer.allocUnsafe(info.byteLength));
  }

  /**
   * Read one tensor's bytes into the start of `target` (at least info.byteLength long) and
   * return that part of it. Lets streaming callers reuse one buffer instead of faulting in
   * fresh memory for every tensor.
   */
  async readInto(info: TensorInfo, target: Uint8Array): Promise<Buffer> {
    if (target.byteLength < info.byteLength) throw new RangeError(`buffer of ${target.byteLength} bytes is too small for tensor "${info.name}" (${info.byteLength})`);
    const buf = Buffer.from(target.buffer, target.byteOffset, info.byteLength);
    let got = 0;
    while (got < buf.length) {
      const { bytesRead } = await this.handle.read(buf, got, buf.length - got, info.offset + got);
      if (bytesRead === 0) throw new LlmcError(`truncated while reading tensor "${info.name}"`, this.path);
      got += bytesRead;
    }
    return buf;
  }

  async close(): Promise<void> {
    await this.handle.close();
  }
}

function parseHeader(header: Record<string, unknown>, file: string, dataStart: number, dataSize: number) {
  const tensors = new Map<string, TensorInfo>();
  let metadata: Record<string, string> = {};
  const spans: [number, number, string][] = [];
  for (const [name, raw] of Object.entries(header)) {
    if (name === '__metadata__') {
      metadata = (raw ?? {}) as Record<string, string>;
      continue;
    }
    const t = raw as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
    const bad = (why: string) => new LlmcError(`corrupt safetensors header: tensor "${name}" ${why}`, file);
    if (typeof t !== 'object' || t === null) throw bad('is not an object');
    if (typeof t.dtype !== 'string' || !(t.dtype in DTYPE_BYTES)) throw bad(`has unsupported dtype ${summarize(t.dtype)}`);
    if (!Array.isArray(t.shape) || !t.shape.every((d) => Number.isInteger(d) && d >= 0)) throw bad('has an invalid shape');
    const off = t.data_offsets;
    if (!Array.isArray(off) || off.length !== 2 || !off.every((o) => Number.isInteger(o) && o >= 0) || off[0] > off[1]) {
      throw bad('has invalid data_offsets');
    }
    const [begin, end] = off as [number, number];
    if (end > dataSize) {
      throw bad(`runs past the end of the file (data ends at byte ${dataSize}, tensor at ${end}): the file is truncated or corrupt`);
    }
    const dtype = t.dtype as DType;
    const shape = t.shape as number[];
    const expected = numel(shape) * DTYPE_BYTES[dtype];
    if (expected !== end - begin) throw bad(`has ${end - begin} bytes but shape ${summarize(shape)} × ${dtype} needs ${expected}`);
    tensors.set(name, { name, dtype, shape, file, offset: dataStart + begin, byteLength: end - begin });
    spans.push([begin, end, name]);
  }
  spans.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  for (let i = 1; i < spans.length; i++) {
    if (spans[i][0] < spans[i - 1][1]) {
      throw new LlmcError(`corrupt safetensors header: tensors "${spans[i - 1][2]}" and "${spans[i][2]}" overlap`, file);
    }
  }
  return { tensors, metadata };
}

/** Decode raw tensor bytes of a float dtype into f32. Integer dtypes are refused. */
export function toF32(raw: Buffer, dtype: DType, what: string): Float32Array {
  // Copy into an aligned buffer: Buffer slices from the pool need not be 4-byte aligned.
  const aligned = raw.byteOffset % 4 === 0 ? raw : Buffer.from(raw);
  switch (dtype) {
    case 'F32':
      return new Float32Array(aligned.buffer, aligned.byteOffset, aligned.length / 4);
    case 'F16':
      return decodeF16(new Uint16Array(aligned.buffer, aligned.byteOffset, aligned.length / 2));
    case 'BF16':
      return decodeBf16(new Uint16Array(aligned.buffer, aligned.byteOffset, aligned.length / 2));
    case 'F64': {
      const src = new Float64Array(Buffer.from(raw).buffer, 0, raw.length / 8);
      return Float32Array.from(src);
    }
    default:
      throw new LlmcError(`tensor "${what}" has dtype ${dtype}, not a float type`);
  }
}

/** Encode f32 values in a float dtype's little-endian bytes. */
export function fromF32(values: Float32Array, dtype: FloatDType): Uint8Array {
  switch (dtype) {
    case 'F32':
      return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
    case 'F16': {
      const h = encodeF16(values);
      return new Uint8Array(h.buffer, h.byteOffset, h.byteLength);
    }
    case 'BF16': {
      const h = encodeBf16(values);
      return new Uint8Array(h.buffer, h.byteOffset, h.byteLength);
    }
  }
}

export interface TensorToWrite {
  name: string;
  dtype: DType;
  shape: number[];
  /** Produces the tensor's bytes when it is its turn: only one tensor is in memory at a time. */
  bytes: () => Uint8Array | Promise<Uint8Array>;
}

/**
 * Write a safetensors file atomically, tensor by tensor. Layout as the reference writer:
 * tensors ordered by dtype size (largest first) then name, header padded with spaces to 8 bytes.
 */
/** The file's tensor order and header (JSON padded to 8 bytes), and its total size. */
export function safetensorsLayout<T extends Pick<TensorToWrite, 'name' | 'dtype' | 'shape'>>(
  tensors: readonly T[],
  metadata: Record<string, string> = { format: 'pt' },
): { ordered: T[]; json: string; fileSize: number } {
  const ordered = [...tensors].sort(
    (a, b) => DTYPE_BYTES[b.dtype] - DTYPE_BYTES[a.dtype] || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0),
  );
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const t of ordered) {
    const len = numel(t.shape) * DTYPE_BYTES[t.dtype];
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + len] };
    offset += len;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + Buffer.byteLength(json)) % 8)) % 8);
  return { ordered, json, fileSize: 8 + Buffer.byteLength(json) + offset };
}

export async function writeSafetensors(
  file: string,
  tensors: TensorToWrite[],
  metadata: Record<string, string> = { format: 'pt' },
): Promise<void> {
  const { ordered, json, fileSize } = safetensorsLayout(tensors, metadata);
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
  const out = await AtomicFile.open(file, { expectedSize: fileSize });
  try {
    await out.write(prefix);
    await out.write(Buffer.from(json));
    for (const t of ordered) {
      const bytes = await t.bytes();
      const len = numel(t.shape) * DTYPE_BYTES[t.dtype];
      if (bytes.byteLength !== len) throw new LlmcError(`tensor "${t.name}": produced ${bytes.byteLength} bytes, shape needs ${len}`, file);
      await out.write(bytes);
    }
  } catch (err) {
    // A producer that fails (or a bad length) must not leave a half-written temp file behind.
    await out.abort();
    throw err;
  }
  await out.commit();
}
