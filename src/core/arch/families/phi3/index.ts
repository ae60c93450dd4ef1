/**
 * Phi-3 (transformers' Phi3ForCausalLM): Llama's layer with q, k and v in one qkv_proj and gate and
 * up in one gate_up_proj, split at ingestion (row ranges of the stored tensors) into the IR's names;
 * sliding_window on every layer as Mistral's; longrope as rope-config.ts reads it.
 */
import { NO_BIAS, NO_BIAS_KEYS, type ArchEntry, type FusedTensor, type TrtllmFamily } from '../../family.js';
import type { ArchSpec } from '../../types.js';
import { mistralAttention } from '../mistral/index.js';
import { ggufF32, ggufU32, type GgufFamily } from '../../family.js';

/**
 * convert_hf_to_gguf's Phi3MiniModel (model_arch PHI3): NeoX rope, attn_qkv and ffn_up kept fused, rope
 * dims and window keys. longrope (Phi-3.5-mini, Phi-3-*-128k): generate_extra_tensors writes
 * rope_factors_long / rope_factors_short (F32, rope dims / 2 each) and rope.scaling.attn_factor;
 * set_gguf_parameters rope.scaling.original_context_length. llama.cpp's phi3 then picks the long
 * factors for every position when the context it is given (n_ctx per sequence) exceeds
 * original_context_length, the short ones otherwise (llama_model::get_rope_factors): transformers
 * picks by the length of the sequence in hand, so the two agree for a sequence that fills a context
 * on the same side of original_max_position_embeddings.
 */
const PHI3_GGUF: GgufFamily = {
  arch: 'phi3',
  metadata: (spec) => {
    const rs = spec.ropeScaling;
    return {
      kvs: [
        { key: 'rope.dimension_count', value: ggufU32(spec.headDim) },
        { key: 'attention.sliding_window', value: ggufU32(spec.slidingWindow ?? 0) },
        ...(rs?.type === 'longrope'
          ? [
              { key: 'rope.scaling.original_context_length', value: ggufU32(rs.originalMaxPositions) },
              { key: 'rope.scaling.attn_factor', value: ggufF32(rs.attentionFactor) },
            ]
          : []),
      ],
      notes:
        rs?.type === 'longrope'
          ? [`note: llama.cpp's phi3 uses the long rope factors for every position when the context (n_ctx) exceeds ${rs.originalMaxPositions}, the short ones otherwise; transformers switches on the sequence's own length`]
          : [],
    };
  },
  permuteQK: false,
  ropeFreqs: false,
  longropeFactors: true,
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

/**
 * TensorRT-LLM's Phi3ForCausalLM (tensorrt_llm/models/phi3/config.py Phi3Config, model.py
 * Phi3DecoderLayer, convert.py load_weights_from_hf_model): hidden_act 'swiglu' for silu, rotary_pct
 * (read with no default: from_hugging_face sets it from partial_rotary_factor), no `moe` key (its
 * presence alone makes the layer MoE), one MLP whose mlp.fc is gate_up_proj with its halves swapped
 * ([up; gate]). longrope as model.py reads it: position_embedding_type long_rope,
 * original_max_position_embeddings, longrope_scaling_short_factors / _long_factors (rotary_scaling
 * null); the Attention derives the cos/sin scale sqrt(1 + ln(max/orig) / ln(orig)) itself, so
 * another attention_factor is refused.
 */
const PHI3_TRTLLM: TrtllmFamily = {
  architecture: 'Phi3ForCausalLM',
  layer: ['longrope'],
  fusedGateUp: true,
  config: (s) => {
    const r = s.ropeScaling;
    return {
      hidden_act: 'swiglu',
      rotary_pct: 1.0,
      ...(r?.type === 'longrope'
        ? { position_embedding_type: 'long_rope', original_max_position_embeddings: r.originalMaxPositions, longrope_scaling_short_factors: r.shortFactor, longrope_scaling_long_factors: r.longFactor }
        : {}),
    };
  },
  refuse: (s) => {
    const r = s.ropeScaling;
    if (r?.type !== 'longrope') return null;
    const scale = s.maxPositions / r.originalMaxPositions;
    const trt = scale <= 1 ? 1 : Math.sqrt(1 + Math.log(scale) / Math.log(r.originalMaxPositions));
    return Math.abs(r.attentionFactor - trt) > 1e-6 * trt ? `longrope attention_factor ${r.attentionFactor}, where TensorRT-LLM's long_rope scales cos/sin by ${trt}` : null;
  },
};

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
  tensorrtLlm: PHI3_TRTLLM,
  // onnxruntime-genai's gemma / phi3 builders are not checked against llmc's graphs: no genai_config.json.
  ortGenai: null,
};
