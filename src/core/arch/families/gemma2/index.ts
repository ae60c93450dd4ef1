/**
 * Gemma 2 (transformers' Gemma2ForCausalLM): sandwich norms (input, post-attention, pre- and
 * post-feedforward) multiplying by (1 + w), embeddings times sqrt(hidden_size), GELU-tanh (GeGLU)
 * MLP, query_pre_attn_scalar, final logit soft-capping, sliding and full layers alternating.
 */
import { LlmcError } from '../../../errors.js';
import { ggufF32, ggufU32, layerTypes, NO_BIAS, slidingFrom, SLIDING, FULL, windowOf, type ArchEntry, type Attention, type ConfigReader, type Features, type GgufFamily, type GgufMetaValue, type TrtllmFamily } from '../../family.js';
import { windowOf as windowOfLayer } from '../../spec.js';
import type { ArchSpec } from '../../types.js';

/** A positive number or null (transformers' "off"). */
function optionalPositive(c: ConfigReader, key: string): number | null {
  const v = c.raw[key];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'number' || !Number.isFinite(v) || !(v > 0)) throw new LlmcError(`"${key}" must be a positive number or null, got ${JSON.stringify(v)}`, c.file);
  return v;
}

/** GELU with the tanh approximation: the activation names transformers maps to it. */
const GELU_TANH = ['gelu_pytorch_tanh', 'gelu_new', 'gelu_fast'];

/** Gemma 2 and 3's layer math (gemma3 adds per-head q/k norms by (1 + w)). */
export function gemmaFeatures(qkNorm: boolean, finalSoftcapDefault: number | null) {
  return (c: ConfigReader): Partial<Features> => {
    // transformers' gemma classes read hidden_activation; the older hidden_act they ignore.
    const act = c.raw.hidden_activation ?? 'gelu_pytorch_tanh';
    if (!GELU_TANH.includes(act as string)) throw new LlmcError(`unsupported hidden_activation ${JSON.stringify(act)} (supported: ${GELU_TANH.join(', ')})`, c.file);
    if (c.raw.use_bidirectional_attention === true) throw new LlmcError('"use_bidirectional_attention": true (an encoder) is not a causal LM; llmc compiles causal decoders', c.file);
    optionalPositive(c, 'attn_logit_softcapping');
    const qpas = c.raw.query_pre_attn_scalar === undefined ? 256 : c.posInt('query_pre_attn_scalar');
    return {
      hiddenAct: 'gelu_tanh',
      qkNorm: qkNorm ? { scope: 'head', offset: 1 } : null,
      normPlacement: 'sandwich',
      rmsNormOffset: 1,
      // sqrt(hidden_size) in the activation dtype (float32 here), as transformers casts the normalizer.
      multipliers: { embedding: Math.fround(Math.sqrt(c.posInt('hidden_size'))), residual: 1, attention: qpas ** -0.5, logitsDivide: 1 },
      // transformers 5.17 runs gemma with its default attention (sdpa), which drops the softcap argument:
      // only its eager path caps the scores. The references (what from_pretrained computes) are sdpa's and
      // match to 1e-6 without the cap (5e-5 off with it), so llmc follows them; the value is still checked.
      attnSoftcap: null,
      // Absent: the config class's default (Gemma2Config 30.0, Gemma3TextConfig None); null: off.
      finalSoftcap: c.raw.final_logit_softcapping === undefined ? finalSoftcapDefault : optionalPositive(c, 'final_logit_softcapping'),
    };
  };
}

/** The config keys both gemma classes read. */
export const GEMMA_KEYS = ['sliding_window', 'attn_logit_softcapping', 'final_logit_softcapping', 'query_pre_attn_scalar', 'hidden_activation', 'use_bidirectional_attention', 'hidden_act'];
/** Gemma builds no biases (attention_bias false); "hybrid" caches compute the same. */
export const GEMMA_FIXED = { attention_bias: false, cache_implementation: 'hybrid' };

/**
 * TensorRT-LLM's GemmaForCausalLM (tensorrt_llm/models/gemma/config.py GemmaConfig, model.py
 * GemmaDecoderLayer; modeling_utils.py Gemma2ConfigGroup / Gemma3ConfigGroup, every field of which
 * get_config_group requires): architecture Gemma2ForCausalLM / Gemma3ForCausalLM picks the layer
 * (inter_layernorms: pre/post feed-forward norms; gemma3: qk_layernorm and a local rope base on the
 * layers with (l + 1) % _sliding_window_pattern ≠ 0), query_pre_attn_scalar (q_scaling =
 * sqrt(query_pre_attn_scalar / head_size)), final_logit_softcapping, gemma2's attn_logit_softcapping
 * (Attention max_attn_value; llmc's spec has none, as transformers' default attention computes, so
 * null: no cap), GemmaModel multiplies the embeddings by sqrt(hidden_size) itself. The weights: every
 * norm + 1 (convert.py load_gemma_weights). gemma3's pattern is written under both names the
 * releases read (_sliding_window_pattern in config.py / model.py, sliding_window_pattern in
 * Gemma3ConfigGroup).
 */
export function gemmaTrtllm(architecture: string, gemma3: boolean): TrtllmFamily {
  const qpas = (s: ArchSpec) => (s.multipliers?.attention ?? s.headDim ** -0.5) ** -2;
  const pattern = (s: ArchSpec) => {
    const first = Array.from({ length: s.numLayers }, (_, l) => l).find((l) => windowOfLayer(s, l) === null);
    return first === undefined ? s.numLayers + 1 : first + 1;
  };
  return {
    architecture,
    layer: gemma3 ? ['gemma', 'qk-norm'] : ['gemma'],
    normPlusOne: true,
    config: (s) => ({
      hidden_act: 'gelu_pytorch_tanh',
      inter_layernorms: true,
      query_pre_attn_scalar: Math.round(qpas(s)),
      final_logit_softcapping: s.finalSoftcap,
      ...(gemma3
        ? { _sliding_window_pattern: pattern(s), sliding_window_pattern: pattern(s), rope_local_base_freq: s.localRope?.theta ?? s.ropeTheta, sliding_window: s.slidingWindow }
        : { attn_logit_softcapping: s.attnSoftcap }),
    }),
    refuse: (s) => {
      const m = s.multipliers;
      if (!m || m.embedding !== Math.fround(Math.sqrt(s.hiddenSize)) || m.residual !== 1 || m.logitsDivide !== 1) return "multipliers other than gemma's sqrt(hidden_size) on the embeddings";
      if (Math.abs(qpas(s) - Math.round(qpas(s))) > 1e-6 * qpas(s)) return `query_pre_attn_scalar ${qpas(s)} is not an integer`;
      if (gemma3) {
        const p = pattern(s);
        const bad = Array.from({ length: s.numLayers }, (_, l) => l).find((l) => (windowOfLayer(s, l) !== null) !== ((l + 1) % p !== 0));
        if (bad !== undefined) return `sliding layers that no _sliding_window_pattern gives (TensorRT-LLM's gemma3 slides every layer l with (l + 1) % pattern ≠ 0; layer ${bad} differs)`;
        if (s.ropeScaling && s.slidingWindow !== null) return `rope scaling "${s.ropeScaling.type}" on the full layers only, which this writer cannot separate from the sliding layers' rope in TensorRT-LLM's config`;
      }
      return null;
    },
  };
}

/** Gemma 2: sliding_window (default 4096) on the even layers unless layer_types says otherwise. */
function gemma2Attention(c: ConfigReader, numLayers: number): Attention {
  const w = c.raw.sliding_window === undefined ? 4096 : windowOf(c);
  const types = layerTypes(c, numLayers) ?? Array.from({ length: numLayers }, (_, l) => ((l + 1) % 2 ? SLIDING : FULL));
  return slidingFrom(c, types, w);
}

/** key_length / value_length, which the gemma converters write even where head_dim is hidden / heads (the common keys skip them there). */
export function gemmaHeadKeys(spec: ArchSpec): { key: string; value: GgufMetaValue }[] {
  return spec.headDim * spec.numHeads === spec.hiddenSize ? [{ key: 'attention.key_length', value: ggufU32(spec.headDim) }, { key: 'attention.value_length', value: ggufU32(spec.headDim) }] : [];
}

/**
 * What llama.cpp's gemma2 / gemma3 compute on their own (llama_model::load_hparams): sliding layers
 * every `pattern` (il % pattern < pattern − 1), the scores scaled by head_dim^-0.5 (by
 * (hidden/heads)^-0.5 for the 27B shapes), so another layout or query_pre_attn_scalar is refused.
 */
export function gemmaLayoutRefusal(spec: ArchSpec, arch: string, pattern: number, layers27B: number): string | null {
  const sliding = Array.from({ length: spec.numLayers }, (_, l) => l).filter((l) => windowOfLayer(spec, l) !== null);
  const want = Array.from({ length: spec.numLayers }, (_, l) => l).filter((l) => l % pattern < pattern - 1);
  if (sliding.join() !== want.join()) return `sliding layers [${sliding}] differ from llama.cpp's ${arch} layout (every layer but each ${pattern}th slides: [${want}]); the gguf target refuses rather than change the attention`;
  const scale = spec.multipliers?.attention ?? spec.headDim ** -0.5;
  const llamaCpp = spec.numLayers === layers27B ? (spec.hiddenSize / spec.numHeads) ** -0.5 : spec.headDim ** -0.5;
  if (Math.abs(scale - llamaCpp) > 1e-7 * llamaCpp) return `query_pre_attn_scalar gives attention scale ${scale}, but llama.cpp's ${arch} scales by ${llamaCpp} for this shape`;
  return null;
}

/** convert_hf_to_gguf's Gemma2Model (model_arch GEMMA2): NeoX rope, norms written as 1 + w, soft-capping and window keys. */
const GEMMA2_GGUF: GgufFamily = {
  arch: 'gemma2',
  metadata: (spec) => ({
    kvs: [
      ...gemmaHeadKeys(spec),
      ...(spec.finalSoftcap !== null ? [{ key: 'final_logit_softcapping', value: ggufF32(spec.finalSoftcap) }] : []),
      ...(spec.slidingWindow !== null ? [{ key: 'attention.sliding_window', value: ggufU32(spec.slidingWindow) }] : []),
    ],
    // transformers' default attention drops attn_logit_softcapping (see gemmaFeatures); llama.cpp's gemma2 caps at 50 unless told otherwise.
    notes: ["note: llama.cpp's gemma2 soft-caps attention scores at attn_logit_softcapping (default 50), which transformers' default attention does not (~1e-4 relative)"],
  }),
  permuteQK: false,
  ropeFreqs: false,
  layerTensors: () => [],
  refuse: (spec) => (spec.finalSoftcap === null ? "final_logit_softcapping null: llama.cpp's gemma2 always caps the logits" : gemmaLayoutRefusal(spec, 'gemma2', 2, 46)),
  routing: null,
  type70B: false,
  readBack: false,
  normPlusOne: true,
};

export const gemma2: ArchEntry = {
  ...NO_BIAS,
  keys: GEMMA_KEYS,
  fixed: GEMMA_FIXED,
  defaultTheta: 10000,
  attention: gemma2Attention,
  causalLm: ['Gemma2ForCausalLM'],
  moe: null,
  features: gemmaFeatures(false, 30),
  gguf: GEMMA2_GGUF,
  tensorrtLlm: gemmaTrtllm('Gemma2ForCausalLM', false),
  // onnxruntime-genai's gemma / phi3 builders are not checked against llmc's graphs: no genai_config.json.
  ortGenai: null,
};
