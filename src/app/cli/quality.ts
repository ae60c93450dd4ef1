/** The quality figures as text lines (compile's summary, llmc check): each with its 95% interval as ± half its width. */
import type { HeldOutFacts } from '../evaluate/artifact.js';
import { heldOutWords } from '../evaluate/describe.js';
import type { Interval, QualityFigures } from '../evaluate/quality.js';

/** `v ± h` with h half the interval's width, both to `digits` significant digits of h's scale. */
function pm(v: number, ci: Interval, decimals: number, sign = false): string {
  const h = (ci[1] - ci[0]) / 2;
  return `${sign && v >= 0 ? '+' : ''}${v.toFixed(decimals)} ± ${h.toFixed(decimals)}`;
}

/** Decimals that show a value's interval to about two significant digits. */
function decimalsFor(ci: Interval): number {
  const h = (ci[1] - ci[0]) / 2;
  return h > 0 && Number.isFinite(h) ? Math.min(8, Math.max(1, 1 - Math.floor(Math.log10(h)))) : 4;
}

export function formatQuality(q: QualityFigures & { executor: string; sourceExecutor?: string }, h: HeldOutFacts): string[] {
  const c = q.ci95;
  const d = (k: keyof typeof c) => decimalsFor(c[k]);
  return [
    `  quality against the source on ${heldOutWords(h)}; the artifact on ${q.executor}, the source on ${q.sourceExecutor ?? 'onnxruntime'}; ± 95% intervals:`,
    `    perplexity ${pm(q.referencePpl, c.referencePpl, d('referencePpl'))} → ${pm(q.candidatePpl, c.candidatePpl, d('candidatePpl'))} (Δ ${pm(q.pplDelta, c.pplDelta, d('pplDelta'), true)}, ratio ${pm(q.pplRatio, c.pplRatio, d('pplRatio'))})`,
    `    KL ${pm(q.kl, c.kl, d('kl'))} nats (99th percentile ${pm(q.klP99, c.klP99, d('klP99'))}), same top token ${pm(100 * q.greedyAgreement, [100 * c.greedyAgreement[0], 100 * c.greedyAgreement[1]], Math.max(1, d('greedyAgreement') - 2))}%`,
  ];
}
