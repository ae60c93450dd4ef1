/**
 * Llama (transformers' LlamaForCausalLM): RMSNorm, RoPE, SwiGLU, GQA; biases only with
 * `attention_bias`, every layer attends fully. The base the other Llama-family entries build on.
 */
import { LlmcError } from '../../../errors.js';
import { ggufExpertCounts, ggufU32, layerTypes, LLAMA_BIAS, SLIDING, type ArchEntry, type Attention, type ConfigReader, type GgufFamily, type TrtllmFamily } from '../../family.js';

/** Every layer attends to the whole context. */
function attention(c: ConfigReader, numLayers: number): Attention {
  const types = layerTypes(c, numLayers);
  if (types?.includes(SLIDING)) throw new LlmcError(`"layer_types" has ${SLIDING} layers, which transformers' Llama does not implement`, c.file);
  return { slidingWindow: null, slidingLayers: null };
}

/** convert_hf_to_gguf's LlamaModel (model_arch LLAMA): q/k permuted, llama3 rope factors, rope.dimension_count. */
export const LLAMA_GGUF: GgufFamily = {
  arch: 'llama',
  metadata: (spec) => ({ kvs: [{ key: 'rope.dimension_count', value: ggufU32(spec.headDim) }, ...ggufExpertCounts(spec)], notes: [] }),
  permuteQK: true,
  ropeFreqs: true,
  layerTensors: () => [],
  refuse: () => null,
  // llama.cpp's llama (Mixtral) renormalizes the top-k router weights.
  routing: 'softmax-topk-renorm',
  type70B: true,
};

/**
 * TensorRT-LLM's LLaMAForCausalLM (models/llama/config.py LLaMAConfig): a dense model's MoeConfig is
 * 0 experts (its default normalization, RENORMALIZE = 1); residual_mlp off (HF parallel_attn_mlp_res).
 */
/**
 * TensorRT-LLM's LLaMAForCausalLM (tensorrt_llm/models/llama/config.py LLaMAConfig), which MODEL_MAP
 * also gives MistralForCausalLM, MixtralForCausalLM and GraniteForCausalLM: residual_mlp, `moe`
 * (layers/moe.py MoeConfig; LLaMAConfig's default normalization_mode RENORMALIZE = 1, the mode
 * from_hugging_face sets for mixtral, whose experts then run the fused 'swiglu'), and Granite's
 * embedding_multiplier / attention_multiplier / residual_multiplier / output_multiplier_scale, as
 * from_hugging_face derives them: attention_multiplier × sqrt(head_size) (TensorRT-LLM's attention
 * divides by sqrt(head_size) after it), output_multiplier_scale = 1 / logits_scaling.
 */
export const llamaTrtllm = (architecture: string, layer: TrtllmFamily['layer'] = []): TrtllmFamily => ({
  architecture,
  layer,
  config: (s) => ({
    residual_mlp: false,
    moe: { num_experts: s.moe?.numExperts ?? 0, top_k: s.moe?.topK ?? 0, normalization_mode: 1 },
    ...(s.moe ? { hidden_act: 'swiglu', intermediate_size: s.moe.expertIntermediateSize } : {}),
    ...(s.multipliers
      ? {
          embedding_multiplier: s.multipliers.embedding,
          attention_multiplier: (s.multipliers.attention ?? s.headDim ** -0.5) * Math.sqrt(s.headDim),
          residual_multiplier: s.multipliers.residual,
          output_multiplier_scale: 1 / s.multipliers.logitsDivide,
        }
      : {}),
  }),
  refuse: (s) => {
    if (!s.moe) return null;
    if (s.moe.routing !== 'softmax-topk-renorm') return "top-k weights without renormalization (TensorRT-LLM's LLaMA MoE renormalizes)";
    if (s.moe.sharedExpertIntermediateSize !== null || s.moe.denseLayers.length) return "a shared expert or dense layers, which TensorRT-LLM's LLaMA MoE layer does not have";
    return null;
  },
});

export const llama: ArchEntry = {
  ...LLAMA_BIAS,
  keys: ['attention_bias', 'mlp_bias'],
  fixed: {},
  defaultTheta: 10000,
  attention,
  // 'LLaMAForCausalLM': the class name of transformers' first llama conversions (2023), same layout.
  causalLm: ['LlamaForCausalLM', 'LLaMAForCausalLM'],
  moe: null,
  gguf: LLAMA_GGUF,
  tensorrtLlm: llamaTrtllm('LlamaForCausalLM'),
  ortGenai: 'llama',
};
