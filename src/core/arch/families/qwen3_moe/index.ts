/**
 * Qwen3-MoE (transformers' Qwen3MoeForCausalLM): Qwen3's attention (per-head q/k norms) with routed
 * experts (softmax, top-k, renormalized with norm_topk_prob), no shared expert; decoder_sparse_step
 * and mlp_only_layers make layers dense.
 */
import { LlmcError } from '../../../errors.js';
import { qwenTrtllm } from '../qwen2/index.js';
import { denseLayersRefusal, fullAttention, ggufU32, LLAMA_BIAS, neoxGguf, plainMoe, windowOf, type ArchEntry } from '../../family.js';

export const qwen3_moe: ArchEntry = {
  ...LLAMA_BIAS,
  keys: [
    'attention_bias', 'use_sliding_window', 'sliding_window', 'max_window_layers', 'num_experts', 'num_local_experts', 'num_experts_per_tok',
    'moe_intermediate_size', 'norm_topk_prob', 'decoder_sparse_step', 'mlp_only_layers',
  ],
  fixed: { mlp_bias: false },
  defaultTheta: 10000,
  // transformers' Qwen3-MoE applies sliding_window (with use_sliding_window) to every layer regardless of
  // max_window_layers, unlike Qwen3: not implemented, so refused rather than guessed.
  attention: (c, numLayers) => {
    if (c.raw.use_sliding_window === true && windowOf(c) !== null) throw new LlmcError(`use_sliding_window with sliding_window ${windowOf(c)} is not implemented for qwen3_moe`, c.file);
    return fullAttention(c, numLayers);
  },
  causalLm: ['Qwen3MoeForCausalLM'],
  // transformers 5 names the expert count num_local_experts (num_experts before).
  moe: plainMoe(['num_local_experts', 'num_experts'], 'moe_intermediate_size', true),
  features: () => ({ qkNorm: { scope: 'head', offset: 0 } }),
  // convert_hf_to_gguf's Qwen3MoeModel (model_arch QWEN3MOE): llama.cpp always renormalizes the top-k weights.
  gguf: neoxGguf(
    'qwen3moe',
    (spec) =>
      spec.moe!.routing !== 'softmax-topk-renorm'
        ? 'norm_topk_prob is false, but llama.cpp\'s qwen3moe always renormalizes the top-k router weights; the gguf target refuses rather than change the model'
        : denseLayersRefusal(spec, 'qwen3moe'),
    'softmax-topk-renorm',
    (spec) => [{ key: 'expert_feed_forward_length', value: ggufU32(spec.moe!.expertIntermediateSize) }],
  ),
  // models/__init__.py MODEL_MAP: 'Qwen3MoeForCausalLM': QWenForCausalLM (releases since qwen3_moe joined QWenConfig's valid_types).
  tensorrtLlm: qwenTrtllm('qwen3_moe', 'Qwen3MoeForCausalLM', ['qk-norm']),
  // No genai_config.json: not run through onnxruntime-genai here, so none is claimed.
  ortGenai: null,
};
