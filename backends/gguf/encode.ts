/**
 * Tensor chunks → the bytes of a ggml tensor type. f32 chunks go through the shared quantizers in
 * src/quant (the one quantizer implementation in llmc; rows split across worker_threads for large
 * tensors). Raw bfloat16 chunks (straight from a checkpoint) to F16 / Q8_0 / BF16 / F32 take integer
 * fast paths that give the same bytes as decoding to f32 and quantizing (test/gguf-encode.test.ts
 * checks that over all 65536 bf16 values); they write into reused buffers, so they allocate nothing.
 */
import { quantizeParallel, type QuantType } from '../../src/quant/index.js';
import { bf16Table, bf16ToF16Table, f32ToF16 } from '../../src/util/half.js';
import type { Chunk } from './stream.js';

export async function encodeTensor(type: QuantType, data: Float32Array, rowLength: number, threads?: number): Promise<Uint8Array> {
  // F32 is the data itself: no copy.
  if (type === 'F32') return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return quantizeParallel(type, data, rowLength, { threads });
}

/** Output bytes per bf16 value of the types with a direct bf16 path. */
const BF16_DIRECT: Partial<Record<QuantType, number>> = { F16: 2, BF16: 2, F32: 4, Q8_0: 34 / 32 };

/** Whether `type` is encoded straight from bf16 bits (so the stream may hand over raw bf16 chunks). */
export function encodesBf16(type: QuantType, rowLength: number): boolean {
  return type in BF16_DIRECT && (type !== 'Q8_0' || rowLength % 32 === 0);
}

/** bf16 bits → F16 bits, one table read per value. */
export function bf16ToF16Into(src: Uint16Array, dst: Uint16Array): void {
  const t = bf16ToF16Table();
  for (let i = 0; i < src.length; i++) dst[i] = t[src[i]];
}

/**
 * bf16 bits → Q8_0 blocks, the arithmetic of src/quant's quantizeQ8_0 (ggml's quantize_row_q8_0_ref)
 * on the decoded values. For finite values |x| orders like the bits without the sign, so amax is an
 * integer max; the inputs are finite (the stream checks), so no NaN can hide from it.
 */
export function bf16ToQ8_0Into(src: Uint16Array, y: Uint8Array): void {
  const t = bf16Table();
  const fr = Math.fround;
  for (let xo = 0, yo = 0; xo < src.length; xo += 32, yo += 34) {
    let m = 0;
    for (let j = 0; j < 32; j++) {
      const a = src[xo + j] & 0x7fff;
      m = m > a ? m : a;
    }
    const d = fr(t[m] / 127);
    const id = d !== 0 ? fr(1 / d) : 0;
    const h = f32ToF16(d);
    y[yo] = h & 0xff;
    y[yo + 1] = h >>> 8;
    for (let j = 0; j < 32; j++) {
      const v = fr(t[src[xo + j]] * id);
      y[yo + 2 + j] = (v >= 0 ? v + 0.5 : v - 0.5) | 0;
    }
  }
}

/**
 * Encodes one tensor's chunks. Raw bf16 chunks land in one of two reused output buffers, alternating,
 * so a returned array stays valid while the next chunk is encoded (one write may be in flight).
 */
export class ChunkEncoder {
  private bufs: Uint8Array[] = [new Uint8Array(0), new Uint8Array(0)];
  private k = 0;

  async encode(type: QuantType, chunk: Chunk, rowLength: number): Promise<Uint8Array> {
    if (!chunk.bf16) return encodeTensor(type, chunk.data!, rowLength);
    const src = chunk.bf16;
    const n = src.length * BF16_DIRECT[type]!;
    this.k ^= 1;
    if (this.bufs[this.k].length < n) this.bufs[this.k] = new Uint8Array(n);
    const out = this.bufs[this.k].subarray(0, n);
    switch (type) {
      case 'F16': bf16ToF16Into(src, new Uint16Array(out.buffer, out.byteOffset, src.length)); break;
      case 'BF16': out.set(new Uint8Array(src.buffer, src.byteOffset, src.byteLength)); break;
      case 'F32': {
        const u = new Uint32Array(out.buffer, out.byteOffset, src.length);
        for (let i = 0; i < src.length; i++) u[i] = src[i] << 16;
        break;
      }
      case 'Q8_0': bf16ToQ8_0Into(src, out); break;
      default: throw new Error(`internal: no bf16 path to ${type}`);
    }
    return out;
  }
}
