/**
 * f32 values → the bytes of a ggml tensor type, through the shared quantizers in src/quant (the one
 * quantizer implementation in llmc; rows split across worker_threads for large tensors).
 */
import { quantizeParallel, type QuantType } from '../../src/quant/index.js';

export async function encodeTensor(type: QuantType, data: Float32Array, rowLength: number, threads?: number): Promise<Uint8Array> {
  // F32 is the data itself: no copy.
  if (type === 'F32') return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return quantizeParallel(type, data, rowLength, { threads });
}
