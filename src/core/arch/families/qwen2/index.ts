/** Qwen2 (transformers' Qwen2ForCausalLM): q/k/v biases always, o_proj never; sliding window only with use_sliding_window. */
import { FULL, ggufExpertCounts, layerTypes, NO_BIAS_KEYS, SLIDING, slidingFrom, windowOf, type ArchEntry, type Attention, type ConfigReader, type GgufFamily, type TrtllmFamily } from '../../family.js';

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

/**
 * TensorRT-LLM's QWenForCausalLM (tensorrt_llm/models/qwen/config.py QWenConfig, model.py
 * QWenDecoderLayer; NVIDIA/TensorRT-LLM main, 2026): qwen_type read with no default (from_hugging_face
 * sets it from model_type: qwen2, qwen2_moe, qwen3, qwen3_moe); qwen3 / qwen3_moe turn on the
 * Attention's qk_layernorm. MoE: `moe` (layers/moe.py MoeConfig: num_experts, top_k,
 * normalization_mode), the expert width in moe_intermediate_size (read for qwen2_moe / qwen3_moe
 * instead of intermediate_size), qwen2_moe's shared expert in moe_shared_expert_intermediate_size,
 * hidden_act 'swiglu' (the experts' fused gated activation). from_hugging_face writes
 * normalization_mode NONE (0) for every Qwen MoE; the writer says what the model computes:
 * RENORMALIZE (1, softmax over the top-k) where norm_topk_prob renormalizes, NONE where it does not.
 * QWenDecoderLayer makes every layer MoE once moe.num_experts > 0: dense layers among them are refused.
 */
export const qwenTrtllm = (qwenType: string, architecture: string, layer: TrtllmFamily['layer'] = []): TrtllmFamily => ({
  architecture,
  layer,
  config: (s) => ({
    qwen_type: qwenType,
    moe: { num_experts: s.moe?.numExperts ?? 0, top_k: s.moe?.topK ?? 0, normalization_mode: s.moe?.routing === 'softmax-topk-renorm' ? 1 : 0 },
    moe_intermediate_size: s.moe?.expertIntermediateSize ?? 0,
    moe_shared_expert_intermediate_size: s.moe?.sharedExpertIntermediateSize ?? 0,
    use_logn_attn: false,
    ...(s.moe ? { hidden_act: 'swiglu' } : {}),
  }),
  refuse: (s) => {
    if (s.moe && s.moe.denseLayers.length) return `dense MLP layers [${s.moe.denseLayers}] among the MoE ones (TensorRT-LLM's QWenDecoderLayer makes every layer MoE)`;
    if (qwenType === 'qwen2_moe' && s.moe && s.moe.sharedExpertIntermediateSize === null) return "no shared expert (TensorRT-LLM's qwen2_moe layer is a SharedMoE with one)";
    if (qwenType !== 'qwen2_moe' && s.moe?.sharedExpertIntermediateSize) return `a shared expert, which TensorRT-LLM's ${qwenType} layer does not have`;
    return null;
  },
});

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
  tensorrtLlm: qwenTrtllm('qwen2', 'Qwen2ForCausalLM'),
  ortGenai: 'qwen2',
};
