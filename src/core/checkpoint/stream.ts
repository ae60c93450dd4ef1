/**
 * A planned tensor as a sequence of f32 row chunks, so memory follows the chunk, not the tensor.
 * Where the source knows where a tensor's values are stored (a checkpoint, or a pass's permuted or
 * sliced view of one: ModelSource.layout), rows are read by byte range; a tensor whose values a pass
 * computed is read whole, one source tensor at a time, and sliced.
 * Every chunk holds whole rows (whole heads for q/k, which are re-interleaved per head) and is
 * checked for non-finite values, which llama.cpp would refuse or propagate. On request, BF16 and F16
 * checkpoint tensors come as raw bits instead (the encoders convert them directly and run the
 * finite check inside their own loops, see Chunk.failNonFinite).
 */
import { promises as fsp } from 'node:fs';
import { DTYPE_BYTES, numel, readStoredRange, type ModelSource } from './index.js';
import { bf16ToF32, f16ToF32 } from '../util/half.js';
import { bf16ToF32Into, f16ToF32Into } from '../quant/bf16.js';
import { LlmcError } from '../errors.js';
import { nonFiniteError } from './finite.js';
import { ioError } from '../util/atomic.js';

/** A tensor as a target writes it: its shape and where its values come from (the gguf and ts targets plan theirs). */
export interface StreamedTensor {
  /** The tensor's name as written (errors name it). */
  name: string;
  /** Row-major shape as written (a stacked expert tensor is [experts, rows, cols]). */
  shape: number[];
  /** Source tensors, concatenated along the first axis (several only for stacked experts). */
  sources: string[];
  /** q/k for llama.cpp's non-NeoX rope: re-interleave rotary halves within each of this many heads. */
  permuteHeads?: number;
  /** Written as 1 + w (gemma's norms: convert_hf_to_gguf adds 1, llama.cpp multiplies by the weight as stored). */
  plusOne?: boolean;
  /** Computed rather than read (llama3 rope factors). */
  computed?: () => Float32Array;
}

/**
 * LlamaModel.permute: Hugging Face stores each head's rotary pairs as two halves
 * [x0..x(d/2-1), y0..]; llama.cpp's (non-NeoX) rope expects them interleaved [x0, y0, x1, y1 ...].
 * Row r = j*(d/2) + i of a head moves to row 2i + j. Works on f32 values or raw 16-bit values, into
 * `out` when given (no allocation).
 */
export function permuteRotaryRows<T extends Float32Array | Uint16Array>(data: T, rows: number, heads: number, out?: T): T {
  const cols = data.length / rows;
  const hd = rows / heads;
  if (!Number.isInteger(hd) || hd % 2 !== 0) {
    throw new LlmcError(`cannot permute ${rows} rows into ${heads} heads of even size`);
  }
  const half = hd / 2;
  const dst = out ?? (new (data.constructor as new (n: number) => T)(data.length));
  for (let h = 0; h < heads; h++) {
    for (let j = 0; j < 2; j++) {
      for (let i = 0; i < half; i++) {
        const src = (h * hd + j * half + i) * cols;
        dst.set(data.subarray(src, src + cols) as ArrayLike<number>, (h * hd + 2 * i + j) * cols);
      }
    }
  }
  return dst;
}


export interface Chunk {
  /** f32 values, or (when the caller accepts them) the raw bits of a BF16 or F16 source. */
  data?: Float32Array;
  bf16?: Uint16Array;
  f16?: Uint16Array;
  /** Number of values. */
  length: number;
  /**
   * Raw chunks are not checked for non-finite values here: a full extra pass over the data costs as
   * much as converting it, so the encoders check inside their loops and call this on a hit (it finds
   * the first bad element in source order and throws the same error f32 chunks get).
   */
  failNonFinite?: () => never;
  /** Source tensor it came from, and the element offset of data[0] in it (for messages). */
  source: string;
  offset: number;
}

function nonFinite(c: Chunk, i: number, value: number, where: string): LlmcError {
  return nonFiniteError(c.source, value, c.offset + i, where);
}

function checkFinite(c: Chunk, where: string): void {
  // Exponent bits all ones = Inf or NaN; an integer test is much cheaper than a float compare.
  if (c.bf16) return checkFiniteBf16(c, where);
  if (c.f16) {
    const i = c.f16.findIndex((h) => (h & 0x7c00) === 0x7c00);
    if (i >= 0) throw nonFinite(c, i, f16ToF32(c.f16[i]), where);
    return;
  }
  const d = c.data!;
  const bits = new Int32Array(d.buffer, d.byteOffset, d.length);
  for (let i = 0; i < bits.length; i++) {
    if ((bits[i] & 0x7f800000) === 0x7f800000) throw nonFinite(c, i, d[i], where);
  }
}

function checkFiniteBf16(c: Chunk, where: string): void {
  const d = c.bf16!;
  const bad = (i: number) => (d[i] & 0x7f80) === 0x7f80;
  // Two values per 32-bit word: adding 0x80 to an exponent field carries into its (cleared) sign bit
  // exactly when the field is all ones.
  const head = (d.byteOffset & 3) === 0 ? 0 : 1;
  const words = (d.length - head) >>> 1;
  const w = new Uint32Array(d.buffer, d.byteOffset + head * 2, words);
  let hit = -1;
  for (let i = 0; i < words; i++) {
    if (((w[i] & 0x7f807f80) + 0x00800080) & 0x80008000) { hit = head + 2 * i; break; }
  }
  const tail = head + 2 * words;
  if (hit < 0 && head && bad(0)) hit = 0;
  if (hit < 0 && tail < d.length && bad(tail)) hit = tail;
  if (hit < 0) return;
  const i = bad(hit) ? hit : hit + 1;
  throw nonFinite(c, i, bf16ToF32(d[i]), where);
}

/** Rows per chunk: about `maxElems` values, a whole number of `unit` rows, at least one unit. */
function rowsPerChunk(rows: number, rowLen: number, unit: number, maxElems: number): number {
  const units = Math.max(1, Math.floor(maxElems / (rowLen * unit)));
  return Math.min(rows, units * unit);
}

export interface ChunkOptions {
  /** Values per chunk (about). */
  maxElems: number;
  /** Checkpoint dtypes whose tensors are handed over as raw bits (`Chunk.bf16` / `Chunk.f16`), not decoded. */
  raw?: readonly RawDtype[];
  /** Buffers reused across tensors (fresh ones per tensor otherwise). */
  buffers?: ChunkBuffers;
}

/**
 * The read / decode / permute / encode buffers of a stream, reused from tensor to tensor: allocating
 * them per tensor makes hundreds of megabytes of short-lived external memory, and V8 answers with
 * GCs. Buffers asked for `inArena` come from `arena` when it has room (the SIMD kernels' own
 * memory, where they convert in place); the others, and any that don't fit, are ordinary Buffers.
 */
export class ChunkBuffers {
  private slots: Buffer[] = [];
  private arenaSlot = new Map<number, number>();

  /** Which of each pair of alternating buffers the next chunk uses. */
  private turn = 0;

  constructor(private readonly arena?: (slot: number, bytes: number) => Uint8Array | null) {}

  /**
   * The buffer pair index (0 or 1) for the next chunk. It alternates across tensors too, so a consumer
   * may still be encoding the previous tensor's last chunk while this one is read and decoded.
   */
  take(): number {
    const k = this.turn;
    this.turn ^= 1;
    return k;
  }

  get(slot: number, bytes: number, inArena = false): Buffer {
    if (inArena && this.arena) {
      let k = this.arenaSlot.get(slot);
      if (k === undefined) this.arenaSlot.set(slot, (k = this.arenaSlot.size));
      const a = this.arena(k, bytes);
      if (a) return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
    }
    const b = this.slots[slot];
    if (b && b.length >= bytes) return b.subarray(0, bytes);
    return (this.slots[slot] = Buffer.allocUnsafeSlow(bytes));
  }
}

/** The source dtypes a chunk can carry as raw bits, and the exact decoders to f32 (with a finite check). */
export type RawDtype = 'BF16' | 'F16';
const TO_F32: Record<RawDtype, (src: Uint16Array, dst: Float32Array) => boolean> = { BF16: bf16ToF32Into, F16: f16ToF32Into };
const isRawDtype = (d: string): d is RawDtype => d in TO_F32;

/** The buffer slots: two raw reads, two f32 decodes, the rotary permutation, two encoder outputs. */
export const SLOT = { raw: [0, 1], f32: [2, 3], permuted: 4, encoded: [5, 6] } as const;

export async function* tensorChunks(source: ModelSource, t: StreamedTensor, options: ChunkOptions | number): AsyncGenerator<Chunk> {
  const opts = typeof options === 'number' ? { maxElems: options } : options;
  const maxElems = opts.maxElems;
  const bufs = opts.buffers ?? new ChunkBuffers();
  if (t.computed || t.plusOne) {
    // Norm weights (small, one vector) are read whole for gemma's 1 + w.
    const data = t.computed ? t.computed() : (await source.readF32(t.sources[0])).map((v) => v + 1);
    const c = { data, length: data.length, source: t.name, offset: 0 };
    if (!source.allowNonFinite) checkFinite(c, source.description);
    yield c;
    return;
  }
  // A permuted 1-D tensor (q/k bias) is a column: one value per row.
  const rowLen = t.shape.length > 1 ? t.shape[t.shape.length - 1] : t.permuteHeads ? 1 : t.shape[0];
  // Source tensors are [rows, rowLen] (stacked experts: each expert is one source).
  for (const name of t.sources) {
    const meta = source.meta(name);
    if (!meta) throw new LlmcError(`missing tensor "${name}"`, source.description);
    const count = numel(meta.shape);
    const rows = count / rowLen;
    const headRows = t.permuteHeads ? rows / t.permuteHeads : 1;
    const step = rowsPerChunk(rows, rowLen, headRows, maxElems);
    /** `finite`: already known to hold no Inf/NaN (the half-float decoders check as they go). */
    const finish = (data: Float32Array, r0: number, finite = false): Chunk => {
      const c = { data, length: data.length, source: name, offset: r0 * rowLen };
      if (!finite && !source.allowNonFinite) checkFinite(c, source.description);
      if (t.permuteHeads) c.data = permuteRotaryRows(data, data.length / rowLen, (data.length / rowLen) / headRows);
      return c;
    };
    const finishRaw = (dtype: RawDtype, bits: Uint16Array, r0: number): Chunk => {
      const field = dtype === 'BF16' ? 'bf16' : 'f16';
      const c: Chunk = { [field]: bits, length: bits.length, source: name, offset: r0 * rowLen };
      c.failNonFinite = () => {
        checkFinite({ ...c, [field]: bits }, source.description); // source order, for the element index
        throw new LlmcError(`internal: tensor "${name}" reported non-finite but all values are finite`);
      };
      if (t.permuteHeads) {
        // One reused buffer: the encoder is done with the previous chunk before the next is made.
        const p = bufs.get(SLOT.permuted, bits.byteLength, true);
        const rowsHere = bits.length / rowLen;
        c[field] = permuteRotaryRows(bits, rowsHere, rowsHere / headRows, new Uint16Array(p.buffer, p.byteOffset, bits.length));
      }
      return c;
    };
    // Read straight from the safetensors file by byte range: F32 as it is, BF16 / F16 via TO_F32.
    const ti = source.layout(name);
    if (ti && (ti.dtype === 'F32' || isRawDtype(ti.dtype))) {
      const esize = DTYPE_BYTES[ti.dtype];
      let fh: fsp.FileHandle;
      try {
        fh = await fsp.open(ti.file, 'r');
      } catch (err) {
        throw ioError(err, ti.file, 'open safetensors file');
      }
      try {
        // Two raw and two f32 buffers, alternating (across tensors too, see ChunkBuffers.take): the next
        // chunk's bytes arrive while this one is quantized, and the previous chunk may still be being
        // encoded or written (F32 writes the data itself).
        // Half-float buffers sit in the kernels' arena (converted there in place); see ChunkBuffers.
        const half = isRawDtype(ti.dtype) ? ti.dtype : null;
        const raw16 = half !== null && (opts.raw ?? []).includes(half);
        const raws = SLOT.raw.map((k) => bufs.get(k, step * rowLen * esize, half !== null));
        const f32 = (slot: number) => {
          const b = bufs.get(slot, step * rowLen * 4, half !== null);
          return new Float32Array(b.buffer, b.byteOffset, step * rowLen);
        };
        const f32s = raw16 ? [] : SLOT.f32.map(f32);
        const pread = async (b: Uint8Array, off: number, len: number, pos: number) => (await fh.read(b, off, len, pos)).bytesRead;
        const read = async (r0: number, k: number): Promise<Buffer> => {
          const r1 = Math.min(rows, r0 + step);
          const buf = raws[k].subarray(0, (r1 - r0) * rowLen * esize);
          await readStoredRange(pread, ti, r0 * rowLen, r1 * rowLen, buf, `tensor "${name}"`);
          return buf;
        };
        let k = bufs.take();
        let next: Promise<Buffer> | null = read(0, k);
        for (let r0 = 0; r0 < rows; r0 += step) {
          const raw = await next!;
          const kNext = r0 + step < rows ? bufs.take() : -1;
          next = kNext >= 0 ? read(r0 + step, kNext) : null;
          next?.catch(() => {}); // surfaced when awaited
          const n = raw.length / esize;
          if (raw16) {
            yield finishRaw(half!, new Uint16Array(raw.buffer, raw.byteOffset, n), r0);
            k = kNext;
            continue;
          }
          const data = f32s[k].subarray(0, n);
          if (half) {
            const bits = new Uint16Array(raw.buffer, raw.byteOffset, n);
            // The decoders' output is garbage where the input is Inf/NaN: find those in the bits.
            if (!TO_F32[half](bits, data) && !source.allowNonFinite) finishRaw(half, bits, r0).failNonFinite!();
            yield finish(data, r0, true);
            k = kNext;
            continue;
          }
          data.set(new Float32Array(raw.buffer, raw.byteOffset, n));
          yield finish(data, r0);
          k = kNext;
        }
      } finally {
        await fh.close();
      }
    } else {
      const all = await source.readF32(name);
      if (all.length !== count) throw new LlmcError(`tensor "${name}" has ${all.length} values, its shape needs ${count}`, source.description);
      for (let r0 = 0; r0 < rows; r0 += step) {
        yield finish(all.subarray(r0 * rowLen, Math.min(rows, r0 + step) * rowLen), r0);
      }
    }
  }
}
