/**
 * Tensor chunks → the bytes of a ggml tensor type. f32 chunks go through the shared quantizers in
 * src/quant (the one quantizer implementation in llmc; rows split across worker_threads for large
 * tensors). Raw bfloat16 chunks (straight from a checkpoint) take src/quant/bf16.ts's integer fast
 * paths into reused buffers, so they allocate nothing.
 */
import { quantizeParallel, type QuantType } from '../../src/quant/index.js';
import { allFiniteBf16, BF16_DIRECT, bf16ToF16Into, bf16ToQ8_0Into } from '../../src/quant/bf16.js';
import type { Chunk } from './stream.js';

export async function encodeTensor(type: QuantType, data: Float32Array, rowLength: number, threads?: number): Promise<Uint8Array> {
  // F32 is the data itself: no copy.
  if (type === 'F32') return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return quantizeParallel(type, data, rowLength, { threads });
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
    let finite: boolean;
    switch (type) {
      case 'F16': finite = bf16ToF16Into(src, new Uint16Array(out.buffer, out.byteOffset, src.length)); break;
      case 'Q8_0': finite = bf16ToQ8_0Into(src, out); break;
      case 'BF16':
        finite = allFiniteBf16(src);
        out.set(new Uint8Array(src.buffer, src.byteOffset, src.byteLength));
        break;
      case 'F32': {
        finite = allFiniteBf16(src);
        const u = new Uint32Array(out.buffer, out.byteOffset, src.length);
        for (let i = 0; i < src.length; i++) u[i] = src[i] << 16;
        break;
      }
      default: throw new Error(`internal: no bf16 path to ${type}`);
    }
    if (!finite) chunk.failNonFinite!();
    return out;
  }
}
