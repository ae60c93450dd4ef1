/**
 * The architecture registry: everything llmc knows about a Hugging Face `model_type`, in one entry.
 * Adding an architecture of the Llama family (RMSNorm, RoPE, SwiGLU, GQA) means adding an entry here:
 * the config keys it reads (every other key that keys.ts does not call harmless is refused), its
 * default rope_theta and sliding-window layout, its tensor names and what llama.cpp calls it. Everything else (the IR,
 * every executor and target) reads the normalized ArchSpec and the names this entry gives.
 */
import { LlmcError } from '../errors.js';
import type { ArchSpec, ModelType, MoeSpec, Multipliers, QkNorm } from './types.js';
import { readRope, type RopeContext } from './rope-config.js';

type Json = Record<string, unknown>;

/** The projections of one SwiGLU MLP (gate, up, down), as Hugging Face names them. */
export interface MlpNames {
  gate: string;
  up: string;
  down: string;
}

/** The router and expert projections of an MoE layer. */
export interface MoeNames {
  router: string;
  experts: MlpNames[];
  shared: MlpNames | null;
  sharedGate: string | null;
}

/** Config readers the entries share (they report errors against `file`). */
export interface ConfigReader {
  num(key: string, fallback?: number): number;
  posInt(key: string, fallback?: number): number;
  raw: Json;
  file: string;
}

export interface MoeFamily {
  /** The routing spec from config.json (numLayers: to find the dense layers). */
  parse(cfg: ConfigReader, numLayers: number): MoeSpec;
  /** Tensor names of layer l's router and experts. */
  names(l: number, moe: MoeSpec): MoeNames;
  /** The config.json key holding one routed expert's width (rewritten when experts are sliced). */
  expertWidthKey: string;
}

/** Which layers attend through a sliding window (spec.slidingWindow / slidingLayers). */
export interface Attention {
  slidingWindow: number | null;
  slidingLayers: number[] | null;
}

export interface ArchEntry {
  /** config.json keys this model_type reads besides keys.ts's COMMON_KEYS; any other key that is not harmless is refused. */
  keys: readonly string[];
  /** Keys this model_type's transformers class ignores, accepted only at the value that matches what it computes (no biases, ...). */
  fixed: Readonly<Record<string, unknown>>;
  /** rope_theta when config.json gives none (transformers' default_theta of the config class). */
  defaultTheta: number;
  /** The sliding-window layout, as this model_type's transformers class computes it. */
  attention(cfg: ConfigReader, numLayers: number): Attention;
  /** q/k/v projections carry biases. */
  qkvBias(cfg: Json): boolean;
  /** o_proj carries a bias. */
  oBias(cfg: Json): boolean;
  /** llama.cpp's name for the architecture (GGUF general.architecture). */
  gguf: 'llama' | 'qwen2' | 'qwen2moe' | 'qwen3' | 'qwen3moe' | 'olmoe' | 'olmo2' | 'granite' | 'smollm3' | 'gemma2' | 'gemma3' | 'phi3';
  /** The layer features beyond Llama's (q/k norms, norm placement, rope-less layers, multipliers); absent: none. */
  features?(cfg: ConfigReader, numLayers: number): Partial<Features>;
  /** Per-layer-type rope (gemma3): full layers' rope and, where they differ, the sliding layers'; absent: readRope. */
  rope?(cfg: ConfigReader, ctx: RopeContext, attention: Attention, numLayers: number): Pick<ArchSpec, 'ropeTheta' | 'ropeScaling' | 'localRope'>;
  /** Fused checkpoint tensors of layer l the IR reads as separate ones (phi3). */
  fused?(l: number, spec: ArchSpec): FusedTensor[];
  /** transformers' causal-LM classes of this model_type: a config whose `architectures` names none of them is not this layout. */
  causalLm: readonly string[];
  moe: MoeFamily | null;
}

/** The ArchSpec fields a family sets beyond Llama's (spec.ts fills the defaults). */
export interface Features {
  qkNorm: QkNorm | null;
  normPlacement: ArchSpec['normPlacement'];
  ropeLayers: number[] | null;
  multipliers: Multipliers | null;
  hiddenAct: ArchSpec['hiddenAct'];
  rmsNormOffset: ArchSpec['rmsNormOffset'];
  attnSoftcap: number | null;
  finalSoftcap: number | null;
}

/** One checkpoint tensor made of several of the IR's (phi3 qkv_proj, gate_up_proj): split at ingestion into row ranges. */
export interface FusedTensor {
  name: string;
  /** The parts, in row order: each one's Hugging Face name as llmc uses it and its row count. */
  parts: { name: string; rows: number }[];
}

/** Names of one dense SwiGLU MLP's projections under `prefix`. */
export function mlpNames(prefix: string): MlpNames {
  return { gate: `${prefix}.gate_proj.weight`, up: `${prefix}.up_proj.weight`, down: `${prefix}.down_proj.weight` };
}

/** Llama-style attention biases: only with `attention_bias: true`, then on all four projections. */
const LLAMA_BIAS = { qkvBias: (c: Json) => c.attention_bias === true, oBias: (c: Json) => c.attention_bias === true };
/** Mistral and Mixtral: no biases (transformers builds their projections with bias=False). */
const NO_BIAS = { qkvBias: () => false, oBias: () => false };
/** Qwen2: q/k/v always carry biases, o_proj never. */
const QWEN_BIAS = { qkvBias: () => true, oBias: () => false };
/** Qwen2-MoE: q/k/v biases unless `qkv_bias: false`. */
const QWEN_MOE_BIAS = { qkvBias: (c: Json) => c.qkv_bias !== false, oBias: () => false };

/** Llama's bias keys on a model_type whose class ignores them: fine where they say "no bias" (q/k/v biases of Qwen2 come from the class, not these). */
const NO_BIAS_KEYS = { attention_bias: false, mlp_bias: false };

const FULL = 'full_attention';
const SLIDING = 'sliding_attention';

/** `layer_types` as given (checked: one of the two kinds per layer), or null when absent. */
function layerTypes(c: ConfigReader, numLayers: number): string[] | null {
  const v = c.raw.layer_types;
  if (v === undefined || v === null) return null;
  if (!Array.isArray(v) || v.length !== numLayers || !v.every((t) => t === FULL || t === SLIDING)) {
    throw new LlmcError(`"layer_types" must list "${FULL}" or "${SLIDING}" for each of the ${numLayers} layers (other kinds are not implemented), got ${JSON.stringify(v).slice(0, 120)}`, c.file);
  }
  return v as string[];
}

/** `sliding_window`: a positive window, or null when absent / null / 0. */
function windowOf(c: ConfigReader): number | null {
  const w = c.raw.sliding_window;
  if (w === undefined || w === null || w === 0) return null;
  return c.posInt('sliding_window');
}

/** Llama: every layer attends to the whole context. */
function llamaAttention(c: ConfigReader, numLayers: number): Attention {
  const types = layerTypes(c, numLayers);
  if (types?.includes(SLIDING)) throw new LlmcError(`"layer_types" has ${SLIDING} layers, which transformers' Llama does not implement`, c.file);
  return { slidingWindow: null, slidingLayers: null };
}

/** Mistral / Mixtral: `sliding_window` applies to every layer; transformers ignores layer_types there, so a list saying otherwise is refused. */
function mistralAttention(c: ConfigReader, numLayers: number): Attention {
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

/** The sliding layers of a layer_types list (explicit or the model's default), checked against the window. */
function slidingFrom(c: ConfigReader, types: string[], w: number | null): Attention {
  const sliding = types.flatMap((t, l) => (t === SLIDING ? [l] : []));
  if (sliding.length === 0) return { slidingWindow: null, slidingLayers: null };
  if (w === null) throw new LlmcError(`"layer_types" marks layers [${sliding}] ${SLIDING}, but use_sliding_window is not true or sliding_window is null`, c.file);
  return { slidingWindow: w, slidingLayers: sliding.length === types.length ? null : sliding };
}

/** Qwen2: a window only with use_sliding_window, on layers >= max_window_layers unless layer_types says otherwise. */
function qwen2Attention(c: ConfigReader, numLayers: number): Attention {
  const w = c.raw.use_sliding_window === true ? windowOf(c) : null;
  const maxWindow = c.raw.max_window_layers === undefined ? 28 : c.num('max_window_layers');
  const types = layerTypes(c, numLayers) ?? Array.from({ length: numLayers }, (_, l) => (w !== null && l >= maxWindow ? SLIDING : FULL));
  return slidingFrom(c, types, w);
}

/** Qwen2-MoE: by default the even layers below max_window_layers slide, with use_sliding_window. */
function qwen2MoeAttention(c: ConfigReader, numLayers: number): Attention {
  const w = c.raw.use_sliding_window === true ? windowOf(c) : null;
  const maxWindow = c.raw.max_window_layers === undefined ? 28 : c.num('max_window_layers');
  const types = layerTypes(c, numLayers) ?? Array.from({ length: numLayers }, (_, l) => ((l + 1) % 2 === 1 && l < maxWindow && w !== null ? SLIDING : FULL));
  return slidingFrom(c, types, w);
}

const MIXTRAL_MOE: MoeFamily = {
  parse: (c) => ({
    routing: 'softmax-topk-renorm',
    numExperts: c.posInt('num_local_experts'),
    topK: c.posInt('num_experts_per_tok'),
    expertIntermediateSize: c.posInt('intermediate_size'),
    sharedExpertIntermediateSize: null,
    denseLayers: [],
  }),
  names: (l, moe) => {
    const p = `model.layers.${l}.block_sparse_moe`;
    return {
      router: `${p}.gate.weight`,
      experts: Array.from({ length: moe.numExperts }, (_, e) => ({
        gate: `${p}.experts.${e}.w1.weight`,
        down: `${p}.experts.${e}.w2.weight`,
        up: `${p}.experts.${e}.w3.weight`,
      })),
      shared: null,
      sharedGate: null,
    };
  },
  expertWidthKey: 'intermediate_size',
};

const QWEN2_MOE: MoeFamily = {
  parse: (c, numLayers) => {
    const step = c.posInt('decoder_sparse_step', 1);
    const mlpOnly = Array.isArray(c.raw.mlp_only_layers) ? (c.raw.mlp_only_layers as number[]) : [];
    const numExperts = c.posInt('num_experts');
    const dense: number[] = [];
    for (let l = 0; l < numLayers; l++) {
      const sparse = !mlpOnly.includes(l) && numExperts > 0 && (l + 1) % step === 0;
      if (!sparse) dense.push(l);
    }
    const shared = c.num('shared_expert_intermediate_size', 0);
    const moe: MoeSpec = {
      routing: c.raw.norm_topk_prob === true ? 'softmax-topk-renorm' : 'softmax-topk',
      numExperts,
      topK: c.posInt('num_experts_per_tok'),
      expertIntermediateSize: c.posInt('moe_intermediate_size'),
      sharedExpertIntermediateSize: shared > 0 ? shared : null,
      denseLayers: dense,
    };
    if (moe.topK > moe.numExperts) throw new LlmcError(`num_experts_per_tok (${moe.topK}) exceeds num_experts (${numExperts})`, c.file);
    return moe;
  },
  names: (l, moe) => {
    const p = `model.layers.${l}.mlp`;
    return {
      router: `${p}.gate.weight`,
      experts: Array.from({ length: moe.numExperts }, (_, e) => mlpNames(`${p}.experts.${e}`)),
      shared: moe.sharedExpertIntermediateSize ? mlpNames(`${p}.shared_expert`) : null,
      sharedGate: moe.sharedExpertIntermediateSize ? `${p}.shared_expert_gate.weight` : null,
    };
  },
  expertWidthKey: 'moe_intermediate_size',
};

/** Qwen3-MoE and OLMoE: mlp.gate routes over mlp.experts.<e>, no shared expert; top-k renormalized only with norm_topk_prob. */
function plainMoe(expertsKey: readonly string[], widthKey: string, sparseSteps: boolean): MoeFamily {
  return {
    parse: (c, numLayers) => {
      const key = expertsKey.find((k) => c.raw[k] !== undefined && c.raw[k] !== null) ?? expertsKey[0];
      const numExperts = c.posInt(key);
      const step = sparseSteps ? c.posInt('decoder_sparse_step', 1) : 1;
      const mlpOnly = sparseSteps && Array.isArray(c.raw.mlp_only_layers) ? (c.raw.mlp_only_layers as number[]) : [];
      const dense: number[] = [];
      for (let l = 0; l < numLayers; l++) if (mlpOnly.includes(l) || (l + 1) % step !== 0) dense.push(l);
      return {
        routing: c.raw.norm_topk_prob === true ? 'softmax-topk-renorm' : 'softmax-topk',
        numExperts,
        topK: c.posInt('num_experts_per_tok'),
        expertIntermediateSize: c.posInt(widthKey),
        sharedExpertIntermediateSize: null,
        denseLayers: dense,
      };
    },
    names: (l, moe) => {
      const p = `model.layers.${l}.mlp`;
      return { router: `${p}.gate.weight`, experts: Array.from({ length: moe.numExperts }, (_, e) => mlpNames(`${p}.experts.${e}`)), shared: null, sharedGate: null };
    },
    expertWidthKey: widthKey,
  };
}

/** Qwen3-MoE: transformers 5 names the expert count num_local_experts (num_experts before). */
const QWEN3_MOE = plainMoe(['num_local_experts', 'num_experts'], 'moe_intermediate_size', true);
const OLMOE_MOE = plainMoe(['num_experts'], 'intermediate_size', false);

/** A window on every layer when use_sliding_window says so: refused, as transformers' Qwen3-MoE masks it differently per version. */
function noWindowUnlessAsked(c: ConfigReader, numLayers: number): Attention {
  if (c.raw.use_sliding_window === true && windowOf(c) !== null) throw new LlmcError(`use_sliding_window with sliding_window ${windowOf(c)} is not implemented for ${String(c.raw.model_type)}`, c.file);
  const types = layerTypes(c, numLayers);
  if (types?.includes(SLIDING)) throw new LlmcError(`"layer_types" has ${SLIDING} layers, which llmc's ${String(c.raw.model_type)} reader does not implement`, c.file);
  return { slidingWindow: null, slidingLayers: null };
}

/** SmolLM3: `no_rope_layers[l]` 1 = layer l rotates (default: every no_rope_layer_interval-th layer does not). */
function smolRopeLayers(c: ConfigReader, numLayers: number): number[] {
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

/** SmolLM3: layer_types, else sliding on the rope-less layers when use_sliding_window. */
function smolAttention(c: ConfigReader, numLayers: number): Attention {
  const w = windowOf(c);
  const rope = smolRopeLayers(c, numLayers);
  const types = layerTypes(c, numLayers) ?? Array.from({ length: numLayers }, (_, l) => (c.raw.use_sliding_window === true && w !== null && !rope.includes(l) ? SLIDING : FULL));
  return slidingFrom(c, types, w);
}

/** Granite's four scalars (each 1.0 by default in transformers' GraniteConfig, attention_multiplier included). */
function graniteMultipliers(c: ConfigReader): Multipliers {
  return {
    embedding: c.num('embedding_multiplier', 1),
    residual: c.num('residual_multiplier', 1),
    attention: c.num('attention_multiplier', 1),
    logitsDivide: c.num('logits_scaling', 1),
  };
}

/** Attention biases on all four projections with attention_bias (qwen3, granite, smollm3, olmo*). */
const ALL_BIAS = LLAMA_BIAS;

/** A positive number or null (transformers' "off"). */
function optionalPositive(c: ConfigReader, key: string): number | null {
  const v = c.raw[key];
  if (v === undefined || v === null) return null;
  if (typeof v !== 'number' || !Number.isFinite(v) || !(v > 0)) throw new LlmcError(`"${key}" must be a positive number or null, got ${JSON.stringify(v)}`, c.file);
  return v;
}

/** GELU with the tanh approximation: the activation names transformers maps to it. */
const GELU_TANH = ['gelu_pytorch_tanh', 'gelu_new', 'gelu_fast'];

/**
 * Gemma 2 / 3: `hidden_activation` (transformers ignores the older `hidden_act` there), sandwich
 * norms by (1 + w), embeddings times sqrt(hidden_size) in the activation dtype (float32 here),
 * query_pre_attn_scalar, soft-capping; gemma3 adds per-head q/k norms.
 */
function gemmaFeatures(qkNorm: boolean) {
  return (c: ConfigReader): Partial<Features> => {
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
      // only the eager path caps the scores. The references (what from_pretrained computes) are sdpa's
      // and match to 1e-6 without the cap (5e-5 off with it), so llmc follows them; the value is checked.
      attnSoftcap: null,
      finalSoftcap: optionalPositive(c, 'final_logit_softcapping'),
    };
  };
}

/** Gemma 2: sliding_window (default 4096) on the even layers unless layer_types says otherwise. */
function gemma2Attention(c: ConfigReader, numLayers: number): Attention {
  const w = c.raw.sliding_window === undefined ? 4096 : windowOf(c);
  const types = layerTypes(c, numLayers) ?? Array.from({ length: numLayers }, (_, l) => ((l + 1) % 2 ? SLIDING : FULL));
  return slidingFrom(c, types, w);
}

/** Gemma 3: every sliding_window_pattern-th layer is full (default 6), the others slide, unless layer_types says otherwise. */
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

const GEMMA_KEYS = ['sliding_window', 'attn_logit_softcapping', 'final_logit_softcapping', 'query_pre_attn_scalar', 'hidden_activation', 'use_bidirectional_attention'];
/** Gemma: transformers ignores `hidden_act` (hidden_activation decides), and builds no biases without attention_bias. */
const GEMMA_FIXED = { attention_bias: false, cache_implementation: 'hybrid' };

/** One entry per supported `model_type`: the keys of transformers 5's config class that change the math. */
export const ARCHITECTURES = {
  // 'LLaMAForCausalLM': the class name of transformers' first llama conversions (2023), same layout.
  llama: {
    ...LLAMA_BIAS,
    keys: ['attention_bias', 'mlp_bias'],
    fixed: {},
    defaultTheta: 10000,
    attention: llamaAttention,
    gguf: 'llama',
    causalLm: ['LlamaForCausalLM', 'LLaMAForCausalLM'],
    moe: null,
  },
  mistral: { ...NO_BIAS, keys: ['sliding_window'], fixed: NO_BIAS_KEYS, defaultTheta: 10000, attention: mistralAttention, gguf: 'llama', causalLm: ['MistralForCausalLM'], moe: null },
  qwen2: {
    ...QWEN_BIAS,
    keys: ['use_sliding_window', 'sliding_window', 'max_window_layers'],
    fixed: NO_BIAS_KEYS,
    defaultTheta: 10000,
    attention: qwen2Attention,
    gguf: 'qwen2',
    causalLm: ['Qwen2ForCausalLM'],
    moe: null,
  },
  mixtral: {
    ...NO_BIAS,
    keys: ['sliding_window', 'num_local_experts', 'num_experts_per_tok'],
    fixed: NO_BIAS_KEYS,
    defaultTheta: 1e6,
    attention: mistralAttention,
    gguf: 'llama',
    causalLm: ['MixtralForCausalLM'],
    moe: MIXTRAL_MOE,
  },
  qwen2_moe: {
    ...QWEN_MOE_BIAS,
    keys: [
      'use_sliding_window', 'sliding_window', 'max_window_layers', 'qkv_bias', 'num_experts', 'num_experts_per_tok', 'moe_intermediate_size',
      'shared_expert_intermediate_size', 'norm_topk_prob', 'decoder_sparse_step', 'mlp_only_layers',
    ],
    fixed: NO_BIAS_KEYS,
    defaultTheta: 10000,
    attention: qwen2MoeAttention,
    gguf: 'qwen2moe',
    causalLm: ['Qwen2MoeForCausalLM'],
    moe: QWEN2_MOE,
  },
  qwen3: {
    ...ALL_BIAS,
    keys: ['attention_bias', 'use_sliding_window', 'sliding_window', 'max_window_layers'],
    fixed: { mlp_bias: false },
    defaultTheta: 10000,
    attention: qwen2Attention,
    gguf: 'qwen3',
    causalLm: ['Qwen3ForCausalLM'],
    moe: null,
    features: () => ({ qkNorm: { scope: 'head', offset: 0 } }),
  },
  qwen3_moe: {
    ...ALL_BIAS,
    keys: ['attention_bias', 'use_sliding_window', 'sliding_window', 'max_window_layers', 'num_experts', 'num_local_experts', 'num_experts_per_tok', 'moe_intermediate_size', 'norm_topk_prob', 'decoder_sparse_step', 'mlp_only_layers'],
    fixed: { mlp_bias: false },
    defaultTheta: 10000,
    attention: noWindowUnlessAsked,
    gguf: 'qwen3moe',
    causalLm: ['Qwen3MoeForCausalLM'],
    moe: QWEN3_MOE,
    features: () => ({ qkNorm: { scope: 'head', offset: 0 } }),
  },
  olmoe: {
    ...ALL_BIAS,
    keys: ['attention_bias', 'num_experts', 'num_experts_per_tok', 'norm_topk_prob'],
    // clip_qkv clamps q/k/v; only its unset value is implemented.
    fixed: { mlp_bias: false, clip_qkv: null },
    defaultTheta: 10000,
    attention: llamaAttention,
    gguf: 'olmoe',
    causalLm: ['OlmoeForCausalLM'],
    moe: OLMOE_MOE,
    features: () => ({ qkNorm: { scope: 'all', offset: 0 } }),
  },
  olmo2: {
    ...ALL_BIAS,
    keys: ['attention_bias'],
    fixed: { mlp_bias: false },
    defaultTheta: 10000,
    attention: llamaAttention,
    gguf: 'olmo2',
    causalLm: ['Olmo2ForCausalLM'],
    moe: null,
    features: () => ({ qkNorm: { scope: 'all', offset: 0 }, normPlacement: 'post' }),
  },
  granite: {
    ...ALL_BIAS,
    keys: ['attention_bias', 'mlp_bias', 'embedding_multiplier', 'residual_multiplier', 'attention_multiplier', 'logits_scaling'],
    fixed: {},
    defaultTheta: 10000,
    attention: llamaAttention,
    gguf: 'granite',
    causalLm: ['GraniteForCausalLM'],
    moe: null,
    features: (c) => ({ multipliers: graniteMultipliers(c) }),
  },
  smollm3: {
    ...ALL_BIAS,
    keys: ['attention_bias', 'mlp_bias', 'use_sliding_window', 'sliding_window', 'no_rope_layers', 'no_rope_layer_interval'],
    fixed: {},
    defaultTheta: 2000000,
    attention: smolAttention,
    gguf: 'smollm3',
    causalLm: ['SmolLM3ForCausalLM'],
    moe: null,
    features: (c, n) => {
      const rope = smolRopeLayers(c, n);
      return { ropeLayers: rope.length === n ? null : rope };
    },
  },
  gemma2: {
    ...NO_BIAS,
    keys: [...GEMMA_KEYS, 'hidden_act'],
    fixed: GEMMA_FIXED,
    defaultTheta: 10000,
    attention: gemma2Attention,
    gguf: 'gemma2',
    causalLm: ['Gemma2ForCausalLM'],
    moe: null,
    features: gemmaFeatures(false),
  },
  gemma3_text: {
    ...NO_BIAS,
    keys: [...GEMMA_KEYS, 'hidden_act', 'rope_local_base_freq', 'sliding_window_pattern', '_sliding_window_pattern'],
    fixed: GEMMA_FIXED,
    defaultTheta: 1e6,
    attention: gemma3Attention,
    gguf: 'gemma3',
    causalLm: ['Gemma3ForCausalLM'],
    moe: null,
    features: gemmaFeatures(true),
    rope: gemma3Rope,
  },
  phi3: {
    ...NO_BIAS,
    keys: ['sliding_window', 'resid_pdrop', 'embd_pdrop'],
    fixed: NO_BIAS_KEYS,
    defaultTheta: 10000,
    attention: mistralAttention,
    gguf: 'phi3',
    causalLm: ['Phi3ForCausalLM'],
    moe: null,
    fused: phi3Fused,
  },
} as const satisfies Record<ModelType, ArchEntry>;

export type { ModelType };
export const SUPPORTED_MODEL_TYPES = Object.keys(ARCHITECTURES) as ModelType[];

export function isModelType(t: unknown): t is ModelType {
  return typeof t === 'string' && Object.hasOwn(ARCHITECTURES, t);
}

/** The registry entry of a normalized spec. */
export function archOf(spec: Pick<ArchSpec, 'modelType'>): ArchEntry {
  return ARCHITECTURES[spec.modelType];
}

/**
 * The model_type a GGUF of llama.cpp's architecture `gguf` describes (with routed experts or not):
 * the first registry entry written as that architecture (llama.cpp writes mistral as llama, so a
 * dense llama GGUF reads as llama); undefined for an architecture llmc has no family for.
 */
export function modelTypeOfGguf(gguf: string, experts: boolean): ModelType | undefined {
  const entries = SUPPORTED_MODEL_TYPES.filter((t) => ARCHITECTURES[t].gguf === gguf);
  return entries.find((t) => (ARCHITECTURES[t].moe !== null) === experts) ?? entries[0];
}

/** llama.cpp's architecture names of llmc's families (GGUF general.architecture). */
export const GGUF_ARCHITECTURES: readonly string[] = [...new Set(SUPPORTED_MODEL_TYPES.map((t) => ARCHITECTURES[t].gguf))];
