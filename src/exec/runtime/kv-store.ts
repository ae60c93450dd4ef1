/**
 * A KV cache's keys and values kept compact (llama.cpp's --cache-type-k/v f16 and q8_0): rows of
 * kvDim values as IEEE halves (GGML_FP32_TO_FP16, round to nearest even) or as Q8_0 blocks of 32
 * (ggml's quantize_row_q8_0_ref, bytes as ggml lays them out). The attention kernel reads these rows in
 * place, widening each lane as dequantize_row_* does (./attention.ts), so it runs the float32
 * arithmetic on the rounded values; `expand` widens rows for the JS loops. Browser-safe.
 */
import type { KvType } from '../../core/pipeline/target.js';
import { dequantizeQ8_0, quantizeQ8_0 } from '../../core/quant/legacy.js';
import { f16Table, f32ToF16 } from '../../core/util/half.js';

export type CompactKvType = Exclude<KvType, 'f32'>;

/** One layer's K or V plane: `capacity` rows in the type's bytes. */
export class KvPlane {
  /** Bytes of one row. */
  readonly rowBytes: number;
  bytes: Uint8Array = new Uint8Array(0);
  constructor(
    readonly type: CompactKvType,
    readonly kvDim: number,
  ) {
    this.rowBytes = type === 'f16' ? 2 * kvDim : (kvDim / 32) * 34;
  }

  /** Room for `cap` rows; the first `keep` survive. */
  grow(cap: number, keep: number): void {
    const b = new Uint8Array(cap * this.rowBytes);
    b.set(this.bytes.subarray(0, keep * this.rowBytes));
    this.bytes = b;
  }

  /** Row `slot`'s first `width` values (a multiple of 32 for q8_0) from src[so…]. */
  put(slot: number, src: Float32Array, so: number, width: number): void {
    const o = slot * this.rowBytes;
    if (this.type === 'q8_0') {
      quantizeQ8_0(src, so, width / 32, this.bytes, o);
      return;
    }
    const b = this.bytes;
    for (let i = 0; i < width; i++) {
      const h = f32ToF16(src[so + i]);
      b[o + 2 * i] = h & 0xff;
      b[o + 2 * i + 1] = h >> 8;
    }
  }

  /** Rows [0, n) widened to float32 into out (rows of kvDim). */
  expand(n: number, out: Float32Array): void {
    if (this.type === 'q8_0') {
      dequantizeQ8_0(this.bytes, 0, (n * this.kvDim) / 32, out, 0);
      return;
    }
    const t = f16Table();
    const b = this.bytes;
    for (let i = 0, m = n * this.kvDim; i < m; i++) out[i] = t[b[2 * i] | (b[2 * i + 1] << 8)];
  }

  /** Row `from` copied over row `to` (speculative compaction). */
  move(from: number, to: number): void {
    this.bytes.copyWithin(to * this.rowBytes, from * this.rowBytes, (from + 1) * this.rowBytes);
  }
}

/** Why a model's KV cache cannot be kept as `type`, or null. */
export function kvTypeProblem(type: KvType, headDim: number): string | null {
  return type === 'q8_0' && headDim % 32 !== 0 ? `a q8_0 KV cache needs a head size that is a multiple of 32 (its blocks), this model's is ${headDim}` : null;
}
