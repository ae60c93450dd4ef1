/**
 * Rotary settings from config.json, in both forms transformers has written: `rope_parameters`
 * (transformers >= 5: rope_type, rope_theta and the scaling keys in one object) and the older
 * top-level `rope_theta` + `rope_scaling` (`type` | `rope_type`). Both may be present; where they
 * disagree the config is refused, since which one wins differs between transformers versions.
 * Every default transformers' modeling_rope_utils.py applies is resolved here, once.
 */
import { LlmcError, summarize } from '../errors.js';
import type { RopeScaling, RopeType } from './types.js';

type Json = Record<string, unknown>;

export const ROPE_TYPES: readonly RopeType[] = ['default', 'linear', 'dynamic', 'yarn', 'longrope', 'llama3'];

/** The keys each rope type reads (transformers' _validate_<type>_rope_parameters), besides rope_type / rope_theta / partial_rotary_factor. */
const ROPE_KEYS: Record<RopeType, readonly string[]> = {
  default: [],
  linear: ['factor'],
  // original_max_position_embeddings: accepted and, as transformers does, not used (dynamic scales from max_position_embeddings).
  dynamic: ['factor', 'original_max_position_embeddings'],
  yarn: ['factor', 'original_max_position_embeddings', 'attention_factor', 'beta_fast', 'beta_slow', 'mscale', 'mscale_all_dim', 'truncate'],
  longrope: ['short_factor', 'long_factor', 'original_max_position_embeddings', 'attention_factor', 'factor'],
  llama3: ['factor', 'low_freq_factor', 'high_freq_factor', 'original_max_position_embeddings'],
};

const isObj = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const show = (v: unknown) => summarize(v);

/** JSON equality with key order ignored (8 and 8.0 parse to the same number). */
function same(a: unknown, b: unknown): boolean {
  if (isObj(a) && isObj(b)) {
    const ka = Object.keys(a).sort();
    const kb = Object.keys(b).sort();
    return ka.length === kb.length && ka.every((k, i) => k === kb[i] && same(a[k], b[k]));
  }
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => same(x, b[i]));
  return a === b;
}

/** One of the two rope objects, `type` folded into `rope_type`; null when absent. */
function ropeObject(cfg: Json, key: 'rope_parameters' | 'rope_scaling', file: string): Json | null {
  const raw = cfg[key];
  if (raw === undefined || raw === null) return null;
  if (!isObj(raw)) throw new LlmcError(`"${key}" must be an object, got ${show(raw)}`, file);
  if (Object.values(raw).some(isObj)) {
    throw new LlmcError(`"${key}" holds one rope setting per layer type (${Object.keys(raw).join(', ')}), which llmc does not implement`, file);
  }
  const out: Json = { ...raw };
  if ('type' in out) {
    if ('rope_type' in out && out.rope_type !== out.type) throw new LlmcError(`"${key}.type" (${show(out.type)}) and "${key}.rope_type" (${show(out.rope_type)}) disagree`, file);
    out.rope_type = out.type;
    delete out.type;
  }
  return out;
}

/** The one value several config keys give for the same setting; refused when they disagree. */
function agreed(file: string, candidates: [string, unknown][]): unknown {
  const given = candidates.filter(([, v]) => v !== undefined && v !== null);
  for (const [k, v] of given.slice(1)) {
    if (!same(v, given[0][1])) throw new LlmcError(`"${given[0][0]}" (${show(given[0][1])}) and "${k}" (${show(v)}) disagree; keep one of them`, file);
  }
  return given[0]?.[1];
}

export interface RopeContext {
  headDim: number;
  maxPositions: number;
  /** transformers' default_theta of the model_type (Mixtral: 1e6). */
  defaultTheta: number;
}

/** get_mscale of transformers' yarn. */
export const yarnMscale = (scale: number, mscale = 1): number => (scale <= 1 ? 1 : 0.1 * mscale * Math.log(scale) + 1);

/** yarn's attention factor is the one llama.cpp and TensorRT-LLM derive themselves (0.1·ln(factor)+1). */
export const yarnDefaultAttention = (rs: { factor: number; attentionFactor: number }): boolean =>
  Math.abs(rs.attentionFactor - yarnMscale(rs.factor)) <= 1e-9 * rs.attentionFactor;

/** yarn with transformers' / llama.cpp's defaults (betas 32 / 1, truncated correction range, attention factor 0.1·ln(factor)+1). */
export const yarnWithDefaults = (factor: number, originalMaxPositions: number): RopeScaling => ({
  type: 'yarn',
  factor,
  originalMaxPositions,
  betaFast: 32,
  betaSlow: 1,
  truncate: true,
  attentionFactor: yarnMscale(factor),
});

/** rope_theta and the resolved scaling of a config.json. */
export function readRope(cfg: Json, file: string, ctx: RopeContext): { ropeTheta: number; ropeScaling: RopeScaling | null } {
  const fresh = ropeObject(cfg, 'rope_parameters', file);
  const old = ropeObject(cfg, 'rope_scaling', file);
  const where = fresh ? 'rope_parameters' : 'rope_scaling';
  if (fresh && old) {
    for (const k of new Set([...Object.keys(fresh), ...Object.keys(old)])) {
      if (k === 'rope_theta') continue;
      const a = fresh[k] ?? (k === 'rope_type' ? 'default' : undefined);
      const b = old[k] ?? (k === 'rope_type' ? 'default' : undefined);
      if (!same(a, b)) throw new LlmcError(`"rope_parameters.${k}" (${show(a)}) and "rope_scaling.${k}" (${show(b)}) disagree; keep one of them`, file);
    }
  }
  const p: Json = { ...(old ?? {}), ...(fresh ?? {}) };

  const theta = agreed(file, [['rope_parameters.rope_theta', fresh?.rope_theta], ['rope_theta', cfg.rope_theta], ['rope_scaling.rope_theta', old?.rope_theta]]) ?? ctx.defaultTheta;
  if (typeof theta !== 'number' || !(theta > 0) || !Number.isFinite(theta)) throw new LlmcError(`"rope_theta" must be a positive number, got ${show(theta)}`, file);

  const partial = agreed(file, [[`${where}.partial_rotary_factor`, p.partial_rotary_factor], ['partial_rotary_factor', cfg.partial_rotary_factor]]);
  if (partial !== undefined && partial !== 1) {
    throw new LlmcError(`"partial_rotary_factor" ${show(partial)} rotates part of each head, which llmc does not implement (only 1)`, file);
  }
  // Phi3-style top-level original_max_position_embeddings takes priority in transformers' standardize_rope_params.
  const orig0 = agreed(file, [['original_max_position_embeddings', cfg.original_max_position_embeddings], [`${where}.original_max_position_embeddings`, p.original_max_position_embeddings]]);

  const type = p.rope_type ?? 'default';
  if (typeof type !== 'string' || !(ROPE_TYPES as readonly string[]).includes(type)) {
    throw new LlmcError(`unsupported rope type ${show(type)} ("${where}.rope_type"); llmc implements ${ROPE_TYPES.join(', ')}`, file);
  }
  const t = type as RopeType;
  for (const k of Object.keys(p)) {
    if (k === 'rope_type' || k === 'rope_theta' || k === 'partial_rotary_factor' || ROPE_KEYS[t].includes(k)) continue;
    throw new LlmcError(`"${where}.${k}" (${show(p[k])}) is not a parameter of rope type "${t}"; llmc does not know how it changes the rotary frequencies`, file);
  }

  const num = (k: string, v: unknown, positive = true): number => {
    if (typeof v !== 'number' || !Number.isFinite(v) || (positive && !(v > 0))) throw new LlmcError(`"${where}.${k}" must be a positive number, got ${show(v)}`, file);
    return v;
  };
  const required = (k: string): number => {
    if (!(k in p)) throw new LlmcError(`rope type "${t}" needs "${where}.${k}", which is missing`, file);
    return num(k, p[k]);
  };
  const orig = (): number => {
    const v = orig0 ?? ctx.maxPositions;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) throw new LlmcError(`"original_max_position_embeddings" must be a positive integer, got ${show(v)}`, file);
    return v;
  };
  const optional = (k: string): number | undefined => (p[k] === undefined || p[k] === null ? undefined : num(k, p[k]));

  switch (t) {
    case 'default':
      return { ropeTheta: theta, ropeScaling: null };
    case 'linear':
    case 'dynamic':
      return { ropeTheta: theta, ropeScaling: { type: t, factor: required('factor') } };
    case 'llama3':
      return {
        ropeTheta: theta,
        ropeScaling: { type: t, factor: required('factor'), lowFreqFactor: required('low_freq_factor'), highFreqFactor: required('high_freq_factor'), originalMaxPositions: orig() },
      };
    case 'yarn': {
      if (!('factor' in p)) throw new LlmcError(`rope type "yarn" needs "${where}.factor", which is missing`, file);
      const originalMaxPositions = orig();
      // factor null: the ratio of the context lengths, as transformers derives it.
      const factor = p.factor === null ? ctx.maxPositions / originalMaxPositions : num('factor', p.factor);
      const mscale = optional('mscale');
      const mscaleAllDim = p.mscale_all_dim === undefined || p.mscale_all_dim === null ? undefined : num('mscale_all_dim', p.mscale_all_dim, false);
      const given = optional('attention_factor');
      const attentionFactor = given ?? (mscale && mscaleAllDim ? yarnMscale(factor, mscale) / yarnMscale(factor, mscaleAllDim) : yarnMscale(factor));
      if (p.truncate !== undefined && p.truncate !== null && typeof p.truncate !== 'boolean') throw new LlmcError(`"${where}.truncate" must be true or false, got ${show(p.truncate)}`, file);
      // transformers: `beta_fast or 32`, `beta_slow or 1`; `truncate` absent: true, null: false.
      const betaFast = p.beta_fast === undefined || p.beta_fast === null || p.beta_fast === 0 ? 32 : num('beta_fast', p.beta_fast);
      const betaSlow = p.beta_slow === undefined || p.beta_slow === null || p.beta_slow === 0 ? 1 : num('beta_slow', p.beta_slow);
      return { ropeTheta: theta, ropeScaling: { type: t, factor, originalMaxPositions, betaFast, betaSlow, truncate: 'truncate' in p ? p.truncate === true : true, attentionFactor } };
    }
    case 'longrope': {
      const list = (k: string): number[] => {
        const v = p[k];
        if (!Array.isArray(v) || v.length !== ctx.headDim / 2 || !v.every((x) => typeof x === 'number' && Number.isFinite(x) && x > 0)) {
          throw new LlmcError(`rope type "longrope" needs "${where}.${k}": ${ctx.headDim / 2} positive numbers (head_dim / 2), got ${show(v)?.slice(0, 80)}`, file);
        }
        return v as number[];
      };
      const originalMaxPositions = orig();
      const factor = optional('factor') ?? ctx.maxPositions / originalMaxPositions;
      const attentionFactor = optional('attention_factor') ?? (factor <= 1 ? 1 : Math.sqrt(1 + Math.log(factor) / Math.log(originalMaxPositions)));
      return { ropeTheta: theta, ropeScaling: { type: t, shortFactor: list('short_factor'), longFactor: list('long_factor'), originalMaxPositions, attentionFactor } };
    }
  }
}

/** The rope settings as one line of `key value` pairs (inspect, errors). */
export function describeRope(theta: number, rs: RopeScaling | null): string {
  if (!rs) return `rope default, theta ${theta}`;
  const parts: string[] = [`rope ${rs.type}`, `theta ${theta}`];
  const r4 = (x: number) => String(Number(x.toPrecision(6)));
  switch (rs.type) {
    case 'linear':
    case 'dynamic':
      parts.push(`factor ${r4(rs.factor)}`);
      break;
    case 'llama3':
      parts.push(`factor ${r4(rs.factor)}`, `low_freq_factor ${r4(rs.lowFreqFactor)}`, `high_freq_factor ${r4(rs.highFreqFactor)}`, `original_max_positions ${rs.originalMaxPositions}`);
      break;
    case 'yarn':
      parts.push(
        `factor ${r4(rs.factor)}`,
        `original_max_positions ${rs.originalMaxPositions}`,
        `beta_fast ${r4(rs.betaFast)}`,
        `beta_slow ${r4(rs.betaSlow)}`,
        `truncate ${rs.truncate}`,
        `attention_factor ${r4(rs.attentionFactor)}`,
      );
      break;
    case 'longrope':
      parts.push(`original_max_positions ${rs.originalMaxPositions}`, `attention_factor ${r4(rs.attentionFactor)}`, `short/long factors ×${rs.shortFactor.length}`);
      break;
  }
  return parts.join(', ');
}
