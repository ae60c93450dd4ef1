/**
 * Rotary position tables, shared by every lowering: the graph takes cos/sin [T, headDim/2] as
 * inputs, so rope_scaling (including length-dependent 'dynamic') is computed here once, in
 * float64, then rounded to float32. Frequencies follow Hugging Face's rope init functions
 * (modeling_rope_utils.py): default, linear, dynamic (NTK), yarn, llama3.
 */
import type { ArchSpec } from '../arch/spec.js';

export interface RopeFrequencies {
  /** inv_freq[i] for i < headDim/2. */
  invFreq: Float64Array;
  /** Multiplies cos and sin (yarn's attention factor; 1 otherwise). */
  attentionScaling: number;
}

/**
 * Frequencies for a forward pass whose largest position is `seqLen - 1` ('dynamic' depends on it,
 * as HF recomputes inv_freq when the sequence outgrows max_position_embeddings).
 */
export function ropeFrequencies(spec: ArchSpec, seqLen = 0): RopeFrequencies {
  const dim = spec.headDim;
  const half = dim / 2;
  let base = spec.ropeTheta;
  const rs = spec.ropeScaling;
  if (rs?.type === 'dynamic') {
    const orig = rs.originalMaxPositions ?? spec.maxPositions;
    if (seqLen > orig) base = base * ((rs.factor * seqLen) / orig - (rs.factor - 1)) ** (dim / (dim - 2));
  }
  const inv = new Float64Array(half);
  for (let i = 0; i < half; i++) inv[i] = 1 / base ** ((2 * i) / dim);
  let attentionScaling = 1;
  if (rs?.type === 'linear') {
    for (let i = 0; i < half; i++) inv[i] /= rs.factor;
  } else if (rs?.type === 'llama3') {
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
  } else if (rs?.type === 'yarn') {
    const orig = rs.originalMaxPositions ?? spec.maxPositions;
    const betaFast = rs.betaFast ?? 32;
    const betaSlow = rs.betaSlow ?? 1;
    const correctionDim = (rot: number) => (dim * Math.log(orig / (rot * 2 * Math.PI))) / (2 * Math.log(base));
    const low = Math.max(Math.floor(correctionDim(betaFast)), 0);
    let high = Math.min(Math.ceil(correctionDim(betaSlow)), dim - 1);
    if (low === high) high += 0.001;
    for (let i = 0; i < half; i++) {
      const ramp = Math.min(Math.max((i - low) / (high - low), 0), 1);
      const extrapolation = 1 - ramp;
      inv[i] = (inv[i] / rs.factor) * (1 - extrapolation) + inv[i] * extrapolation;
    }
    attentionScaling = rs.factor <= 1 ? 1 : 0.1 * Math.log(rs.factor) + 1;
  }
  return { invFreq: inv, attentionScaling };
}

/** cos/sin for positions start .. start+count-1, row-major [count, headDim/2], float32. */
export function ropeTables(spec: ArchSpec, start: number, count: number): { cos: Float32Array; sin: Float32Array } {
  const { invFreq, attentionScaling } = ropeFrequencies(spec, start + count);
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
