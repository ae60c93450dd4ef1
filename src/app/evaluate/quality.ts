/**
 * Quality of a model against a reference on the same token sequences, teacher-forced: at every
 * position t that predicts token t+1, both models' logits over the vocabulary are compared.
 *   perplexity        exp(mean −log softmax(logits)[next token]), per model
 *   kl                mean over positions of KL(reference ‖ candidate), nats
 *   greedy agreement  the fraction of positions where both models' argmax is the same token
 * Everything accumulates in float64; the models are plain functions from ids to [T, V] logits, so
 * any executor (onnxruntime, the TS runtime, a level of either) plugs in.
 */
import { LlmcError } from '../../core/errors.js';

/** Row-major logits [T, V] at every position of `ids`. */
export type LogitsFn = (ids: number[]) => Promise<Float32Array>;

export interface QualityFigures {
  /** Sequences and positions compared. */
  sequences: number;
  positions: number;
  referencePpl: number;
  candidatePpl: number;
  /** candidatePpl − referencePpl. */
  pplDelta: number;
  /** Mean KL(reference ‖ candidate) per position, nats. */
  kl: number;
  greedyAgreement: number;
}

/** log-softmax of one row into `out` (float64). */
function logSoftmax(row: Float32Array, out: Float64Array): void {
  let max = -Infinity;
  for (let i = 0; i < row.length; i++) if (row[i] > max) max = row[i];
  let sum = 0;
  for (let i = 0; i < row.length; i++) sum += Math.exp(row[i] - max);
  const lse = max + Math.log(sum);
  for (let i = 0; i < row.length; i++) out[i] = row[i] - lse;
}

function argmax(row: Float64Array): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
  return best;
}

export async function compareModels(reference: LogitsFn, candidate: LogitsFn, sequences: readonly number[][], vocabSize: number, onSequence: () => void = () => {}): Promise<QualityFigures> {
  const V = vocabSize;
  const p = new Float64Array(V);
  const q = new Float64Array(V);
  let nllRef = 0;
  let nllCand = 0;
  let kl = 0;
  let agree = 0;
  let positions = 0;
  let used = 0;
  for (const seq of sequences) {
    if (seq.length < 2) continue;
    used++;
    const [a, b] = [await reference(seq), await candidate(seq)];
    if (a.length < (seq.length - 1) * V || b.length < (seq.length - 1) * V) {
      throw new LlmcError(`internal: logits of ${a.length} / ${b.length} values for ${seq.length} positions × ${V}`);
    }
    for (let t = 0; t + 1 < seq.length; t++) {
      logSoftmax(a.subarray(t * V, (t + 1) * V), p);
      logSoftmax(b.subarray(t * V, (t + 1) * V), q);
      const next = seq[t + 1];
      nllRef -= p[next];
      nllCand -= q[next];
      let d = 0;
      for (let i = 0; i < V; i++) {
        const pi = Math.exp(p[i]);
        if (pi > 0) d += pi * (p[i] - q[i]);
      }
      kl += d;
      if (argmax(p) === argmax(q)) agree++;
      positions++;
    }
    onSequence();
  }
  if (positions === 0) throw new LlmcError('quality needs at least one sequence of 2 or more tokens');
  const referencePpl = Math.exp(nllRef / positions);
  const candidatePpl = Math.exp(nllCand / positions);
  return {
    sequences: used,
    positions,
    referencePpl,
    candidatePpl,
    pplDelta: candidatePpl - referencePpl,
    kl: Math.max(0, kl / positions),
    greedyAgreement: agree / positions,
  };
}
