/**
 * onnxruntime session options for graphs read from an artifact (cuda decoders, chunk graphs, qnn
 * subgraphs): one call after another on one thread unless told, no spinning between calls, and
 * onnxruntime's own log silenced below fatal, because llmc reports a load or run failure itself in one
 * line (a damaged graph otherwise printed onnxruntime's coloured error lines too).
 */
import './ort-env.js'; // before onnxruntime-node loads
import * as ort from 'onnxruntime-node';
import { LlmcError } from '../../core/errors.js';

export interface ArtifactSessionChoices {
  /**
   * Run QDQ graphs as written (DequantizeLinear → float MatMul → QuantizeLinear: int8 products exact),
   * not fused into onnxruntime's int8 kernels: on x64 CPUs without VNNI (AVX2, AVX-512F) those add
   * pairs of u8×s8 products in int16 (vpmaddubsw) and saturate, which an NPU's int8 pipeline does not.
   */
  exactInt8?: boolean;
}

export function artifactSessionOptions(threads?: number, o: ArtifactSessionChoices = {}): ort.InferenceSession.SessionOptions {
  return {
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    interOpNumThreads: 1,
    ...(threads ? { intraOpNumThreads: threads } : {}),
    logSeverityLevel: 4,
    // accuracy level 0: onnxruntime's fusion of int4 DequantizeLinear + MatMul into MatMulNBits keeps
    // float math (its default, 4, quantizes activations to int8), as the MatMulNBits encoding does.
    extra: { session: { intra_op: { allow_spinning: '0' }, qdq_matmulnbits_accuracy_level: '0', ...(o.exactInt8 ? { disable_quant_qdq: '1' } : {}) } },
  };
}

/** A session over an artifact's graph (its file, or its bytes); a load failure is one line naming `what` and the file. */
export async function openArtifactSession(src: string | Uint8Array, threads?: number, what = 'the graph', o: ArtifactSessionChoices = {}): Promise<ort.InferenceSession> {
  try {
    return typeof src === 'string' ? await ort.InferenceSession.create(src, artifactSessionOptions(threads, o)) : await ort.InferenceSession.create(src, artifactSessionOptions(threads, o));
  } catch (err) {
    throw new LlmcError(`onnxruntime cannot load ${what}: ${String((err as Error).message ?? err).split('\n')[0]}`, typeof src === 'string' ? src : undefined);
  }
}
