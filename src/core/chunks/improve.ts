/**
 * Improvement of a schedule offline (SPEC §1.7 "Improvement"): an iterated local search over the
 * processors' task sequences, seeded by the heuristic, then branch and bound with the best schedule as
 * its upper bound and a node budget (which proves it optimal when the search space runs out).
 * Moves swap two adjacent tasks of one processor on the critical path (the only swaps that can
 * shorten it: the N1 neighbourhood of job-shop local search); at a local optimum a few random
 * adjacent swaps (seeded) perturb the best sequences. Deterministic for a seed. Browser-safe.
 */
import { Rng } from '../util/rng.js';
import { branchAndBound } from './exact.js';
import { evaluateSequences, procOfTask, sequencesOf, type Problem, type Schedule } from './schedule.js';

export interface ImproveOptions {
  seed: number;
  /** Sequence evaluations of the local search (each one semi-active schedule). */
  evaluations?: number;
  /** Branch-and-bound nodes after it (0: none). */
  nodes?: number;
}

export interface Improved {
  schedule: Schedule;
  /** Branch and bound ran out of schedules to try: nothing is shorter. */
  optimal: boolean;
  evaluations: number;
  nodes: number;
}

/** The critical chain of a semi-active schedule: from the last task back to time 0 (processor predecessors first). */
function criticalChain(p: Problem, s: Schedule, prevOnProc: Int32Array): number[] {
  const end = (t: number) => s.start[t] + p.dur[t];
  let z = -1;
  for (let t = 0; t < s.start.length; t++) if (z < 0 || end(t) > end(z)) z = t;
  const chain = [z];
  const eps = 1e-9 * Math.max(1, s.makespan);
  while (s.start[z] > eps) {
    const prev = prevOnProc[z];
    let next = prev >= 0 && Math.abs(end(prev) - s.start[z]) <= eps ? prev : -1;
    if (next < 0) for (const q of p.preds[z]) if (Math.abs(end(q) - s.start[z]) <= eps) next = q;
    if (next < 0) break;
    chain.push(next);
    z = next;
  }
  return chain.reverse();
}

function prevOf(p: Problem, seqs: Int32Array[]): Int32Array {
  const prev = new Int32Array(p.N * p.M).fill(-1);
  for (const s of seqs) for (let k = 1; k < s.length; k++) prev[s[k]] = s[k - 1];
  return prev;
}

const swapped = (seqs: Int32Array[], q: number, k: number): Int32Array[] => {
  const out = seqs.slice();
  const s = Int32Array.from(seqs[q]);
  [s[k], s[k + 1]] = [s[k + 1], s[k]];
  out[q] = s;
  return out;
};

export function improve(p: Problem, from: Schedule, opts: ImproveOptions): Improved {
  const budget = opts.evaluations ?? 2000;
  const rng = new Rng(opts.seed);
  const position = new Int32Array(p.N * p.M);
  let best = { seqs: sequencesOf(p, from), s: from };
  let cur = best;
  let evaluations = 0;
  const depends = (a: number, b: number) => p.preds[b].includes(a);
  while (evaluations < budget) {
    // Steepest descent over adjacent swaps on the critical chain.
    const prev = prevOf(p, cur.seqs);
    cur.seqs.forEach((s) => s.forEach((t, k) => (position[t] = k)));
    const chain = criticalChain(p, cur.s, prev);
    let step: typeof cur | null = null;
    for (let k = 1; k < chain.length && evaluations < budget; k++) {
      const a = chain[k - 1];
      const b = chain[k];
      if (prev[b] !== a || depends(a, b)) continue;
      const seqs = swapped(cur.seqs, procOfTask(p, a), position[a]);
      evaluations++;
      const s = evaluateSequences(p, seqs);
      if (s && s.makespan < (step?.s.makespan ?? cur.s.makespan) - 1e-9) step = { seqs, s };
    }
    if (step) {
      cur = step;
      if (cur.s.makespan < best.s.makespan - 1e-9) best = cur;
      continue;
    }
    // Local optimum: perturb the best sequences with a few random feasible swaps.
    let seqs = best.seqs;
    for (let n = 1 + rng.int(3), tries = 0; n > 0 && tries < 50; tries++) {
      const q = rng.int(seqs.length);
      if (seqs[q].length < 2) continue;
      const k = rng.int(seqs[q].length - 1);
      if (depends(seqs[q][k], seqs[q][k + 1])) continue;
      seqs = swapped(seqs, q, k);
      n--;
    }
    if (seqs === best.seqs) break;
    evaluations++;
    const s = evaluateSequences(p, seqs);
    if (s) cur = { seqs, s };
  }
  const bb = opts.nodes ? branchAndBound(p, { upper: best.s, maxNodes: opts.nodes }) : null;
  return { schedule: bb ? bb.schedule : best.s, optimal: bb?.optimal ?? false, evaluations, nodes: bb?.nodes ?? 0 };
}
