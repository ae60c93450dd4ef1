/**
 * Granite (transformers' GraniteForCausalLM): Llama's layer with four scalars: embeddings ×
 * embedding_multiplier, each block's output × residual_multiplier, attention scores ×
 * attention_multiplier (instead of 1/sqrt(head_dim)), logits ÷ logits_scaling.
 */
import { ggufF32, ggufU32, LLAMA_BIAS, fullAttention, type ArchEntry, type ConfigReader } from '../../family.js';
import type { Multipliers } from '../../types.js';
import { llamaTrtllm } from '../llama/index.js';

/** Each 1.0 by default in GraniteConfig (attention_multiplier included). */
function multipliers(c: ConfigReader): Multipliers {
  return { embedding: c.num('embedding_multiplier', 1), residual: c.num('residual_multiplier', 1), attention: c.num('attention_multiplier', 1), logitsDivide: c.num('logits_scaling', 1) };
}

export const granite: ArchEntry = {
  ...LLAMA_BIAS,
  keys: ['attention_bias', 'mlp_bias', 'embedding_multiplier', 'residual_multiplier', 'attention_multiplier', 'logits_scaling'],
  fixed: {},
  defaultTheta: 10000,
  attention: fullAttention,
  causalLm: ['GraniteForCausalLM'],
  moe: null,
  features: (c) => ({ multipliers: multipliers(c) }),
  // convert_hf_to_gguf's GraniteModel (a LlamaModel, model_arch GRANITE): q/k permuted, the
  // multipliers as <arch>.attention.scale / embedding_scale / residual_scale / logit_scale, each only
  // when non-zero (llama.cpp reads 0 as unset); head_dim is dropped, so llama.cpp takes n_embd / n_head.
  gguf: {
    arch: 'granite',
    metadata: (spec) => {
      const m = spec.multipliers!;
      const kvs = [{ key: 'rope.dimension_count', value: ggufU32(spec.headDim) }];
      if (m.attention) kvs.push({ key: 'attention.scale', value: ggufF32(m.attention) });
      if (m.embedding) kvs.push({ key: 'embedding_scale', value: ggufF32(m.embedding) });
      if (m.residual) kvs.push({ key: 'residual_scale', value: ggufF32(m.residual) });
      if (m.logitsDivide) kvs.push({ key: 'logit_scale', value: ggufF32(m.logitsDivide) });
      return { kvs, notes: [] };
    },
    permuteQK: true,
    ropeFreqs: false,
    layerTensors: () => [],
    refuse: (spec) =>
      spec.headDim * spec.numHeads !== spec.hiddenSize
        ? `head_dim ${spec.headDim} is not hidden_size / num_attention_heads, which llama.cpp's granite assumes; the gguf target refuses it`
        : null,
    routing: null,
    type70B: false,
  },
  tensorrtLlm: llamaTrtllm('GraniteForCausalLM', ['multipliers']),
  // No genai_config.json: not run through onnxruntime-genai here, so none is claimed.
  ortGenai: null,
};
