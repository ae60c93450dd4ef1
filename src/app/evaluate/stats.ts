/**
 * The statistics of a quality evaluation, accumulated one scored position at a time so memory stays
 * flat whatever the token count (one float32 per position is kept, for the exact KL percentile).
 *
 * Per scored position t (predicting token x): nll_s = −log p_s(x) and nll_a = −log p_a(x) of source
 * and artifact, KL(p_s ‖ p_a), and whether both argmaxes agree. The figures and their uncertainties
 * follow llama.cpp's `llama-perplexity --kl-divergence` (tools/perplexity/perplexity.cpp): standard
 * errors of per-token means (sample variance / (n − 1)), the delta method for PPL and ΔPPL using the
 * covariance of the two NLLs, and the binomial for top-token agreement. llama.cpp prints ± one
 * standard error; llmc gives 95% intervals:
 *   PPL               exp(mean NLL ± 1.96 se)                   (the delta method's ± ppl·se, kept asymmetric)
 *   PPL ratio         exp(mean(nll_a − nll_s) ± 1.96 se)        (se of the per-token difference)
 *   ΔPPL              ± 1.96 √(ppl_a² v_a + ppl_s² v_s − 2 ppl_a ppl_s c)   (v: se², c: cov of the means)
 *   mean KL           ± 1.96 se
 *   KL p99            order statistics: the ranks n·q ∓ 1.96 √(n q (1 − q))  (distribution-free)
 *   same top token    Wilson score interval at 95%
 * Tokens within a window are correlated, so like llama.cpp's these intervals are somewhat narrow.
 */
import { argmax, logSoftmax } from '../../core/sampling.js';

/** Index of the largest value (the first of equals): the sampler's, one definition. */
export { argmax };

export const Z95 = 1.959963984540054;

/** A figure with its 95% confidence interval. */
export interface Estimate {
  value: number;
  lo: number;
  hi: number;
}

export interface QualityStats {
  /** Positions scored (each predicts one token). */
  tokens: number;
  sourcePpl: Estimate;
  artifactPpl: Estimate;
  /** artifactPpl − sourcePpl. */
  pplDelta: Estimate;
  /** artifactPpl / sourcePpl. */
  pplRatio: Estimate;
  /** Mean KL(source ‖ artifact) per position, nats. */
  kl: Estimate;
  /** The 99th percentile of per-position KL, nats. */
  klP99: Estimate;
  /** The largest per-position KL, nats. */
  klMax: number;
  /** Fraction of positions where both models' most likely token is the same. */
  topAgreement: Estimate;
}

/** The q-quantile of sorted values, interpolated linearly between ranks (numpy's default). */
export function quantileSorted(sorted: ArrayLike<number>, q: number): number {
  const n = sorted.length;
  if (n === 0) return NaN;
  const h = q * (n - 1);
  const i = Math.floor(h);
  return i + 1 < n ? sorted[i] + (h - i) * (sorted[i + 1] - sorted[i]) : sorted[n - 1];
}

/** Wilson score interval of k successes in n trials. */
export function wilson(k: number, n: number, z = Z95): { lo: number; hi: number } {
  const p = k / n;
  const d = 1 + (z * z) / n;
  const c = (p + (z * z) / (2 * n)) / d;
  const h = (z * Math.sqrt((p * (1 - p)) / n + (z * z) / (4 * n * n))) / d;
  return { lo: Math.max(0, c - h), hi: Math.min(1, c + h) };
}

/** Running sum and sum of squares of one per-position quantity. */
class Moments {
  private sum = 0;
  private sum2 = 0;

  add(x: number): void {
    this.sum += x;
    this.sum2 += x * x;
  }

  /** Its mean and the standard error of the mean over n values (llama.cpp's mean_and_uncertainty). */
  meanSe(n: number): { mean: number; se: number } {
    const mean = this.sum / n;
    const variance = Math.max(0, this.sum2 / n - mean * mean);
    return { mean, se: n > 1 ? Math.sqrt(variance / (n - 1)) : Infinity };
  }
}

export class QualityAccumulator {
  private n = 0;
  /** NLL of the source, of the artifact, their difference, and KL. */
  private readonly nllS = new Moments();
  private readonly nllA = new Moments();
  private readonly diff = new Moments();
  private readonly klm = new Moments();
  private agree = 0;
  private klMax = -Infinity;
  private kls: Float32Array;

  constructor(expectedTokens = 1024) {
    this.kls = new Float32Array(Math.max(16, expectedTokens));
  }

  get tokens(): number {
    return this.n;
  }

  /** One scored position: the two NLLs of the true next token, the KL, and whether the argmaxes agree. */
  add(nllSource: number, nllArtifact: number, kl: number, sameTop: boolean): void {
    this.nllS.add(nllSource);
    this.nllA.add(nllArtifact);
    this.diff.add(nllArtifact - nllSource);
    this.klm.add(kl);
    if (sameTop) this.agree++;
    if (kl > this.klMax) this.klMax = kl;
    if (this.n === this.kls.length) {
      const grown = new Float32Array(this.kls.length * 2);
      grown.set(this.kls);
      this.kls = grown;
    }
    this.kls[this.n++] = kl;
  }

  result(): QualityStats {
    const n = this.n;
    const [s, a, d, k] = [this.nllS, this.nllA, this.diff, this.klm].map((m) => m.meanSe(n));
    const ppl = (m: { mean: number; se: number }): Estimate => ({ value: Math.exp(m.mean), lo: Math.exp(m.mean - Z95 * m.se), hi: Math.exp(m.mean + Z95 * m.se) });
    // cov of the two means from var(a − s) = var a + var s − 2 cov.
    const cov = (a.se * a.se + s.se * s.se - d.se * d.se) / 2;
    const [pa, ps] = [Math.exp(a.mean), Math.exp(s.mean)];
    const deltaSe = Math.sqrt(Math.max(0, pa * pa * a.se * a.se + ps * ps * s.se * s.se - 2 * pa * ps * cov));
    const sorted = this.kls.slice(0, n).sort();
    const q = 0.99;
    const spread = Z95 * Math.sqrt(n * q * (1 - q));
    const rank = (r: number) => sorted[Math.min(n - 1, Math.max(0, r))];
    const top = wilson(this.agree, n);
    return {
      tokens: n,
      sourcePpl: ppl(s),
      artifactPpl: ppl(a),
      pplDelta: { value: pa - ps, lo: pa - ps - Z95 * deltaSe, hi: pa - ps + Z95 * deltaSe },
      pplRatio: ppl(d),
      kl: { value: k.mean, lo: k.mean - Z95 * k.se, hi: k.mean + Z95 * k.se },
      klP99: { value: quantileSorted(sorted, q), lo: rank(Math.floor(n * q - spread) - 1), hi: rank(Math.ceil(n * q + spread) - 1) },
      klMax: this.klMax,
      topAgreement: { value: this.agree / n, ...top },
    };
  }
}

/**
 * Score one position from the two models' logit rows (scratch `p`, `q` receive their log-softmaxes).
 * KL is not clamped: like llama.cpp's, an identical pair can give −1e−17 from rounding.
 */
export function scorePosition(acc: QualityAccumulator, source: Float32Array, artifact: Float32Array, next: number, p: Float64Array, q: Float64Array): void {
  logSoftmax(source, p);
  logSoftmax(artifact, q);
  let kl = 0;
  for (let i = 0; i < p.length; i++) {
    const pi = Math.exp(p[i]);
    if (pi > 0) kl += pi * (p[i] - q[i]);
  }
  acc.add(-p[next], -q[next], kl, argmax(source) === argmax(artifact));
}
