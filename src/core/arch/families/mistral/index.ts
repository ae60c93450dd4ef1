/** Mistral (transformers' MistralForCausalLM): Llama without biases, `sliding_window` on every layer. */
import { LlmcError } from '../../../errors.js';
import { FULL, layerTypes, NO_BIAS, NO_BIAS_KEYS, SLIDING, windowOf, type ArchEntry, type Attention, type ConfigReader } from '../../family.js';
import { LLAMA_GGUF, llamaTrtllm } from '../llama/index.js';

/** Mistral / Mixtral: `sliding_window` applies to every layer; transformers ignores layer_types there, so a list saying otherwise is refused. */
export function mistralAttention(c: ConfigReader, numLayers: number): Attention {
  const w = windowOf(c);
  const types = layerTypes(c, numLayers);
  const want = w === null ? FULL : SLIDING;
  if (types && types.some((t) => t !== want)) {
    throw new LlmcError(
      `"layer_types" mixes attention kinds, but transformers' ${String(c.raw.model_type)} ignores layer_types and ${w === null ? 'attends fully in every layer' : `applies sliding_window ${w} to every layer`}; fix the config to say which one is meant`,
      c.file,
    );
  }
  return { slidingWindow: w, slidingLayers: null };
}

export const mistral: ArchEntry = {
  ...NO_BIAS,
  keys: ['sliding_window'],
  fixed: NO_BIAS_KEYS,
  defaultTheta: 10000,
  attention: mistralAttention,
  causalLm: ['MistralForCausalLM'],
  moe: null,
  // convert_hf_to_gguf's MistralModel is a LlamaModel (llama.cpp runs it as llama).
  gguf: LLAMA_GGUF,
  tensorrtLlm: llamaTrtllm('MistralForCausalLM'),
  ortGenai: 'mistral',
};
