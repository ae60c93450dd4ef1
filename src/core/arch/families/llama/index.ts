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
export const llamaTrtllm = (architecture: string): TrtllmFamily => ({
  architecture,
  config: () => ({ residual_mlp: false, moe: { num_experts: 0, top_k: 0, normalization_mode: 1 } }),
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
