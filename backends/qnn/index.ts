/**
 * Target `qnn`: what the Qualcomm QNN SDK's converters take for an NPU prefill (mllm-NPU): per static
 * subgraph an ONNX graph with QDQ nodes carrying the outliers pass's scales and a quantization
 * encodings JSON, the dynamic attention graphs for the CPU, shadow-outlier weights, HTP configs per
 * SoC and build-qnn.sh. ./emit.ts writes it; docs/outliers.md describes it.
 */
import { UsageError } from '../../src/core/errors.js';
import { beyondLlama, type ArchSpec } from '../../src/core/arch/spec.js';
import type { TargetDescriptor } from '../../src/core/pipeline/target.js';
import { OUTLIER_SCALES } from '../../src/core/records/outliers.js';
import { QNN_FORMATS, QNN_OPTIONS, type QnnOptions } from './options.js';
import { QNN_INFO, type QnnInfo } from './info.js';

const QNN_TAKES = 'llama, mistral, qwen2, qwen3, smollm3, olmo2, granite, gemma2, gemma3_text and phi3';

/** The layer features qnn lowers, taken away: what beyondLlama still names is refused (attention soft-capping). */
export function qnnLayer(spec: ArchSpec): ArchSpec {
  return { ...spec, ropeLayers: null, normPlacement: 'pre', qkNorm: null, multipliers: null, hiddenAct: 'silu', rmsNormOffset: 0, finalSoftcap: null, localRope: null };
}

export const qnn: TargetDescriptor<QnnOptions, QnnInfo> = {
  name: 'qnn',
  description: 'Qualcomm QNN (HTP NPU): static W8A8 QDQ subgraphs + encodings JSON, CPU attention graphs, shadow outlier weights, htp.json, build-qnn.sh',
  formats: { quant: QNN_FORMATS, default: 'w8a8', tensorTypes: null },
  options: QNN_OPTIONS,
  capabilities: {
    elasticWidths: { kind: 'none' },
    perTensorFormats: false,
    perExpertFormats: false,
    qdq: true,
    lowers: {
      moe: { refuses: `token routing has no static per-tensor graph; qnn takes dense ${QNN_TAKES} models` },
      'sliding-window': true,
      'tree-mask': false,
      'chunk-graphs': true,
      'shadow-outliers': true,
    },
    engines: ['sim', 'onnxruntime'],
    speculative: false,
    expertCache: false,
  },
  quantBlock: () => 1,
  requires: [OUTLIER_SCALES],
  checkArch(spec) {
    // Past Llama's layer, the subgraphs and the simulation run layers without rope (smollm3),
    // post-block norms (olmo2), q/k norms per head (qwen3) or over the whole projection (olmo2) and
    // granite's multipliers; test/qnn-archs.test.ts.
    const extra = beyondLlama(qnnLayer(spec));
    if (extra.length) throw new UsageError(`--target qnn does not lower ${spec.modelType}'s ${extra.join(', ')} (its subgraphs are Llama's layer); it takes dense ${QNN_TAKES} models`);
  },
  info: QNN_INFO,
  load: async () => (await import('./emit.js')).qnnTarget,
  open: async (a, o) => (await import('./open.js')).openQnn(a, o),
};
