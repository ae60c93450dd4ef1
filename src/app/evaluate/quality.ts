/**
 * Quality of a model against a reference on the same token windows, teacher-forced: at every
 * position t of a window that predicts token t+1, both models' logits over the vocabulary are
 * compared (stats.ts: perplexities, ΔPPL and ratio, mean and 99th-percentile KL(reference ‖
 * candidate), same-top-token rate, each with a 95% interval). One window's logits are held at a
 * time and everything accumulates in float64; the models are plain functions from ids to [T, V]
 * logits, so any executor (onnxruntime, the TS runtime, llama.cpp, a level of either) plugs in.
 */
import { LlmcError } from '../../core/errors.js';
import { QualityAccumulator, scorePosition, type Estimate } from './stats.js';

/** Row-major logits [T, V] at every position of `ids`. */
export type LogitsFn = (ids: number[]) => Promise<Float32Array>;

/** [low, high] of a 95% confidence interval. */
export type Interval = [number, number];

export interface QualityFigures {
  /** Windows (sequences) and positions (scored tokens) compared. */
  sequences: number;
  positions: number;
  referencePpl: number;
  candidatePpl: number;
  /** candidatePpl − referencePpl. */
  pplDelta: number;
  /** candidatePpl / referencePpl. */
  pplRatio: number;
  /** Mean KL(reference ‖ candidate) per position, nats. */
  kl: number;
  /** 99th percentile and maximum of the per-position KL, nats. */
  klP99: number;
  klMax: number;
  /** Fraction of positions where both models' most likely token is the same. */
  greedyAgreement: number;
  /** 95% confidence intervals of the figures above. */
  ci95: Record<'referencePpl' | 'candidatePpl' | 'pplDelta' | 'pplRatio' | 'kl' | 'klP99' | 'greedyAgreement', Interval>;
}

const iv = (e: Estimate): Interval => [e.lo, e.hi];

export async function compareModels(reference: LogitsFn, candidate: LogitsFn, windows: readonly number[][], vocabSize: number, onWindow: () => void = () => {}): Promise<QualityFigures> {
  const V = vocabSize;
  const p = new Float64Array(V);
  const q = new Float64Array(V);
  const acc = new QualityAccumulator(windows.reduce((a, w) => a + Math.max(0, w.length - 1), 0));
  let used = 0;
  for (const seq of windows) {
    if (seq.length < 2) continue;
    used++;
    const [a, b] = [await reference(seq), await candidate(seq)];
    if (a.length < (seq.length - 1) * V || b.length < (seq.length - 1) * V) {
      throw new LlmcError(`internal: logits of ${a.length} / ${b.length} values for ${seq.length} positions × ${V}`);
    }
    for (let t = 0; t + 1 < seq.length; t++) scorePosition(acc, a.subarray(t * V, (t + 1) * V), b.subarray(t * V, (t + 1) * V), seq[t + 1], p, q);
    onWindow();
  }
  if (acc.tokens === 0) throw new LlmcError('quality needs at least one sequence of 2 or more tokens');
  const s = acc.result();
  return {
    sequences: used,
    positions: s.tokens,
    referencePpl: s.sourcePpl.value,
    candidatePpl: s.artifactPpl.value,
    pplDelta: s.pplDelta.value,
    pplRatio: s.pplRatio.value,
    kl: s.kl.value,
    klP99: s.klP99.value,
    klMax: s.klMax,
    greedyAgreement: s.topAgreement.value,
    ci95: {
      referencePpl: iv(s.sourcePpl),
      candidatePpl: iv(s.artifactPpl),
      pplDelta: iv(s.pplDelta),
      pplRatio: iv(s.pplRatio),
      kl: iv(s.kl),
      klP99: iv(s.klP99),
      greedyAgreement: iv(s.topAgreement),
    },
  };
}
