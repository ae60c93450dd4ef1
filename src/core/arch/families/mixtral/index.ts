/** Mixtral (transformers' MixtralForCausalLM): Mistral with routed experts (block_sparse_moe, w1/w2/w3). */
import { NO_BIAS, NO_BIAS_KEYS, type ArchEntry, type MoeFamily } from '../../family.js';
import { LLAMA_GGUF, llamaTrtllm } from '../llama/index.js';
import { mistralAttention } from '../mistral/index.js';

const MIXTRAL_MOE: MoeFamily = {
  parse: (c) => ({
    routing: 'softmax-topk-renorm',
    numExperts: c.posInt('num_local_experts'),
    topK: c.posInt('num_experts_per_tok'),
    expertIntermediateSize: c.posInt('intermediate_size'),
    sharedExpertIntermediateSize: null,
    denseLayers: [],
  }),
  names: (l, moe) => {
    const p = `model.layers.${l}.block_sparse_moe`;
    return {
      router: `${p}.gate.weight`,
      experts: Array.from({ length: moe.numExperts }, (_, e) => ({
        gate: `${p}.experts.${e}.w1.weight`,
        down: `${p}.experts.${e}.w2.weight`,
        up: `${p}.experts.${e}.w3.weight`,
      })),
      shared: null,
      sharedGate: null,
    };
  },
  expertWidthKey: 'intermediate_size',
};

export const mixtral: ArchEntry = {
  ...NO_BIAS,
  keys: ['sliding_window', 'num_local_experts', 'num_experts_per_tok'],
  fixed: NO_BIAS_KEYS,
  defaultTheta: 1e6,
  attention: mistralAttention,
  causalLm: ['MixtralForCausalLM'],
  moe: MIXTRAL_MOE,
  // convert_hf_to_gguf's MixtralModel is a LlamaModel: llama with experts stacked per layer.
  gguf: LLAMA_GGUF,
  // TensorRT-LLM runs Mixtral (LLaMAForCausalLM with a MoeConfig), but the target writes no expert tensors yet.
  tensorrtLlm: llamaTrtllm('MixtralForCausalLM'),
  // onnxruntime-genai's LLM list has no MoE type llmc writes.
  ortGenai: null,
};
