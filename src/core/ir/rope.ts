/**
 * Rotary position tables, shared by every lowering: the graph takes cos/sin [T, headDim/2] as
 * inputs, so rope_scaling (including length-dependent 'dynamic') is computed here once, in
 * float64, then rounded to float32. Frequencies follow transformers' rope init functions
 * (modeling_rope_utils.py): default, linear, dynamic (NTK), yarn, longrope, llama3; yarn's and
 * longrope's attention factor multiplies cos and sin, so every executor applies it with the tables.
 */
import { LlmcError } from '../errors.js';
import type { ArchSpec } from '../arch/spec.js';

export interface RopeFrequencies {
  /** inv_freq[i] for i < headDim/2. */
  invFreq: Float64Array;
  /** Multiplies cos and sin (yarn's attention factor; 1 otherwise). */
  attentionScaling: number;
}

/**
 * Frequencies for a forward pass whose largest position is `seqLen - 1`: 'dynamic' grows the base
 * once a sequence outgrows max_position_embeddings and 'longrope' switches to its long factors past
 * original_max_position_embeddings, as transformers' dynamic_rope_update does per forward call.
 * The one implementation of every rope type: each executor and target takes its tables from here.
 */
export function ropeFrequencies(spec: Pick<ArchSpec, 'headDim' | 'ropeTheta' | 'ropeScaling' | 'maxPositions'>, seqLen = 0): RopeFrequencies {
  const dim = spec.headDim;
  const half = dim / 2;
  let base = spec.ropeTheta;
  const rs = spec.ropeScaling;
  if (rs?.type === 'dynamic' && seqLen > spec.maxPositions) {
    base = base * ((rs.factor * seqLen) / spec.maxPositions - (rs.factor - 1)) ** (dim / (dim - 2));
  }
  const inv = new Float64Array(half);
  for (let i = 0; i < half; i++) inv[i] = 1 / base ** ((2 * i) / dim);
  if (!rs || rs.type === 'dynamic') return { invFreq: inv, attentionScaling: 1 };
  switch (rs.type) {
    case 'linear':
      for (let i = 0; i < half; i++) inv[i] /= rs.factor;
      return { invFreq: inv, attentionScaling: 1 };
    case 'llama3': {
      const lowWavelen = rs.originalMaxPositions / rs.lowFreqFactor;
      const highWavelen = rs.originalMaxPositions / rs.highFreqFactor;
      for (let i = 0; i < half; i++) {
        const wavelen = (2 * Math.PI) / inv[i];
        if (wavelen > lowWavelen) inv[i] = inv[i] / rs.factor;
        else if (wavelen >= highWavelen) {
          const smooth = (rs.originalMaxPositions / wavelen - rs.lowFreqFactor) / (rs.highFreqFactor - rs.lowFreqFactor);
          inv[i] = ((1 - smooth) * inv[i]) / rs.factor + smooth * inv[i];
        }
      }
      return { invFreq: inv, attentionScaling: 1 };
    }
    case 'yarn': {
      const correctionDim = (rot: number) => (dim * Math.log(rs.originalMaxPositions / (rot * 2 * Math.PI))) / (2 * Math.log(base));
      let low = correctionDim(rs.betaFast);
      let high = correctionDim(rs.betaSlow);
      if (rs.truncate) {
        low = Math.floor(low);
        high = Math.ceil(high);
      }
      low = Math.max(low, 0);
      high = Math.min(high, dim - 1);
      if (low === high) high += 0.001;
      for (let i = 0; i < half; i++) {
        const ramp = Math.min(Math.max((i - low) / (high - low), 0), 1);
        const extrapolation = 1 - ramp;
        inv[i] = (inv[i] / rs.factor) * (1 - extrapolation) + inv[i] * extrapolation;
      }
      return { invFreq: inv, attentionScaling: rs.attentionFactor };
    }
    case 'longrope': {
      const ext = seqLen > rs.originalMaxPositions ? rs.longFactor : rs.shortFactor;
      for (let i = 0; i < half; i++) inv[i] /= ext[i];
      return { invFreq: inv, attentionScaling: rs.attentionFactor };
    }
  }
}

/** The spec as the sliding layers rotate (gemma3's local base), for their tables; null without a local rope. */
export function localRopeSpec<S extends Pick<ArchSpec, 'localRope' | 'ropeTheta' | 'ropeScaling'>>(spec: S): S | null {
  return spec.localRope ? { ...spec, ropeTheta: spec.localRope.theta, ropeScaling: spec.localRope.scaling } : null;
}

/**
 * Sequences up to this length share one set of frequencies (the ones ropeFrequencies gives for
 * seqLen 0); past it 'dynamic' and 'longrope' change them. Infinity for every other type.
 */
export function ropeSharedUntil(spec: Pick<ArchSpec, 'ropeScaling' | 'maxPositions'>): number {
  const rs = spec.ropeScaling;
  if (rs?.type === 'dynamic') return spec.maxPositions;
  if (rs?.type === 'longrope') return rs.originalMaxPositions;
  return Infinity;
}

/**
 * cos/sin for every position below max_position_embeddings, for graphs that gather one row per
 * position id whatever the sequence length (the cuda decoder, QNN). Refused, naming the rope type,
 * when the frequencies depend on the sequence length inside that range (longrope with
 * original_max_position_embeddings below max_position_embeddings).
 */
export function positionTables(spec: ArchSpec, what: string): { cos: Float32Array; sin: Float32Array } {
  assertPositionTables(spec, what);
  return ropeTables(spec, 0, spec.maxPositions, 0);
}

/** positionTables' refusal alone, for graphs that build their tables later. */
export function assertPositionTables(spec: Pick<ArchSpec, 'ropeScaling' | 'maxPositions'>, what: string): void {
  if (ropeSharedUntil(spec) < spec.maxPositions) {
    throw new LlmcError(
      `rope type "${spec.ropeScaling!.type}" changes its frequencies with the sequence length below max_position_embeddings (${spec.maxPositions}); ${what} gathers one fixed table by position and cannot express it`,
    );
  }
}

/**
 * cos/sin for positions start .. start+count-1, row-major [count, headDim/2], float32; the
 * frequencies are those of a sequence of length `seqLen` (default: start + count).
 */
export function ropeTables(spec: ArchSpec, start: number, count: number, seqLen = start + count): { cos: Float32Array; sin: Float32Array } {
  const { invFreq, attentionScaling } = ropeFrequencies(spec, seqLen);
  const half = invFreq.length;
  const cos = new Float32Array(count * half);
  const sin = new Float32Array(count * half);
  for (let t = 0; t < count; t++) {
    for (let i = 0; i < half; i++) {
      const a = (start + t) * invFreq[i];
      cos[t * half + i] = Math.cos(a) * attentionScaling;
      sin[t * half + i] = Math.sin(a) * attentionScaling;
    }
  }
  return { cos, sin };
}

/**
 * cos/sin for arbitrary positions (one row per token: tree tokens share positions), each row as a
 * one-token call at that position computes it (`ropeTables(spec, p, 1)`), so a token's rotation does
 * not depend on the call it is in.
 */
export function ropeRows(spec: ArchSpec, positions: ArrayLike<number>): { cos: Float32Array; sin: Float32Array } {
  const half = spec.headDim / 2;
  const cos = new Float32Array(positions.length * half);
  const sin = new Float32Array(positions.length * half);
  const byLength = new Map<number, RopeFrequencies>();
  for (let t = 0; t < positions.length; t++) {
    const p = positions[t];
    let f = byLength.get(p + 1);
    if (!f) byLength.set(p + 1, (f = ropeFrequencies(spec, p + 1)));
    for (let i = 0; i < half; i++) {
      const a = p * f.invFreq[i];
      cos[t * half + i] = Math.cos(a) * f.attentionScaling;
      sin[t * half + i] = Math.sin(a) * f.attentionScaling;
    }
  }
  return { cos, sin };
}
