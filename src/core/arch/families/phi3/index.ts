/**
 * Phi-3 (transformers' Phi3ForCausalLM): Llama's layer with q, k and v in one qkv_proj and gate and
 * up in one gate_up_proj, split at ingestion (row ranges of the stored tensors) into the IR's names;
 * sliding_window on every layer as Mistral's; longrope as rope-config.ts reads it.
 */
import { NO_BIAS, NO_BIAS_KEYS, type ArchEntry, type FusedTensor } from '../../family.js';
import type { ArchSpec } from '../../types.js';
import { mistralAttention } from '../mistral/index.js';
import { ggufU32, type GgufFamily } from '../../family.js';

/** convert_hf_to_gguf's Phi3MiniModel (model_arch PHI3): NeoX rope, attn_qkv and ffn_up kept fused, rope dims and window keys. */
const PHI3_GGUF: GgufFamily = {
  arch: 'phi3',
  metadata: (spec) => ({
    kvs: [
      { key: 'rope.dimension_count', value: ggufU32(spec.headDim) },
      { key: 'attention.sliding_window', value: ggufU32(spec.slidingWindow ?? 0) },
    ],
    notes: [],
  }),
  permuteQK: false,
  ropeFreqs: false,
  layerTensors: () => [],
  refuse: () => null,
  routing: null,
  type70B: false,
  readBack: false,
  fusedProjections: true,
  placeholderTail: ['<|endoftext|>', '<|end|>'],
};

/** Phi-3: q, k and v in one qkv_proj, gate and up in one gate_up_proj (split into llmc's names at ingestion). */
function phi3Fused(l: number, spec: ArchSpec): FusedTensor[] {
  const a = `model.layers.${l}.self_attn`;
  const m = `model.layers.${l}.mlp`;
  const kv = spec.numKvHeads * spec.headDim;
  return [
    {
      name: `${a}.qkv_proj.weight`,
      parts: [
        { name: `${a}.q_proj.weight`, rows: spec.numHeads * spec.headDim },
        { name: `${a}.k_proj.weight`, rows: kv },
        { name: `${a}.v_proj.weight`, rows: kv },
      ],
    },
    {
      name: `${m}.gate_up_proj.weight`,
      parts: [
        { name: `${m}.gate_proj.weight`, rows: spec.intermediateSize },
        { name: `${m}.up_proj.weight`, rows: spec.intermediateSize },
      ],
    },
  ];
}

export const phi3: ArchEntry = {
  ...NO_BIAS,
  keys: ['sliding_window', 'resid_pdrop', 'embd_pdrop'],
  fixed: NO_BIAS_KEYS,
  defaultTheta: 10000,
  attention: mistralAttention,
  causalLm: ['Phi3ForCausalLM'],
  moe: null,
  fused: phi3Fused,
  gguf: PHI3_GGUF,
  tensorrtLlm: null,
  // onnxruntime-genai's gemma / phi3 builders are not checked against llmc's graphs: no genai_config.json.
  ortGenai: null,
};
