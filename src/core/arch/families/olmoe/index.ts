/**
 * OLMoE (transformers' OlmoeForCausalLM): pre-norm layers with q/k RMSNorms over the whole q and k
 * projections (one weight per channel), routed experts of intermediate_size (softmax, top-k,
 * renormalized only with norm_topk_prob), no shared expert.
 */
import { embdWideAttention, fullAttention, LLAMA_BIAS, neoxGguf, plainMoe, type ArchEntry } from '../../family.js';

export const olmoe: ArchEntry = {
  ...LLAMA_BIAS,
  keys: ['attention_bias', 'num_experts', 'num_experts_per_tok', 'norm_topk_prob'],
  // clip_qkv clamps q/k/v; only its unset value is implemented.
  fixed: { mlp_bias: false, clip_qkv: null },
  defaultTheta: 10000,
  attention: fullAttention,
  causalLm: ['OlmoeForCausalLM'],
  moe: plainMoe(['num_experts'], 'intermediate_size', false),
  features: () => ({ qkNorm: { scope: 'all', offset: 0 } }),
  // convert_hf_to_gguf's OlmoeModel (model_arch OLMOE). It writes rms_norm_eps as 1e-5 whatever the
  // config says; llmc writes the config's (what transformers computes with). llama.cpp's olmoe never
  // renormalizes the top-k weights and sizes attn_k_norm as n_embd (no grouped-query attention).
  gguf: neoxGguf(
    'olmoe',
    (spec) =>
      spec.moe!.routing !== 'softmax-topk'
        ? 'norm_topk_prob is true, but llama.cpp\'s olmoe never renormalizes the top-k router weights; the gguf target refuses rather than change the model'
        : spec.numKvHeads !== spec.numHeads
          ? `num_key_value_heads ${spec.numKvHeads} differs from num_attention_heads ${spec.numHeads}, but llama.cpp's olmoe has no grouped-query attention (attn_k_norm of n_embd); the gguf target refuses it`
          : spec.moe!.denseLayers.length > 0
            ? 'dense layers, which llama.cpp\'s olmoe cannot load'
            : embdWideAttention(spec, 'olmoe'),
    'softmax-topk',
  ),
  tensorrtLlm: null,
  // No genai_config.json: not run through onnxruntime-genai here, so none is claimed.
  ortGenai: null,
  // transformers.js (3.x) has no olmoe model type: the cuda directory is for onnxruntime / TensorRT.
  transformersJs: false,
};
