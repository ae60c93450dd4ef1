/**
 * The chunk length (SPEC §1.5): c* = argmin_c E_{P∼D}[cost(P, c)] over candidate lengths, where a
 * prompt of P tokens runs N = ⌈P/c⌉ chunks (the last padded) and
 *   serial    cost = Σ_{i<N} t_chunk(i, c), t_chunk = Σ_j T(i, j)   (the SPEC's ⌈P/c⌉·t_chunk(c), with
 *             attention's growth in i kept)
 *   makespan  cost = the heuristic schedule's makespan of N chunks.
 * Several lengths may ship: the set S of k lengths minimizing E[min_{c∈S} cost(P, c)] (exhaustive over
 * the candidates), since the runtime runs each prompt on the length predicted fastest for it.
 */
import { buildProblem, heuristic, type HeuristicVariant, type Template } from '../../src/core/chunks/schedule.js';
import type { PromptLengths } from './options.js';

export interface CandidateCost {
  c: number;
  /** Cost of N chunks, N = 1.. (memoized). */
  cost(N: number): number;
}

/** The prompt lengths of the distribution that fit the context, each with its weight. */
export function promptSamples(d: PromptLengths, context: number): { P: number; w: number }[] {
  const raw = d.kind === 'uniform' ? Array.from({ length: d.max - d.min + 1 }, (_, k) => d.min + k) : d.lengths;
  const fit = raw.filter((P) => P <= context);
  const use = fit.length ? fit : [context];
  return use.map((P) => ({ P, w: 1 / use.length }));
}

export const describePrompts = (d: PromptLengths) => (d.kind === 'uniform' ? `uniform ${d.min}-${d.max}` : `lengths ${d.lengths.join(',')}`);

/** Serial and scheduled cost functions of one chunk length. */
export function candidateCosts(template: Template, dur: (i: number, j: number, N: number) => number, variant: HeuristicVariant): { serial(N: number): number; makespan(N: number): number } {
  const M = template.nodes.length;
  const memo = new Map<number, number>();
  return {
    serial: (N) => {
      let s = 0;
      for (let i = 0; i < N; i++) for (let j = 0; j < M; j++) s += dur(i, j, N);
      return s;
    },
    makespan: (N) => {
      let v = memo.get(N);
      if (v === undefined) memo.set(N, (v = heuristic(buildProblem(template, N, dur), variant).makespan));
      return v;
    },
  };
}

export function expectedCost(samples: { P: number; w: number }[], c: CandidateCost): number {
  return samples.reduce((a, s) => a + s.w * c.cost(Math.ceil(s.P / c.c)), 0);
}

/** The k candidates minimizing E[min over the set], ties to the smaller lengths. */
export function chooseSet(samples: { P: number; w: number }[], candidates: CandidateCost[], k: number): number[] {
  const n = candidates.length;
  const table = candidates.map((c) => samples.map((s) => c.cost(Math.ceil(s.P / c.c))));
  let best: number[] = [];
  let bestCost = Infinity;
  const pick = (from: number, chosen: number[]) => {
    if (chosen.length === Math.min(k, n)) {
      const e = samples.reduce((a, s, q) => a + s.w * Math.min(...chosen.map((x) => table[x][q])), 0);
      if (e < bestCost - 1e-12) [best, bestCost] = [[...chosen], e];
      return;
    }
    for (let x = from; x < n; x++) pick(x + 1, [...chosen, x]);
  };
  pick(0, []);
  return best.map((x) => candidates[x].c);
}
