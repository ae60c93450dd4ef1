/**
 * What one architecture family (a Hugging Face `model_type`) tells llmc, and the helpers the family
 * folders (./families/<model_type>/) share. The registry (./registry.ts) lists the families; nothing
 * here imports one, so a family can import these without a cycle.
 */
import { LlmcError } from '../errors.js';
import type { ArchSpec, MoeSpec, Multipliers, QkNorm } from './types.js';
import type { RopeContext } from './rope-config.js';

export type Json = Record<string, unknown>;

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

/**
 * A GGUF metadata value as the family writes it (backends/gguf/writer.ts's GgufValue kinds by name,
 * so the family needs nothing from the backend).
 */
export type GgufMetaValue =
  | { kind: 'UINT32' | 'INT32' | 'FLOAT32'; value: number }
  | { kind: 'BOOL'; value: boolean }
  | { kind: 'STRING'; value: string }
  | { kind: 'ARRAY'; itemKind: 'UINT32' | 'INT32' | 'FLOAT32' | 'BOOL' | 'STRING'; values: readonly (number | boolean | string)[] };

/**
 * How llama.cpp's converter (convert_hf_to_gguf.py) writes this family: its `ModelBase.register`
 * class's `model_arch`, what its `set_gguf_parameters` adds to the keys every text model gets, and
 * what its `modify_tensors` does to tensors. backends/gguf reads this and nothing else per family.
 */
export interface GgufFamily {
  /** llama.cpp's name for the architecture: general.architecture and the prefix of its own keys. */
  arch: string;
  /**
   * The family's own `<arch>.*` keys (key: the name after `<arch>.`), written after the common
   * ones (sizes, heads, key/value length, rope base, norm epsilon) and before rope scaling; notes
   * say what llama.cpp's arch computes differently from transformers.
   */
  metadata(spec: ArchSpec): { kvs: { key: string; value: GgufMetaValue }[]; notes: string[] };
  /**
   * LlamaModel.modify_tensors: q and k rows (weights and biases) re-interleaved for llama.cpp's
   * non-NeoX rope (LlamaModel.permute). False: the arch uses NeoX rope on Hugging Face's layout.
   */
  permuteQK: boolean;
  /** llama3 rope scaling carried as rope_freqs.weight (LlamaModel.generate_extra_tensors); an arch without it refuses llama3 rope. */
  ropeFreqs: boolean;
  /**
   * longrope carried as rope_factors_long.weight / rope_factors_short.weight (Phi3MiniModel.generate_extra_tensors),
   * with rope.scaling.original_context_length and rope.scaling.attn_factor; absent: the arch refuses longrope.
   */
  longropeFactors?: boolean;
  /**
   * The family's own tensors of layer l beyond the Llama layout's (q/k norms, extra norms ...):
   * llama.cpp's name after `blk.<l>.` and the Hugging Face tensor it comes from (gguf-py's
   * TensorNameMap), written after the layer's MLP tensors.
   */
  layerTensors(spec: ArchSpec, l: number): { name: string; hf: string }[];
  /** A model of this family llama.cpp's arch cannot load: one line saying why, or null. */
  refuse(spec: ArchSpec): string | null;
  /** How llama.cpp's arch routes experts (read back from a GGUF without a manifest); null for a dense family. */
  routing: MoeSpec['routing'] | null;
  /** Gemma*Model.modify_tensors: every norm weight is written as 1 + w (llama.cpp's gemma multiplies by the weight as stored). */
  normPlusOne?: boolean;
  /** Phi3MiniModel: qkv_proj and gate_up_proj stay fused (attn_qkv, ffn_up of gate then up rows). */
  fusedProjections?: boolean;
  /**
   * Control tokens llama.cpp's arch looks up by text (phi3: <|endoftext|>, <|end|>), given the last ids
   * of a placeholder vocabulary (a checkpoint without tokenizer.json) so llama.cpp loads it. Absent: none.
   */
  placeholderTail?: readonly string[];
  /** llmc describes this arch's GGUFs without a manifest (ggufArchSpec); false where it cannot read a feature back (gemma's norms, phi3's fused tensors). Absent: true. */
  readBack?: boolean;
  /**
   * llama.cpp's loader types an 80-layer GQA model of this arch LLM_TYPE_70B (llama_model::load_hparams),
   * which changes llama-quantize's per-tensor choices.
   */
  type70B: boolean;
}

/**
 * How TensorRT-LLM's convert_checkpoint writes this family (tensorrt_llm/models MODEL_MAP):
 * `architecture` names the class, `config` its class-specific config.json fields beyond
 * PretrainedConfig's.
 */
export interface TrtllmFamily {
  architecture: string;
  config(spec: ArchSpec): Record<string, unknown>;
  /**
   * The layer features beyond Llama's the class computes (backends/tensorrt-llm refuses any other):
   * 'qk-norm' (Attention qk_layernorm, one weight per head), 'gemma' (GemmaDecoderLayer's sandwich
   * norms, GELU-tanh, (1 + w) norms, embeddings × sqrt(hidden), query_pre_attn_scalar, soft-capping,
   * gemma3's local rope base), 'multipliers' (LLaMAConfig's Granite multipliers), 'longrope' (Phi3's long_rope).
   */
  layer?: readonly ('qk-norm' | 'gemma' | 'multipliers' | 'longrope')[];
  /** Phi3's MLP (layers/mlp.py MLP with swiglu): one mlp.fc of [up; gate] rows instead of GatedMLP's fc / gate. */
  fusedGateUp?: boolean;
  /** Gemma's converter writes every norm weight as 1 + w (TensorRT-LLM's RmsNorm multiplies by the weight as stored). */
  normPlusOne?: boolean;
  /** What this class cannot express of this model (one line), or null. */
  refuse?(spec: ArchSpec): string | null;
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
  /** transformers' causal-LM classes of this model_type: a config whose `architectures` names none of them is not this layout. */
  causalLm: readonly string[];
  moe: MoeFamily | null;
  /** The gguf target's knowledge of this family (llama.cpp). */
  gguf: GgufFamily;
  /** The tensorrt-llm target's class for this family; null: the target refuses it. */
  tensorrtLlm: TrtllmFamily | null;
  /**
   * transformers.js has this model_type (its models.js causal-LM mapping), so it loads the cuda
   * target's directory; false: the cuda target still writes it (onnxruntime and TensorRT read it)
   * and says at compile that transformers.js does not load it. Absent: true.
   */
  transformersJs?: boolean;
  /**
   * onnxruntime-genai's model type for this family (genai_config.json model.type: src/models/model_type.h,
   * ModelType::IsLLM), or null where it has none: the cuda target then writes no genai_config.json.
   */
  ortGenai: string | null;
  /** The layer features beyond Llama's (q/k norms, norm placement, rope-less layers, multipliers); absent: none. */
  features?(cfg: ConfigReader, numLayers: number): Partial<Features>;
  /** Per-layer-type rope (gemma3): the full layers' rope and, where it differs, the sliding layers' base; absent: one rope (readRope). */
  rope?(cfg: ConfigReader, ctx: RopeContext, attention: Attention, numLayers: number): Pick<ArchSpec, 'ropeTheta' | 'ropeScaling' | 'localRope'>;
  /** Fused checkpoint tensors of layer l that the IR reads as separate ones (phi3): split at ingestion into row ranges. */
  fused?(l: number, spec: ArchSpec): FusedTensor[];
}

/** One checkpoint tensor made of several of the IR's (phi3 qkv_proj, gate_up_proj). */
export interface FusedTensor {
  name: string;
  /** The parts in row order: the Hugging Face name llmc reads each under, and its row count. */
  parts: { name: string; rows: number }[];
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

/** Names of one dense SwiGLU MLP's projections under `prefix`. */
export function mlpNames(prefix: string): MlpNames {
  return { gate: `${prefix}.gate_proj.weight`, up: `${prefix}.up_proj.weight`, down: `${prefix}.down_proj.weight` };
}

/** Llama-style attention biases: only with `attention_bias: true`, then on all four projections. */
export const LLAMA_BIAS = { qkvBias: (c: Json) => c.attention_bias === true, oBias: (c: Json) => c.attention_bias === true };
/** No biases (transformers builds the projections with bias=False). */
export const NO_BIAS = { qkvBias: () => false, oBias: () => false };

/** Llama's bias keys on a model_type whose class ignores them: fine where they say "no bias" (q/k/v biases of Qwen2 come from the class, not these). */
export const NO_BIAS_KEYS = { attention_bias: false, mlp_bias: false };

export const FULL = 'full_attention';
export const SLIDING = 'sliding_attention';

/** `layer_types` as given (checked: one of the two kinds per layer), or null when absent. */
export function layerTypes(c: ConfigReader, numLayers: number): string[] | null {
  const v = c.raw.layer_types;
  if (v === undefined || v === null) return null;
  if (!Array.isArray(v) || v.length !== numLayers || !v.every((t) => t === FULL || t === SLIDING)) {
    throw new LlmcError(`"layer_types" must list "${FULL}" or "${SLIDING}" for each of the ${numLayers} layers (other kinds are not implemented), got ${JSON.stringify(v).slice(0, 120)}`, c.file);
  }
  return v as string[];
}

/** `sliding_window`: a positive window, or null when absent / null / 0. */
export function windowOf(c: ConfigReader): number | null {
  const w = c.raw.sliding_window;
  if (w === undefined || w === null || w === 0) return null;
  return c.posInt('sliding_window');
}

/** The sliding layers of a layer_types list (explicit or the model's default), checked against the window. */
export function slidingFrom(c: ConfigReader, types: string[], w: number | null): Attention {
  const sliding = types.flatMap((t, l) => (t === SLIDING ? [l] : []));
  if (sliding.length === 0) return { slidingWindow: null, slidingLayers: null };
  if (w === null) throw new LlmcError(`"layer_types" marks layers [${sliding}] ${SLIDING}, but use_sliding_window is not true or sliding_window is null`, c.file);
  return { slidingWindow: w, slidingLayers: sliding.length === types.length ? null : sliding };
}

/** GGUF metadata constructors (the kinds of gguf-py's GGUFValueType). */
export const ggufU32 = (value: number): GgufMetaValue => ({ kind: 'UINT32', value });
export const ggufF32 = (value: number): GgufMetaValue => ({ kind: 'FLOAT32', value });

/** TextModel.set_gguf_parameters' expert_count / expert_used_count, for a family with routed experts. */
export function ggufExpertCounts(spec: ArchSpec): { key: string; value: GgufMetaValue }[] {
  return spec.moe ? [{ key: 'expert_count', value: ggufU32(spec.moe.numExperts) }, { key: 'expert_used_count', value: ggufU32(spec.moe.topK) }] : [];
}

/**
 * Qwen3-MoE and OLMoE: mlp.gate routes over mlp.experts.<e>, no shared expert; the top-k weights
 * renormalized only with norm_topk_prob. `expertsKey`: the config keys of the expert count, first
 * present wins; `sparseSteps`: decoder_sparse_step / mlp_only_layers make some layers dense.
 */
export function plainMoe(expertsKey: readonly string[], widthKey: string, sparseSteps: boolean): MoeFamily {
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

/** Every layer attends to the whole context; a layer_types list saying otherwise is refused. */
export function fullAttention(c: ConfigReader, numLayers: number): Attention {
  const types = layerTypes(c, numLayers);
  if (types?.includes(SLIDING)) throw new LlmcError(`"layer_types" has ${SLIDING} layers, which llmc's ${String(c.raw.model_type)} reader does not implement`, c.file);
  return { slidingWindow: null, slidingLayers: null };
}

/** A GGUF family on NeoX rope (nothing permuted, no llama3 factors) that writes only the common keys and expert counts. */
export function neoxGguf(arch: string, refuse: GgufFamily['refuse'], routing: MoeSpec['routing'] | null, extra: (spec: ArchSpec) => { key: string; value: GgufMetaValue }[] = () => []): GgufFamily {
  // q/k norms and norms on block outputs come from the spec (backends/gguf/tensors.ts), not layerTensors.
  return { arch, metadata: (spec) => ({ kvs: [...ggufExpertCounts(spec), ...extra(spec)], notes: [] }), permuteQK: false, ropeFreqs: false, layerTensors: () => [], refuse, routing, type70B: false };
}

/** An arch whose llama.cpp loader sizes attn_q / attn_output / attn_q_norm by n_embd: heads × head_dim must be hidden_size. */
export function embdWideAttention(spec: ArchSpec, arch: string): string | null {
  const q = spec.numHeads * spec.headDim;
  return q !== spec.hiddenSize ? `num_attention_heads × head_dim is ${q}, not hidden_size ${spec.hiddenSize}, but llama.cpp's ${arch} sizes attn_q and attn_q_norm by n_embd; the gguf target refuses it` : null;
}

/** What llama.cpp's MoE families here cannot load: dense layers among the expert ones. */
export function denseLayersRefusal(spec: ArchSpec, arch: string): string | null {
  const dense = spec.moe?.denseLayers ?? [];
  return dense.length > 0 ? `layers ${dense.join(', ')} are dense (mlp_only_layers / decoder_sparse_step), which llama.cpp's ${arch} cannot load` : null;
}
