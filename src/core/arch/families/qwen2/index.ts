/** Qwen2 (transformers' Qwen2ForCausalLM): q/k/v biases always, o_proj never; sliding window only with use_sliding_window. */
import { FULL, ggufExpertCounts, layerTypes, NO_BIAS_KEYS, SLIDING, slidingFrom, windowOf, type ArchEntry, type Attention, type ConfigReader, type GgufFamily } from '../../family.js';

/** A window only with use_sliding_window, on layers >= max_window_layers unless layer_types says otherwise. */
function attention(c: ConfigReader, numLayers: number): Attention {
  const w = c.raw.use_sliding_window === true ? windowOf(c) : null;
  const maxWindow = c.raw.max_window_layers === undefined ? 28 : c.num('max_window_layers');
  const types = layerTypes(c, numLayers) ?? Array.from({ length: numLayers }, (_, l) => (w !== null && l >= maxWindow ? SLIDING : FULL));
  return slidingFrom(c, types, w);
}

/** convert_hf_to_gguf's Qwen2Model (model_arch QWEN2): NeoX rope on Hugging Face's layout, nothing permuted. */
export const QWEN2_GGUF: GgufFamily = {
  arch: 'qwen2',
  metadata: (spec) => ({ kvs: ggufExpertCounts(spec), notes: [] }),
  permuteQK: false,
  ropeFreqs: false,
  layerTensors: () => [],
  refuse: () => null,
  routing: null,
  type70B: false,
};

export const qwen2: ArchEntry = {
  qkvBias: () => true,
  oBias: () => false,
  keys: ['use_sliding_window', 'sliding_window', 'max_window_layers'],
  fixed: NO_BIAS_KEYS,
  defaultTheta: 10000,
  attention,
  causalLm: ['Qwen2ForCausalLM'],
  moe: null,
  gguf: QWEN2_GGUF,
  // TensorRT-LLM's QWenForCausalLM (models/qwen/config.py QWenConfig). QWenDecoderLayer reads
  // qwen_type with no default ('qwen2' for Qwen2ForCausalLM, as from_hugging_face sets it from
  // model_type); moe as from_hugging_face builds it (NONE = 0); moe_intermediate_size /
  // moe_shared_expert_intermediate_size 0 for a dense model; no logn attention.
  tensorrtLlm: {
    architecture: 'Qwen2ForCausalLM',
    config: () => ({
      qwen_type: 'qwen2',
      moe: { num_experts: 0, top_k: 0, normalization_mode: 0 },
      moe_intermediate_size: 0,
      moe_shared_expert_intermediate_size: 0,
      use_logn_attn: false,
    }),
  },
  ortGenai: 'qwen2',
};
