/**
 * From measurements to decisions (SPEC-outliers §1.2–1.4):
 *  - per side: max|x|, p99.9 of |x| (ascending index ⌊0.999·n⌋ − 1, exact), mean/std, ρ = max/p99.9,
 *    outlier counts per channel at s = p99.9/127 (round(x/s) ∉ [−128, 127], the runtime's own test);
 *  - hot channels: the fewest channels covering ≥ coverage of the outliers;
 *  - importance of a linear: max over its sides of ρ (the largest outlier over the clipped scale);
 *  - rank mode keeps shadow on the ⌈keep·n⌉ most important linears (ties: earlier layer, then model
 *    order); threshold mode on every side with ρ ≥ τ; the other sides clip, widen, or (auto) widen
 *    when ρ < τ and clip otherwise. A tensor read by several linears (q/k/v, gate/up) has one scale:
 *    if any of its readers keeps shadow, they all do.
 */
import { activationScale, clampCode, roundHalfEven } from '../../src/core/quant/w8a8.js';
import type { LinearDecision, LinearRole, OutlierDecision, SideDecision, SideStats } from '../../src/core/records/outliers.js';
import type { OutliersOptions } from './options.js';
import { topCount, type RawSide } from './measure.js';

/** Per-channel outlier counts at scale s from the kept top elements (the others are ≤ p99.9 < 127.5·s). */
export function outlierCounts(top: ArrayLike<number>, channels: ArrayLike<number>, C: number, s: number): Float64Array {
  const counts = new Float64Array(C);
  for (let i = 0; i < top.length; i++) {
    const u = roundHalfEven(Math.fround(top[i] / s));
    if (clampCode(u, 8) !== u) counts[channels[i]]++;
  }
  return counts;
}

/** The fewest channels whose counts cover ≥ coverage of the total, most frequent first (ties: lower index). */
export function selectHot(counts: ArrayLike<number>, coverage: number): { hot: number[]; covered: number } {
  let total = 0;
  for (let i = 0; i < counts.length; i++) total += counts[i];
  if (total === 0) return { hot: [], covered: 1 };
  const order = Array.from({ length: counts.length }, (_, k) => k)
    .filter((k) => counts[k] > 0)
    .sort((a, b) => counts[b] - counts[a] || a - b);
  const hot: number[] = [];
  let acc = 0;
  for (const k of order) {
    if (acc >= coverage * total) break;
    hot.push(k);
    acc += counts[k];
  }
  return { hot, covered: acc / total };
}

/** The statistics of one side, and its per-channel counts (not kept whole in the record). */
export function sideStats(raw: RawSide, coverage: number): { stats: SideStats; counts: Float64Array } {
  const C = raw.channels;
  const n = raw.tokens * C;
  const k = topCount(n);
  const p999 = Math.abs(raw.top[Math.min(k, raw.top.length) - 1] ?? 0);
  let absMax = 0;
  let sum = 0;
  let sumSq = 0;
  for (let c = 0; c < C; c++) {
    absMax = Math.max(absMax, raw.absMax[c]);
    sum += raw.sum[c];
    sumSq += raw.sumSq[c];
  }
  const mean = sum / n;
  const std = Math.sqrt(Math.max(0, sumSq / n - mean * mean));
  const counts = outlierCounts(raw.top, raw.topChannels, C, activationScale(p999, 8));
  const { hot, covered } = selectHot(counts, coverage);
  const outliers = counts.reduce((a, x) => a + x, 0);
  const channelCounts = [...counts.keys()]
    .filter((c) => counts[c] > 0)
    .sort((a, b) => counts[b] - counts[a] || a - b)
    .slice(0, 256)
    .map((c) => [c, counts[c]] as [number, number]);
  return {
    stats: { n, channels: C, absMax, p999, mean, std, rho: p999 > 0 ? absMax / p999 : 1, outliers, hot, hotCoverage: covered, channelCounts },
    counts,
  };
}

/** One linear as measured: its two sides' statistics and where it sits. */
export interface MeasuredLinear extends Pick<LinearDecision, 'weight' | 'layer' | 'role' | 'inFeatures' | 'outFeatures' | 'weightScale'> {
  /** Model order (ties in importance). */
  order: number;
  input: SideStats;
  output: SideStats;
  /** Graph values of its input and output. */
  inputValue: string;
  outputValue: string;
}

type DecideOptions = Pick<OutliersOptions, 'mode' | 'keep' | 'tau' | 'policy' | 'a16'>;

/** T and decision of a side without shadow under the policy. */
function pruned(s: SideStats, o: DecideOptions): { decision: OutlierDecision; T: number } {
  const clip = s.outliers > 0 && (o.policy === 'clip' || (o.policy === 'auto' && s.rho >= o.tau));
  return clip ? { decision: 'clip', T: s.p999 } : { decision: 'widen', T: s.absMax };
}

const sideOf = (s: SideStats, value: string, decision: OutlierDecision, T: number, bits: 8 | 16): SideDecision => ({
  ...s,
  decision,
  bits,
  T,
  scale: activationScale(T, bits),
  value,
});

/** Decisions for every linear (returned in model order, with their rank). */
export function decide(linears: MeasuredLinear[], o: DecideOptions): LinearDecision[] {
  const importance = (l: MeasuredLinear) => Math.max(l.input.rho, l.output.rho);
  const ranked = [...linears].sort((a, b) => importance(b) - importance(a) || a.layer - b.layer || a.order - b.order);
  const rank = new Map(ranked.map((l, i) => [l.weight, i]));
  const keepN = Math.ceil(o.keep * linears.length - 1e-9);
  // Which sides keep their outliers (shadow, or 16 bits when a16 = flagged).
  const flagged = (l: MeasuredLinear, side: 'input' | 'output'): boolean => {
    const s = l[side];
    if (s.outliers === 0) return false;
    return o.mode === 'rank' ? rank.get(l.weight)! < keepN : s.rho >= o.tau;
  };
  // One scale per tensor: a shared input is flagged when any of its readers is.
  const flaggedInputs = new Set(linears.filter((l) => flagged(l, 'input')).map((l) => l.inputValue));
  const side = (l: MeasuredLinear, which: 'input' | 'output'): SideDecision => {
    const s = l[which];
    const value = which === 'input' ? l.inputValue : l.outputValue;
    if (o.a16 === 'all') return sideOf(s, value, 'widen', s.absMax, 16);
    const isFlagged = which === 'input' ? flaggedInputs.has(value) && s.outliers > 0 : flagged(l, which);
    if (isFlagged) return o.a16 === 'flagged' ? sideOf(s, value, 'widen', s.absMax, 16) : sideOf(s, value, 'shadow', s.p999, 8);
    const p = pruned(s, o);
    return sideOf(s, value, p.decision, p.T, 8);
  };
  return linears.map((l) => ({
    weight: l.weight,
    layer: l.layer,
    role: l.role,
    inFeatures: l.inFeatures,
    outFeatures: l.outFeatures,
    weightScale: l.weightScale,
    importance: importance(l),
    rank: rank.get(l.weight)!,
    input: side(l, 'input'),
    output: side(l, 'output'),
  }));
}
