/**
 * Record `outlier-scales/1` (written by the `outliers` pass, read by the qnn target, its runner and
 * `llmc report`): static per-tensor activation thresholds for every linear of the decoder layers,
 * input and output side, with the profile they come from and the decision taken per side
 * (SPEC-outliers §1.2–1.4):
 *   shadow  T = p99.9 of |x|; elements beyond the int8 range are added back exactly on the CPU
 *           (input side: r[:, C]·W_q[C, :]; output side: saturated elements recomputed)
 *   clip    T = p99.9; beyond the range saturates (the paper's pruned layers)
 *   widen   T = max|x| over the calibration set (nothing clips on it; coarser steps), at 8 or 16 bits
 * Channel indices are in the unit's current channel order (after a reorder permutation, its order).
 * Browser-safe: imports nothing but src/core.
 */
import type { Checker } from '../util/check.js';
import { defineRecord } from './types.js';
import { summarize } from '../errors.js';

export type OutlierDecision = 'shadow' | 'clip' | 'widen';
export const OUTLIER_DECISIONS: readonly OutlierDecision[] = ['shadow', 'clip', 'widen'];

/** The linear's place in a decoder layer ('hadamard': the online rotation before down_proj). */
export type LinearRole = 'q' | 'k' | 'v' | 'o' | 'gate' | 'up' | 'down' | 'hadamard';

/** Calibration statistics of one side (input or output, before the bias) of one linear. */
export interface SideStats {
  /** Elements observed: tokens × channels. */
  n: number;
  channels: number;
  absMax: number;
  /** |x| at sorted index ⌊0.999·n⌋ − 1 (the released code's convention), exact. */
  p999: number;
  /** Of the signed values. */
  mean: number;
  std: number;
  /** absMax / p999. */
  rho: number;
  /** Elements whose code round(x/s), s = p999/127, leaves [−128, 127] (the shadow's work). */
  outliers: number;
  /** The fewest channels covering ≥ `coverage` of the outliers, most frequent first (ties: lower index). */
  hot: number[];
  /** Share of the outliers the hot channels hold. */
  hotCoverage: number;
  /** The 256 channels with most outliers, [channel, count], most first. */
  channelCounts: [number, number][];
}

export interface SideDecision extends SideStats {
  decision: OutlierDecision;
  /** Activation bits of this tensor (16: the W8A16 path). */
  bits: 8 | 16;
  /** The threshold: p999 (shadow, clip) or absMax (widen). */
  T: number;
  /** T / 127 (or T / 32767) as float32: the QDQ scale. */
  scale: number;
  /** The graph value quantized (q/k/v share their input value, gate/up theirs). */
  value: string;
}

export interface LinearDecision {
  /** The weight's Hugging Face name. */
  weight: string;
  layer: number;
  role: LinearRole;
  inFeatures: number;
  outFeatures: number;
  /** s_w = max|W| / 127, float32. */
  weightScale: number;
  /** max over its sides of absMax / p999 (the largest outlier in units of the clipped scale, ×1/127). */
  importance: number;
  /** Its place by importance, 0 = most important (ties: earlier layer, then model order). */
  rank: number;
  input: SideDecision;
  output: SideDecision;
}

export interface OutlierScales {
  format: 'outlier-scales/1';
  calibration: { source: 'self-generated' | { text: string; sha256: string }; count: number; length: number; seed: number; heldOut: number; profile: string };
  /** How codes are rounded everywhere (SPEC §4: recorded, never Math.round). */
  rounding: 'half-even';
  percentile: 99.9;
  /** rank: shadow on the ⌈keep·n⌉ most important linears; threshold: on every side with ρ ≥ τ. */
  mode: 'rank' | 'threshold';
  keep: number;
  tau: number;
  /** The decision for sides without shadow: clip, widen, or auto (widen when ρ < τ, else clip: the released code). */
  policy: 'auto' | 'clip' | 'widen';
  coverage: number;
  /** flagged: the sides that would get shadow take 16-bit activations (widen) instead. */
  a16: 'none' | 'flagged' | 'all';
  /** hadamard: the residual stream and the down_proj inputs were rotated before profiling (QuaRot-style). */
  rotation: 'none' | 'hadamard';
  /** Linears with shadow on some side. */
  kept: number;
  linears: LinearDecision[];
  notes: string[];
}

function checkSide(c: Checker, v: unknown, p: string): void {
  const s = c.obj(v, p);
  if (!OUTLIER_DECISIONS.includes(s.decision as OutlierDecision)) c.fail(`${p}.decision`, `must be one of ${OUTLIER_DECISIONS.join(', ')}, got ${summarize(s.decision)}`);
  if (s.bits !== 8 && s.bits !== 16) c.fail(`${p}.bits`, `must be 8 or 16, got ${summarize(s.bits)}`);
  const K = c.int(s.channels, `${p}.channels`, 1);
  for (const k of ['absMax', 'p999', 'T', 'mean', 'std', 'rho'] as const) c.num(s[k], `${p}.${k}`);
  if (!(c.num(s.scale, `${p}.scale`) > 0)) c.fail(`${p}.scale`, 'must be positive');
  c.int(s.outliers, `${p}.outliers`);
  c.str(s.value, `${p}.value`);
  c.ints(s.hot, `${p}.hot`).forEach((k, i) => k >= K && c.fail(`${p}.hot[${i}]`, `channel ${k} does not exist (${K} channels)`));
}

export const OUTLIER_SCALES = defineRecord<OutlierScales>('outlier-scales/1', 'static activation scales with shadow / clip / widen decisions (outliers)', (v, c) => {
  const o = c.obj(v, 'outlier-scales');
  if (o.mode !== 'rank' && o.mode !== 'threshold') c.fail('mode', `must be rank or threshold, got ${summarize(o.mode)}`);
  if (o.rounding !== 'half-even') c.fail('rounding', `must be half-even, got ${summarize(o.rounding)}`);
  c.arr(o.linears, 'linears').forEach((x, i) => {
    const p = `linears[${i}]`;
    const L = c.obj(x, p);
    c.str(L.weight, `${p}.weight`);
    c.int(L.layer, `${p}.layer`);
    c.int(L.inFeatures, `${p}.inFeatures`, 1);
    c.int(L.outFeatures, `${p}.outFeatures`, 1);
    if (!(c.num(L.weightScale, `${p}.weightScale`) > 0)) c.fail(`${p}.weightScale`, 'must be positive');
    checkSide(c, L.input, `${p}.input`);
    checkSide(c, L.output, `${p}.output`);
  });
  return o as unknown as OutlierScales;
});

/** The decision of one linear by weight name. */
export function linearDecision(rec: OutlierScales, weight: string): LinearDecision | undefined {
  return rec.linears.find((l) => l.weight === weight);
}
