/**
 * Target `tensorrt-llm`: a TensorRT-LLM checkpoint (config.json + rank0.safetensors) that
 * `trtllm-build --checkpoint_dir` turns into an engine. ./emit.ts writes it; docs/tensorrt-llm.md
 * lists every field and tensor and where it comes from.
 */
import { NO_OPTIONS } from '../../src/core/pipeline/options.js';
import { UsageError } from '../../src/core/errors.js';
import type { TargetDescriptor } from '../../src/core/pipeline/target.js';
import { archOf, SUPPORTED_MODEL_TYPES } from '../../src/core/arch/registry.js';
import { trtllmRefusal } from './check.js';

/** The families whose registry entry names a TensorRT-LLM class. */
const written = () => SUPPORTED_MODEL_TYPES.filter((t) => archOf({ modelType: t }).tensorrtLlm !== null).join(', ');
import { TENSORRT_LLM_INFO, type TensorrtLlmInfo } from './info.js';

export const TRTLLM_FORMATS = ['fp16', 'bf16', 'fp32', 'int8', 'int4'] as const;

export const tensorrtLlm: TargetDescriptor<unknown, TensorrtLlmInfo> = {
  name: 'tensorrt-llm',
  description: 'TensorRT-LLM checkpoint (config.json + rank0.safetensors) for trtllm-build: fp16/bf16/fp32, int8/int4 weight-only (W8A16/W4A16)',
  formats: { quant: TRTLLM_FORMATS, default: 'fp16', tensorTypes: null },
  options: NO_OPTIONS,
  capabilities: {
    elasticWidths: { kind: 'none' },
    perTensorFormats: false,
    perExpertFormats: false,
    qdq: false,
    lowers: {
      // LLaMAForCausalLM (mixtral) / QWenForCausalLM (qwen2_moe, qwen3_moe) with a MoeConfig: mlp.router, stacked mlp.fc / mlp.proj.
      moe: true,
      // runtime_defaults.max_attention_window: one window per layer, the full layers' max_position_embeddings.
      'sliding-window': true,
      'tree-mask': false,
      'chunk-graphs': false,
      'shadow-outliers': false,
    },
    speculative: false,
    expertCache: false,
  },
  quantBlock: () => 1,
  requires: [],
  info: TENSORRT_LLM_INFO,
  checkArch(spec) {
    const cls = archOf(spec).tensorrtLlm;
    // A family without a class is one TensorRT-LLM has no model for (tensorrt_llm/models MODEL_MAP).
    if (!cls) throw new UsageError(`--target tensorrt-llm writes no ${spec.modelType} checkpoint: TensorRT-LLM has no ${spec.modelType} model (no class for it in tensorrt_llm/models MODEL_MAP); it writes ${written()}`);
    const why = trtllmRefusal(spec, cls);
    if (why) throw new UsageError(`--target tensorrt-llm cannot write this ${spec.modelType} model: ${why}`);
  },
  writesAs: (spec) => archOf(spec).tensorrtLlm?.architecture ?? spec.modelType,
  load: async () => (await import('./emit.js')).tensorrtLlmTarget,
};
