/**
 * Tensor chunks → the bytes of a ggml tensor type. f32 chunks go through the shared quantizers in
 * src/core/quant (the one quantizer implementation in llmc; rows split across worker_threads for large
 * tensors). Raw bfloat16 chunks (straight from a checkpoint) take src/core/quant/bf16.ts's direct paths
 * (WebAssembly SIMD kernels) into reused buffers, so they allocate nothing; raw f16 chunks for an F16
 * tensor are copied as they are.
 */
import { quantizeParallel, type QuantType } from './index.js';
import { allFiniteBf16, BF16_DIRECT, copyF16Into, bf16ToF16Into, bf16ToF32Into, bf16ToQ8_0Into } from './bf16.js';
import { ChunkBuffers, SLOT, type Chunk } from '../checkpoint/stream.js';

function encodeTensor(type: QuantType, data: Float32Array, rowLength: number): Uint8Array | Promise<Uint8Array> {
  // F32 is the data itself: no copy.
  if (type === 'F32') return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return quantizeParallel(type, data, rowLength);
}

/**
 * Encodes chunks. Raw bf16 / f16 chunks land in one of two reused output buffers, alternating,
 * so a returned array stays valid while the next chunk is encoded (one write may be in flight); with
 * the stream's buffers (same ChunkBuffers), input and output sit in the kernels' arena. What is
 * encoded here comes back at once; a promise means worker threads are encoding it.
 */
export class ChunkEncoder {
  private k = 0;

  constructor(private readonly buffers: ChunkBuffers = new ChunkBuffers()) {}

  encode(type: QuantType, chunk: Chunk, rowLength: number): Uint8Array | Promise<Uint8Array> {
    if (chunk.f16) return this.copyF16(type, chunk, chunk.f16);
    if (!chunk.bf16) return encodeTensor(type, chunk.data!, rowLength);
    const src = chunk.bf16;
    const n = src.length * BF16_DIRECT[type]!;
    this.k ^= 1;
    const out = this.buffers.get(SLOT.encoded[this.k], n, true);
    let finite: boolean;
    switch (type) {
      case 'F16': finite = bf16ToF16Into(src, new Uint16Array(out.buffer, out.byteOffset, src.length)); break;
      case 'Q8_0': finite = bf16ToQ8_0Into(src, out); break;
      case 'BF16':
        finite = allFiniteBf16(src);
        out.set(new Uint8Array(src.buffer, src.byteOffset, src.byteLength));
        break;
      case 'F32': finite = bf16ToF32Into(src, new Float32Array(out.buffer, out.byteOffset, src.length)); break;
      default: throw new Error(`internal: no bf16 path to ${type}`);
    }
    if (!finite) chunk.failNonFinite!();
    return out;
  }

  /** F16 source bits to an F16 tensor: the bytes as they are (checked for Inf/NaN). */
  private copyF16(type: QuantType, chunk: Chunk, src: Uint16Array): Uint8Array {
    if (type !== 'F16') throw new Error(`internal: raw f16 chunk for ${type}`);
    this.k ^= 1;
    const out = this.buffers.get(SLOT.encoded[this.k], src.byteLength, true);
    if (!copyF16Into(src, new Uint16Array(out.buffer, out.byteOffset, src.length))) chunk.failNonFinite!();
    return out;
  }
}
