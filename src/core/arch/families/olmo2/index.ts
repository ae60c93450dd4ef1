/**
 * OLMo 2 (transformers' Olmo2ForCausalLM): norms after the blocks, not before (x + norm(attn(x)),
 * post_attention_layernorm / post_feedforward_layernorm, no input_layernorm), and q/k RMSNorms over
 * the whole q and k projections.
 */
import { embdWideAttention, fullAttention, LLAMA_BIAS, neoxGguf, type ArchEntry } from '../../family.js';

export const olmo2: ArchEntry = {
  ...LLAMA_BIAS,
  keys: ['attention_bias'],
  fixed: { mlp_bias: false },
  defaultTheta: 10000,
  attention: fullAttention,
  causalLm: ['Olmo2ForCausalLM'],
  moe: null,
  features: () => ({ qkNorm: { scope: 'all', offset: 0 }, normPlacement: 'post' }),
  // convert_hf_to_gguf's Olmo2Model (model_arch OLMO2): post_attention_norm / post_ffw_norm, attn_q_norm / attn_k_norm.
  gguf: neoxGguf('olmo2', (spec) => embdWideAttention(spec, 'olmo2'), null),
  tensorrtLlm: null,
  // No genai_config.json: not run through onnxruntime-genai here, so none is claimed.
  ortGenai: null,
};
