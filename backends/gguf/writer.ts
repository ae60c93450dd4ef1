/**
 * GGUF v3 serialization (ggml docs/gguf.md): header, typed key/value metadata, tensor infos,
 * padding to `general.alignment`, then the data section with every tensor aligned. Little-endian.
 *
 * Offsets are computed from the declared shapes/types up front, so the header goes out first and
 * tensors stream after it one at a time; the file appears at its final path only on `finish()`.
 */
import { LlmcError } from '../../src/core/errors.js';
import { AtomicFile } from '../../src/core/util/atomic.js';

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
export const GGUF_VERSION = 3;
export const GGUF_DEFAULT_ALIGNMENT = 32;

/** gguf_type: the metadata value types. */
export const GGUF_TYPE = {
  UINT8: 0,
  INT8: 1,
  UINT16: 2,
  INT16: 3,
  UINT32: 4,
  INT32: 5,
  FLOAT32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
  UINT64: 10,
  INT64: 11,
  FLOAT64: 12,
} as const;
export type ScalarKind = Exclude<keyof typeof GGUF_TYPE, 'ARRAY'>;

export type GgufValue =
  | { kind: ScalarKind; value: number | bigint | boolean | string }
  | { kind: 'ARRAY'; itemKind: ScalarKind; values: readonly (number | bigint | boolean | string)[] };

export interface GgufKv {
  key: string;
  value: GgufValue;
}

// Small constructors so metadata tables read naturally.
export const u32 = (value: number): GgufValue => ({ kind: 'UINT32', value });
export const i32 = (value: number): GgufValue => ({ kind: 'INT32', value });
export const f32 = (value: number): GgufValue => ({ kind: 'FLOAT32', value });
export const bool = (value: boolean): GgufValue => ({ kind: 'BOOL', value });
export const str = (value: string): GgufValue => ({ kind: 'STRING', value });
export const arr = (itemKind: ScalarKind, values: readonly (number | bigint | boolean | string)[]): GgufValue => ({
  kind: 'ARRAY',
  itemKind,
  values,
});

export interface GgufTensorInfo {
  name: string;
  /** ggml order: ne[0] is the contiguous (row) dimension, i.e. the reverse of a row-major shape. */
  ne: number[];
  ggmlType: number;
  /** Size of the tensor's data in bytes (from ne and the type). */
  nbytes: number;
}

/** A growable little-endian byte buffer. */
class ByteSink {
  private buf = Buffer.alloc(1 << 16);
  length = 0;

  private reserve(n: number): void {
    if (this.length + n <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < this.length + n) cap *= 2;
    const next = Buffer.alloc(cap);
    this.buf.copy(next, 0, 0, this.length);
    this.buf = next;
  }
  u8(v: number) { this.reserve(1); this.length = this.buf.writeUInt8(v, this.length); }
  i8(v: number) { this.reserve(1); this.length = this.buf.writeInt8(v, this.length); }
  u16(v: number) { this.reserve(2); this.length = this.buf.writeUInt16LE(v, this.length); }
  i16(v: number) { this.reserve(2); this.length = this.buf.writeInt16LE(v, this.length); }
  u32(v: number) { this.reserve(4); this.length = this.buf.writeUInt32LE(v, this.length); }
  i32(v: number) { this.reserve(4); this.length = this.buf.writeInt32LE(v, this.length); }
  f32(v: number) { this.reserve(4); this.length = this.buf.writeFloatLE(v, this.length); }
  f64(v: number) { this.reserve(8); this.length = this.buf.writeDoubleLE(v, this.length); }
  u64(v: number | bigint) {
    this.reserve(8);
    // A safe integer as two u32 halves: no BigInt per value (a vocabulary writes one per token).
    if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) {
      this.buf.writeUInt32LE(v % 0x100000000, this.length);
      this.length = this.buf.writeUInt32LE(Math.floor(v / 0x100000000), this.length + 4);
    } else {
      this.length = this.buf.writeBigUInt64LE(BigInt(v), this.length);
    }
  }
  i64(v: number | bigint) { this.reserve(8); this.length = this.buf.writeBigInt64LE(BigInt(v), this.length); }
  bytes(b: Uint8Array) { this.reserve(b.length); this.buf.set(b, this.length); this.length += b.length; }
  /**
   * gguf_string: u64 byte length, UTF-8 bytes, no terminator. Encoded in place (at most 3 bytes per
   * UTF-16 unit) and its length written in front: one pass over the string, not two (vocabularies).
   */
  string(s: string) {
    this.reserve(8 + 3 * s.length);
    const n = this.buf.write(s, this.length + 8, 'utf8');
    this.u64(n);
    this.length += n;
  }
  padTo(alignment: number) { const pad = (alignment - (this.length % alignment)) % alignment; this.bytes(new Uint8Array(pad)); }
  result(): Uint8Array { return this.buf.subarray(0, this.length); }
}

function checkInt(key: string, v: unknown, lo: number, hi: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) {
    throw new LlmcError(`GGUF metadata "${key}": ${String(v)} is out of range [${lo}, ${hi}]`);
  }
  return v;
}

function writeScalar(out: ByteSink, key: string, kind: ScalarKind, v: number | bigint | boolean | string): void {
  switch (kind) {
    case 'UINT8': return out.u8(checkInt(key, v, 0, 0xff));
    case 'INT8': return out.i8(checkInt(key, v, -0x80, 0x7f));
    case 'UINT16': return out.u16(checkInt(key, v, 0, 0xffff));
    case 'INT16': return out.i16(checkInt(key, v, -0x8000, 0x7fff));
    case 'UINT32': return out.u32(checkInt(key, v, 0, 0xffffffff));
    case 'INT32': return out.i32(checkInt(key, v, -0x80000000, 0x7fffffff));
    case 'FLOAT32': return out.f32(Number(v));
    case 'FLOAT64': return out.f64(Number(v));
    case 'BOOL': return out.u8(v ? 1 : 0);
    case 'STRING': return out.string(String(v));
    case 'UINT64': return out.u64(typeof v === 'bigint' ? v : BigInt(checkInt(key, v, 0, Number.MAX_SAFE_INTEGER)));
    case 'INT64': return out.i64(typeof v === 'bigint' ? v : BigInt(checkInt(key, v, -Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)));
  }
}

/**
 * An array's items. Vocabularies are the bulk of a header (tokens, scores, types: 32,000+ each, written
 * once per compile, so mostly by unoptimized code): those three kinds go in one pass each.
 */
function writeArray(out: ByteSink, key: string, kind: ScalarKind, values: readonly (number | bigint | boolean | string)[]): void {
  if (kind === 'STRING') {
    for (const v of values) out.string(String(v));
  } else if (kind === 'FLOAT32' || kind === 'INT32') {
    const items = kind === 'FLOAT32' ? Float32Array.from(values, Number) : Int32Array.from(values, (v) => checkInt(key, v, -0x80000000, 0x7fffffff));
    out.bytes(new Uint8Array(items.buffer)); // little-endian, as every platform Node runs on
  } else {
    for (const v of values) writeScalar(out, key, kind, v);
  }
}

const align = (n: number, a: number) => Math.ceil(n / a) * a;

export interface GgufLayout {
  /** Header + metadata + tensor infos + padding: where the data section starts. */
  header: Uint8Array;
  /** Offset of each tensor inside the data section. */
  offsets: number[];
  /** Total file size. */
  fileSize: number;
  alignment: number;
}

/** Serialize everything before the data section and place the tensors. */
export function layoutGguf(kvs: readonly GgufKv[], tensors: readonly GgufTensorInfo[]): GgufLayout {
  const keys = new Set<string>();
  for (const kv of kvs) {
    if (keys.has(kv.key)) throw new LlmcError(`GGUF metadata key "${kv.key}" written twice`);
    keys.add(kv.key);
  }
  const alignKv = kvs.find((kv) => kv.key === 'general.alignment');
  const alignment = alignKv ? Number(alignKv.value.kind === 'ARRAY' ? NaN : alignKv.value.value) : GGUF_DEFAULT_ALIGNMENT;
  if (!Number.isInteger(alignment) || alignment <= 0 || alignment % 8 !== 0) {
    throw new LlmcError(`general.alignment must be a positive multiple of 8, got ${alignment}`);
  }
  const names = new Set<string>();
  const offsets: number[] = [];
  let dataSize = 0;
  for (const t of tensors) {
    if (names.has(t.name)) throw new LlmcError(`GGUF tensor "${t.name}" written twice`);
    names.add(t.name);
    offsets.push(dataSize);
    dataSize = align(dataSize + t.nbytes, alignment);
  }

  const out = new ByteSink();
  out.u32(GGUF_MAGIC);
  out.u32(GGUF_VERSION);
  out.u64(tensors.length);
  out.u64(kvs.length);
  for (const { key, value } of kvs) {
    out.string(key);
    out.u32(GGUF_TYPE[value.kind]);
    if (value.kind === 'ARRAY') {
      out.u32(GGUF_TYPE[value.itemKind]);
      out.u64(value.values.length);
      writeArray(out, key, value.itemKind, value.values);
    } else {
      writeScalar(out, key, value.kind, value.value);
    }
  }
  tensors.forEach((t, i) => {
    out.string(t.name);
    out.u32(t.ne.length);
    for (const d of t.ne) out.u64(d);
    out.u32(t.ggmlType);
    out.u64(offsets[i]);
  });
  out.padTo(alignment);
  const header = out.result();
  return { header, offsets, fileSize: header.length + dataSize, alignment };
}

/**
 * Streams a GGUF file: header at open, then each tensor's bytes in declaration order.
 * Any failure removes the temp file; the final path is only ever a complete file.
 */
export class GgufFileWriter {
  private next = 0;
  /** Bytes written of the current tensor; -1 between tensors. */
  private pending = -1;

  private constructor(
    private readonly file: AtomicFile,
    private readonly tensors: readonly GgufTensorInfo[],
    readonly layout: GgufLayout,
  ) {}

  static async open(finalPath: string, kvs: readonly GgufKv[], tensors: readonly GgufTensorInfo[]): Promise<GgufFileWriter> {
    const layout = layoutGguf(kvs, tensors);
    const file = await AtomicFile.open(finalPath, { expectedSize: layout.fileSize });
    const w = new GgufFileWriter(file, tensors, layout);
    await file.write(layout.header);
    return w;
  }

  /** Write the next tensor's data (exactly its declared size) plus the padding after it. */
  async writeTensor(name: string, data: Uint8Array): Promise<void> {
    await this.beginTensor(name);
    await (await this.writeData(data)).hashed;
    await this.endTensor();
  }

  /** Streaming form: beginTensor, writeData (any number of pieces), endTensor. */
  async beginTensor(name: string): Promise<void> {
    const t = this.tensors[this.next];
    if (!t || t.name !== name || this.pending !== -1) {
      await this.file.abort();
      throw new LlmcError(`internal: GGUF tensor "${name}" written out of order (expected "${t?.name ?? 'none'}")`);
    }
    this.pending = 0;
  }

  /** Resolves once `data` is written; it must stay unchanged until `hashed` resolves (AtomicFile.append). */
  async writeData(data: Uint8Array): Promise<{ hashed: Promise<void> }> {
    const t = this.tensors[this.next];
    if (this.pending < 0 || this.pending + data.length > t.nbytes) {
      await this.file.abort();
      throw new LlmcError(`internal: GGUF tensor "${t?.name}" gets more than the ${t?.nbytes} bytes its header says`);
    }
    const written = await this.file.append(data);
    this.pending += data.length;
    return written;
  }

  async endTensor(): Promise<void> {
    const t = this.tensors[this.next];
    if (this.pending !== t.nbytes) {
      await this.file.abort();
      throw new LlmcError(`internal: GGUF tensor "${t.name}" has ${this.pending} bytes, its header says ${t.nbytes}`);
    }
    const pad = align(t.nbytes, this.layout.alignment) - t.nbytes;
    if (pad) await this.file.write(new Uint8Array(pad));
    this.pending = -1;
    this.next++;
  }

  async finish(): Promise<void> {
    if (this.next !== this.tensors.length) {
      await this.file.abort();
      throw new LlmcError(`internal: GGUF file finished after ${this.next} of ${this.tensors.length} tensors`);
    }
    if (this.file.bytesWritten !== this.layout.fileSize) {
      await this.file.abort();
      throw new LlmcError(`internal: GGUF file is ${this.file.bytesWritten} bytes, expected ${this.layout.fileSize}`);
    }
    await this.file.commit();
  }

  abort(): Promise<void> {
    return this.file.abort();
  }
}
