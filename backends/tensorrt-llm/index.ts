/**
 * Target `tensorrt-llm`: a TensorRT-LLM checkpoint (config.json + rank0.safetensors) that
 * `trtllm-build --checkpoint_dir` turns into an engine. ./emit.ts writes it; docs/tensorrt-llm.md
 * lists every field and tensor and where it comes from.
 */
import { NO_OPTIONS } from '../../src/core/pipeline/options.js';
import { UsageError } from '../../src/core/errors.js';
import type { TargetDescriptor } from '../../src/core/pipeline/target.js';
import { archOf, SUPPORTED_MODEL_TYPES } from '../../src/core/arch/registry.js';

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
      // TensorRT-LLM runs Mixtral and Qwen2-MoE (LLaMAForCausalLM / QWenForCausalLM with a MoeConfig),
      // but this writer has no expert tensors (mlp.router, stacked mlp.fc / mlp.proj) yet.
      moe: { refuses: "this writer has no expert tensors yet: convert the Hugging Face checkpoint with TensorRT-LLM's own convert_checkpoint.py" },
      'sliding-window': { refuses: "this writer's config.json carries no attention window: convert the Hugging Face checkpoint with TensorRT-LLM's own convert_checkpoint.py" },
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
    if (!archOf(spec).tensorrtLlm) {
      throw new UsageError(`--target tensorrt-llm writes ${written()} checkpoints, not ${spec.modelType}: convert the Hugging Face checkpoint with TensorRT-LLM's own convert_checkpoint.py`);
    }
    if (spec.oBias) throw new UsageError('--target tensorrt-llm does not write an o_proj bias (attention.dense.bias); this model has one');
  },
  writesAs: (spec) => archOf(spec).tensorrtLlm?.architecture ?? spec.modelType,
  load: async () => (await import('./emit.js')).tensorrtLlmTarget,
};
