/**
 * Qwen3 (transformers' Qwen3ForCausalLM): Qwen2's layout without q/k/v biases (all four with
 * attention_bias), an RMSNorm over each head of q and k before rope (q_norm / k_norm, one weight of
 * head_dim shared by the heads).
 */
import { LLAMA_BIAS, neoxGguf, type ArchEntry } from '../../family.js';
import { qwen2, qwenTrtllm } from '../qwen2/index.js';

export const qwen3: ArchEntry = {
  ...LLAMA_BIAS,
  keys: ['attention_bias', 'use_sliding_window', 'sliding_window', 'max_window_layers'],
  fixed: { mlp_bias: false },
  defaultTheta: 10000,
  // Qwen3Config's layer_types default is Qwen2's: sliding from max_window_layers on, with use_sliding_window.
  attention: qwen2.attention,
  causalLm: ['Qwen3ForCausalLM'],
  moe: null,
  features: () => ({ qkNorm: { scope: 'head', offset: 0 } }),
  // convert_hf_to_gguf's Qwen3Model (model_arch QWEN3): NeoX rope, attn_q_norm / attn_k_norm.
  gguf: neoxGguf('qwen3', () => null, null),
  tensorrtLlm: qwenTrtllm('qwen3', 'Qwen3ForCausalLM', ['qk-norm']),
  // No genai_config.json: not run through onnxruntime-genai here, so none is claimed.
  ortGenai: null,
};
