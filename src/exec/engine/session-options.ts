/**
 * onnxruntime session options for graphs read from an artifact (cuda decoders, chunk graphs, qnn
 * subgraphs): one call after another on one thread unless told, no spinning between calls, and
 * onnxruntime's own log silenced below fatal, because llmc reports a load or run failure itself in one
 * line (a damaged graph otherwise printed onnxruntime's coloured error lines too).
 */
import type * as ort from 'onnxruntime-node';

export function artifactSessionOptions(threads?: number): ort.InferenceSession.SessionOptions {
  return {
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    interOpNumThreads: 1,
    ...(threads ? { intraOpNumThreads: threads } : {}),
    logSeverityLevel: 4,
    // accuracy level 0: onnxruntime's fusion of int4 DequantizeLinear + MatMul into MatMulNBits keeps
    // float math (its default, 4, quantizes activations to int8), as the MatMulNBits encoding does.
    extra: { session: { intra_op: { allow_spinning: '0' }, qdq_matmulnbits_accuracy_level: '0' } },
  };
}
