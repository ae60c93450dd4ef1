/**
 * The normalized architecture spec: one shape for every supported Hugging Face `model_type`,
 * so passes, engines and backends never read config.json themselves.
 */
import { LlmcError, summarize } from '../errors.js';
import { ARCHITECTURES, isModelType, SUPPORTED_MODEL_TYPES, type ArchEntry, type ConfigReader } from './registry.js';
import { checkKnownKeys } from './keys.js';
import { readRope } from './rope-config.js';
import type { ArchSpec, MoeSpec } from './types.js';

export { SUPPORTED_MODEL_TYPES };
export type { ArchSpec, ModelType, MoeSpec, RopeScaling } from './types.js';

type Json = Record<string, unknown>;

function num(cfg: Json, key: string, file: string, fallback?: number): number {
  const v = cfg[key];
  if (v === undefined || v === null) {
    if (fallback !== undefined) return fallback;
    throw new LlmcError(`missing "${key}"`, file);
  }
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new LlmcError(`"${key}" must be a number, got ${summarize(v)}`, file);
  return v;
}

function posInt(cfg: Json, key: string, file: string, fallback?: number): number {
  const v = num(cfg, key, file, fallback);
  // Sizes past 2^31 are no real model, and would overflow index arithmetic long before memory runs out.
  if (!Number.isSafeInteger(v) || v <= 0 || v > 2 ** 31 - 1) throw new LlmcError(`"${key}" must be a positive integer below 2^31, got ${v}`, file);
  return v;
}

function tokenIds(v: unknown): number[] {
  if (typeof v === 'number') return [v];
  if (Array.isArray(v)) return v.filter((x): x is number => typeof x === 'number');
  return [];
}

/**
 * `architectures` names the class transformers builds: with model_type llama, a
 * `LlamaForSequenceClassification` has a score head instead of lm_head, and a remote-code
 * `FooForCausalLM` may compute something else on llama's tensor names. Absent or empty, model_type decides.
 */
function checkArchitectures(architectures: unknown, modelType: string, causalLm: readonly string[], file: string): void {
  if (architectures === undefined || architectures === null) return;
  const names = Array.isArray(architectures) ? architectures : [architectures];
  if (names.length === 0 || names.some((n) => causalLm.includes(n as string))) return;
  throw new LlmcError(
    `architectures ${summarize(architectures)} names no causal LM of model_type "${modelType}" (llmc compiles ${causalLm.join(' / ')}); ` +
      'a head or remote code of another kind is not supported',
    file,
  );
}

/** Normalize a parsed config.json (the architecture registry supplies what differs per model_type). `file` names the file in every error. */
export function normalizeConfig(cfg: Json, file: string): ArchSpec {
  const modelType = cfg.model_type;
  if (!isModelType(modelType)) {
    throw new LlmcError(
      `unknown model_type ${summarize(modelType ?? null)}; supported: ${SUPPORTED_MODEL_TYPES.join(', ')}`,
      file,
    );
  }
  const entry: ArchEntry = ARCHITECTURES[modelType];
  checkArchitectures(cfg.architectures, modelType, entry.causalLm, file);
  checkKnownKeys(cfg, modelType, entry.keys, entry.fixed, file);
  const reader: ConfigReader = { num: (k, f) => num(cfg, k, file, f), posInt: (k, f) => posInt(cfg, k, file, f), raw: cfg, file };
  const hiddenSize = posInt(cfg, 'hidden_size', file);
  const numHeads = posInt(cfg, 'num_attention_heads', file);
  const numKvHeads = posInt(cfg, 'num_key_value_heads', file, numHeads);
  if (numHeads % numKvHeads !== 0) {
    throw new LlmcError(`num_attention_heads (${numHeads}) is not a multiple of num_key_value_heads (${numKvHeads})`, file);
  }
  const headDim = posInt(cfg, 'head_dim', file, hiddenSize / numHeads);
  const numLayers = posInt(cfg, 'num_hidden_layers', file);
  const features = entry.features?.(reader, numLayers) ?? {};
  // Families that name their activation elsewhere (gemma's hidden_activation) say which in features.hiddenAct.
  if (!features.hiddenAct) {
    const act = String(cfg.hidden_act ?? 'silu');
    if (act !== 'silu') throw new LlmcError(`unsupported hidden_act ${summarize(act)} (supported: silu)`, file);
  }

  const moe: MoeSpec | null = entry.moe ? entry.moe.parse(reader, numLayers) : null;
  if (moe && moe.topK > moe.numExperts) {
    throw new LlmcError(`num_experts_per_tok (${moe.topK}) exceeds the number of experts (${moe.numExperts})`, file);
  }

  const maxPositions = posInt(cfg, 'max_position_embeddings', file, 2048);
  const attention = entry.attention(reader, numLayers);
  const { slidingWindow, slidingLayers } = attention;
  const ropeCtx = { headDim, maxPositions, defaultTheta: entry.defaultTheta };
  const { ropeTheta, ropeScaling, localRope } = entry.rope
    ? entry.rope(reader, ropeCtx, attention, numLayers)
    : { ...readRope(cfg, file, ropeCtx), localRope: null };
  // transformers keeps `dtype` when both are given.
  const dtype = typeof cfg.dtype === 'string' ? cfg.dtype : typeof cfg.torch_dtype === 'string' ? cfg.torch_dtype : null;
  return {
    modelType,
    hiddenSize,
    intermediateSize: posInt(cfg, 'intermediate_size', file),
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    vocabSize: posInt(cfg, 'vocab_size', file),
    maxPositions,
    rmsNormEps: num(cfg, 'rms_norm_eps', file, 1e-6),
    ropeTheta,
    ropeScaling,
    tieEmbeddings: cfg.tie_word_embeddings === true,
    qkvBias: entry.qkvBias(cfg),
    oBias: entry.oBias(cfg),
    mlpBias: cfg.mlp_bias === true,
    hiddenAct: features.hiddenAct ?? 'silu',
    slidingWindow,
    slidingLayers,
    bosTokenId: typeof cfg.bos_token_id === 'number' ? cfg.bos_token_id : null,
    eosTokenIds: tokenIds(cfg.eos_token_id),
    torchDtype: dtype,
    moe,
    qkNorm: features.qkNorm ?? null,
    normPlacement: features.normPlacement ?? 'pre',
    ropeLayers: features.ropeLayers ?? null,
    multipliers: features.multipliers ?? null,
    rmsNormOffset: features.rmsNormOffset ?? 0,
    attnSoftcap: features.attnSoftcap ?? null,
    finalSoftcap: features.finalSoftcap ?? null,
    localRope,
  };
}

/**
 * What a layer of this spec does beyond Llama's (empty for llama, mistral, qwen2, mixtral, qwen2_moe):
 * targets that lower only Llama's layer refuse a spec with any, naming them.
 */
export function beyondLlama(spec: ArchSpec): string[] {
  const out: string[] = [];
  if (spec.qkNorm) out.push(spec.qkNorm.scope === 'head' ? 'per-head q/k RMSNorm' : 'q/k RMSNorm over the whole projection');
  if (spec.normPlacement !== 'pre') out.push(spec.normPlacement === 'post' ? 'norms after the attention and MLP blocks' : 'sandwich norms');
  if (spec.ropeLayers) out.push('layers without rope');
  if (spec.multipliers) out.push('embedding / residual / attention / logit multipliers');
  if (spec.hiddenAct !== 'silu') out.push('GELU-tanh MLP');
  if (spec.rmsNormOffset) out.push('(1 + w) RMSNorm');
  if (spec.attnSoftcap !== null) out.push('attention soft-capping');
  if (spec.finalSoftcap !== null) out.push('final logit soft-capping');
  if (spec.localRope) out.push('a rotary base of its own on the sliding layers');
  return out;
}

/** The rotary base and scaling of layer `l` (gemma3's sliding layers may have their own). */
export function ropeOf(spec: ArchSpec, l: number): Pick<ArchSpec, 'ropeTheta' | 'ropeScaling'> {
  if (spec.localRope && windowOf(spec, l) !== null) return { ropeTheta: spec.localRope.theta, ropeScaling: spec.localRope.scaling };
  return spec;
}

/** True when layer `l` rotates q and k. */
export function hasRope(spec: Pick<ArchSpec, 'ropeLayers'>, l: number): boolean {
  return spec.ropeLayers == null || spec.ropeLayers.includes(l);
}

/** The attention window of layer `l` (null: the whole context). */
export function windowOf(spec: Pick<ArchSpec, 'slidingWindow' | 'slidingLayers'>, l: number): number | null {
  if (spec.slidingWindow === null) return null;
  return spec.slidingLayers == null || spec.slidingLayers.includes(l) ? spec.slidingWindow : null;
}

/** True when layer `l` routes through experts. */
export function isMoeLayer(spec: ArchSpec, l: number): boolean {
  return spec.moe !== null && !spec.moe.denseLayers.includes(l);
}
