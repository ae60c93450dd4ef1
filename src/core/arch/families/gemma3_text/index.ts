/**
 * Gemma 3 text (transformers' Gemma3ForCausalLM): Gemma 2's layer with per-head q/k RMSNorms by
 * (1 + w), one full layer every sliding_window_pattern (default 6), and a rope per layer type: the
 * full layers' rope_parameters.full_attention (older: rope_theta + rope_scaling), the sliding ones'
 * own base (rope_parameters.sliding_attention, older: rope_local_base_freq).
 */
import { LlmcError } from '../../../errors.js';
import { readRope, type RopeContext } from '../../rope-config.js';
import type { ArchSpec } from '../../types.js';
import { FULL, layerTypes, NO_BIAS, SLIDING, slidingFrom, windowOf, type ArchEntry, type Attention, type ConfigReader, type Json } from '../../family.js';
import { GEMMA_FIXED, GEMMA_KEYS, gemmaFeatures, gemmaHeadKeys, gemmaLayoutRefusal, gemmaTrtllm } from '../gemma2/index.js';
import { ggufU32, type GgufFamily } from '../../family.js';

/** llama.cpp's gemma3 rotates its sliding layers at a fixed base (rope_freq_base_train_swa). */
const LLAMA_CPP_LOCAL_BASE = 10000;

/** convert_hf_to_gguf's Gemma3Model (model_arch GEMMA3): NeoX rope, norms (q/k norms too) written as 1 + w, rope base of the full layers. */
const GEMMA3_GGUF: GgufFamily = {
  arch: 'gemma3',
  metadata: (spec) => ({
    kvs: [...gemmaHeadKeys(spec), ...(spec.slidingWindow !== null ? [{ key: 'attention.sliding_window', value: ggufU32(spec.slidingWindow) }] : [])],
    notes: [],
  }),
  permuteQK: false,
  ropeFreqs: false,
  layerTensors: () => [],
  refuse: (spec) => {
    if (spec.finalSoftcap !== null) return "final_logit_softcapping is set, which llama.cpp's gemma3 does not apply";
    const local = spec.localRope?.theta ?? (spec.slidingWindow !== null ? spec.ropeTheta : LLAMA_CPP_LOCAL_BASE);
    if (local !== LLAMA_CPP_LOCAL_BASE) return `the sliding layers rotate at base ${local}, but llama.cpp's gemma3 fixes them at ${LLAMA_CPP_LOCAL_BASE}`;
    if (!spec.localRope && spec.slidingWindow !== null && spec.ropeScaling) return `rope scaling "${spec.ropeScaling.type}" on sliding layers, which llama.cpp's gemma3 rotates unscaled`;
    return gemmaLayoutRefusal(spec, 'gemma3', 6, 62);
  },
  routing: null,
  type70B: false,
  readBack: false,
  normPlusOne: true,
};

/** Every sliding_window_pattern-th layer is full (default 6), the others slide, unless layer_types says otherwise. */
function gemma3Attention(c: ConfigReader, numLayers: number): Attention {
  const w = c.raw.sliding_window === undefined ? 4096 : windowOf(c);
  const pattern = c.raw.sliding_window_pattern ?? c.raw._sliding_window_pattern ?? 6;
  if (typeof pattern !== 'number' || !Number.isSafeInteger(pattern) || pattern <= 0) throw new LlmcError(`"sliding_window_pattern" must be a positive integer, got ${JSON.stringify(pattern)}`, c.file);
  const types = layerTypes(c, numLayers) ?? Array.from({ length: numLayers }, (_, l) => ((l + 1) % pattern ? SLIDING : FULL));
  return slidingFrom(c, types, w);
}

/**
 * Gemma 3's rope per layer type: `rope_parameters` {full_attention, sliding_attention} (transformers
 * >= 5), or the older rope_theta + rope_scaling for full layers and rope_local_base_freq (default
 * 10000, no scaling) for sliding ones. Where only one kind of layer exists, its rope is the model's.
 */
function gemma3Rope(c: ConfigReader, ctx: RopeContext, att: Attention, numLayers: number): Pick<ArchSpec, 'ropeTheta' | 'ropeScaling' | 'localRope'> {
  const rp = c.raw.rope_parameters;
  const nested = typeof rp === 'object' && rp !== null && !Array.isArray(rp) && Object.values(rp).some((v) => typeof v === 'object' && v !== null && !Array.isArray(v));
  const strip = (cfg: Json): Json => {
    const { rope_parameters: _p, rope_scaling: _s, rope_theta: _t, rope_local_base_freq: _l, ...rest } = cfg;
    return rest;
  };
  let full: { ropeTheta: number; ropeScaling: ArchSpec['ropeScaling'] };
  let local: { ropeTheta: number; ropeScaling: ArchSpec['ropeScaling'] };
  if (nested) {
    const p = rp as Json;
    for (const k of Object.keys(p)) if (k !== FULL && k !== SLIDING) throw new LlmcError(`"rope_parameters" has a setting for "${k}"; gemma3 layers are ${FULL} or ${SLIDING}`, c.file);
    const side = (k: string) => {
      if (p[k] === undefined || p[k] === null) throw new LlmcError(`"rope_parameters" has no "${k}" setting`, c.file);
      return readRope({ ...strip(c.raw), rope_parameters: p[k] }, c.file, ctx);
    };
    full = side(FULL);
    local = side(SLIDING);
  } else {
    full = readRope(c.raw, c.file, { ...ctx, defaultTheta: 1e6 });
    const base = c.raw.rope_local_base_freq === undefined ? 10000 : c.num('rope_local_base_freq');
    if (!(base > 0)) throw new LlmcError(`"rope_local_base_freq" must be positive, got ${base}`, c.file);
    local = { ropeTheta: base, ropeScaling: null };
  }
  const slidingCount = att.slidingWindow === null ? 0 : att.slidingLayers === null ? numLayers : att.slidingLayers.length;
  const same = full.ropeTheta === local.ropeTheta && JSON.stringify(full.ropeScaling) === JSON.stringify(local.ropeScaling);
  if (slidingCount === numLayers) return { ...local, localRope: null };
  if (slidingCount === 0 || same) return { ...full, localRope: null };
  if (local.ropeScaling) throw new LlmcError(`rope scaling "${local.ropeScaling.type}" on the sliding layers beside another rope on the full ones is not implemented (only a plain local base)`, c.file);
  return { ...full, localRope: { theta: local.ropeTheta, scaling: null } };
}

export const gemma3_text: ArchEntry = {
  ...NO_BIAS,
  keys: [...GEMMA_KEYS, 'rope_local_base_freq', 'sliding_window_pattern', '_sliding_window_pattern'],
  fixed: GEMMA_FIXED,
  defaultTheta: 1e6,
  attention: gemma3Attention,
  causalLm: ['Gemma3ForCausalLM'],
  moe: null,
  features: gemmaFeatures(true, null),
  rope: gemma3Rope,
  gguf: GEMMA3_GGUF,
  tensorrtLlm: gemmaTrtllm('Gemma3ForCausalLM', true),
  // onnxruntime-genai's gemma / phi3 builders are not checked against llmc's graphs: no genai_config.json.
  ortGenai: null,
};
