/**
 * Next-token choice from logits: greedy, or temperature + top-p with a seeded RNG.
 * Shared by the onnxruntime engine and the TS runtime so both sample identically. Browser-safe.
 */
import { Rng } from './util/rng.js';

export interface SamplingOptions {
  /** 0 (default) = greedy argmax. */
  temperature?: number;
  /** Nucleus mass in (0, 1]; 1 = no truncation. */
  topP?: number;
  seed?: number;
}

/** Index of the largest logit; ties go to the lowest index (as argmax in numpy / torch). */
export function argmax(logits: ArrayLike<number>): number {
  let best = 0;
  let bv = logits[0];
  for (let i = 1; i < logits.length; i++) {
    if (logits[i] > bv) {
      bv = logits[i];
      best = i;
    }
  }
  return best;
}

/** log Σ exp(z[o..o+n)), shifted by the maximum so it cannot overflow. */
export function logSumExp(z: ArrayLike<number>, o = 0, n = z.length - o): number {
  let max = -Infinity;
  for (let i = 0; i < n; i++) if (z[o + i] > max) max = z[o + i];
  let s = 0;
  for (let i = 0; i < n; i++) s += Math.exp(z[o + i] - max);
  return max + Math.log(s);
}

/** log-softmax of one row into `out` (float64). */
export function logSoftmax(row: ArrayLike<number>, out: Float64Array): void {
  const lse = logSumExp(row);
  for (let i = 0; i < row.length; i++) out[i] = row[i] - lse;
}

export class Sampler {
  private rng: Rng;
  constructor(private opts: SamplingOptions = {}) {
    this.rng = new Rng(opts.seed ?? 0);
  }

  get greedy(): boolean {
    return !this.opts.temperature || this.opts.temperature <= 0;
  }

  next(logits: ArrayLike<number>): number {
    if (this.greedy) return argmax(logits);
    const t = this.opts.temperature!;
    const topP = this.opts.topP ?? 1;
    const n = logits.length;
    let max = -Infinity;
    for (let i = 0; i < n; i++) if (logits[i] > max) max = logits[i];
    const probs = new Float64Array(n);
    let sum = 0;
    for (let i = 0; i < n; i++) sum += probs[i] = Math.exp((logits[i] - max) / t);
    // Candidates by descending probability (index order breaks ties), truncated at top-p mass.
    const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => probs[b] - probs[a] || a - b);
    let keep = n;
    if (topP < 1) {
      let mass = 0;
      for (let k = 0; k < n; k++) {
        mass += probs[order[k]] / sum;
        if (mass >= topP) {
          keep = k + 1;
          break;
        }
      }
    }
    let kept = 0;
    for (let k = 0; k < keep; k++) kept += probs[order[k]];
    let r = this.rng.next() * kept;
    for (let k = 0; k < keep; k++) {
      r -= probs[order[k]];
      if (r < 0) return order[k];
    }
    return order[keep - 1];
  }
}
