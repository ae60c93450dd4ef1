/**
 * SmolLM3 (transformers' SmolLM3ForCausalLM): Llama's layer, but the layers marked 0 in
 * no_rope_layers attend without rotary embeddings (default: every no_rope_layer_interval-th layer).
 */
import { LlmcError } from '../../../errors.js';
import { FULL, ggufU32, layerTypes, LLAMA_BIAS, SLIDING, slidingFrom, windowOf, type ArchEntry, type Attention, type ConfigReader } from '../../family.js';

/** The layers that rotate: `no_rope_layers[l]` 1, or by default all but every no_rope_layer_interval-th. */
function ropeLayers(c: ConfigReader, numLayers: number): number[] {
  const v = c.raw.no_rope_layers;
  let flags: number[];
  if (v === undefined || v === null) {
    const every = c.posInt('no_rope_layer_interval', 4);
    flags = Array.from({ length: numLayers }, (_, l) => ((l + 1) % every !== 0 ? 1 : 0));
  } else {
    if (!Array.isArray(v) || v.length < numLayers || !v.every((x) => x === 0 || x === 1)) {
      throw new LlmcError(`"no_rope_layers" must give 0 or 1 for each of the ${numLayers} layers, got ${JSON.stringify(v).slice(0, 120)}`, c.file);
    }
    flags = v as number[];
  }
  return flags.slice(0, numLayers).flatMap((f, l) => (f === 1 ? [l] : []));
}

/** layer_types, else (SmolLM3Config) the rope-less layers slide when use_sliding_window. */
function attention(c: ConfigReader, numLayers: number): Attention {
  const w = windowOf(c);
  const rope = ropeLayers(c, numLayers);
  const types = layerTypes(c, numLayers) ?? Array.from({ length: numLayers }, (_, l) => (c.raw.use_sliding_window === true && w !== null && !rope.includes(l) ? SLIDING : FULL));
  return slidingFrom(c, types, w);
}

export const smollm3: ArchEntry = {
  ...LLAMA_BIAS,
  // max_window_layers: Qwen2's key, left in SmolLM3-3B's released config.json (28); SmolLM3Config never reads it.
  keys: ['attention_bias', 'mlp_bias', 'use_sliding_window', 'sliding_window', 'no_rope_layers', 'no_rope_layer_interval', 'max_window_layers'],
  fixed: {},
  defaultTheta: 2000000,
  attention,
  causalLm: ['SmolLM3ForCausalLM'],
  moe: null,
  features: (c, n) => {
    const rope = ropeLayers(c, n);
    return { ropeLayers: rope.length === n ? null : rope };
  },
  // convert_hf_to_gguf's SmolLM3Model (a LlamaModel, model_arch SMOLLM3): q/k permuted. llama.cpp
  // skips rope on every 4th layer, a constant of its loader (no GGUF key): any other pattern is refused.
  gguf: {
    arch: 'smollm3',
    metadata: (spec) => ({ kvs: [{ key: 'rope.dimension_count', value: ggufU32(spec.headDim) }], notes: [] }),
    permuteQK: true,
    ropeFreqs: false,
    layerTensors: () => [],
    refuse: (spec) => {
      const every4 = Array.from({ length: spec.numLayers }, (_, l) => l).filter((l) => (l + 1) % 4 !== 0);
      const rope = spec.ropeLayers ?? Array.from({ length: spec.numLayers }, (_, l) => l);
      return rope.join(',') === every4.join(',') ? null : `no_rope_layers rotates layers [${rope.join(', ')}], but llama.cpp's smollm3 rotates all but every 4th; the gguf target refuses it`;
    },
    routing: null,
    type70B: false,
  },
  tensorrtLlm: null,
  // No genai_config.json: not run through onnxruntime-genai here, so none is claimed.
  ortGenai: null,
};
