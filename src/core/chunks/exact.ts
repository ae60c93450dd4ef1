/**
 * Exact minimum makespan by branch and bound, for small instances (and as an anytime improver with a
 * node budget). Every semi-active schedule is the schedule of some topological order of the tasks,
 * each task placed at the earliest time after its predecessors and the previous task of its
 * processor; the search appends one ready task at a time. Pruning:
 *   - bound: max over unscheduled tasks of (earliest start + longest path to the end), and over
 *     processors of (when it is free + its remaining work) — no completion can beat it;
 *   - symmetry: appending t right after u, on another processor, neither depending on the other, gives
 *     the same schedule as u after t; only the order with the lower id first is explored.
 * Browser-safe.
 */
import { evaluateSequences, procOfTask, tails, type Problem, type Schedule } from './schedule.js';

export interface ExactResult {
  schedule: Schedule;
  /** The search finished: no schedule is shorter. */
  optimal: boolean;
  nodes: number;
}

/**
 * The shortest schedule found within `maxNodes` search nodes, starting from `upper` (a known
 * schedule; the result is never worse). `optimal` when the search space was exhausted.
 */
export function branchAndBound(p: Problem, opts: { upper?: Schedule; maxNodes?: number } = {}): ExactResult {
  const T = p.N * p.M;
  const P = p.processors.length;
  const maxNodes = opts.maxNodes ?? 2_000_000;
  const tail = tails(p);
  const procOf = Int32Array.from({ length: T }, (_, t) => procOfTask(p, t));
  const end = new Float64Array(T).fill(-1);
  const free = new Float64Array(P);
  const remLoad = new Float64Array(P);
  for (let t = 0; t < T; t++) remLoad[procOf[t]] += p.dur[t];
  const waiting = Int32Array.from(p.preds, (x) => x.length);
  const isPred = (a: number, b: number) => p.preds[b].includes(a);

  let best = opts.upper ? opts.upper.makespan : Infinity;
  let bestSeqs: number[][] | null = null;
  const seqs: number[][] = Array.from({ length: P }, () => []);
  let nodes = 0;
  let exhausted = true;
  const est = new Float64Array(T);

  const bound = (): number => {
    let lb = 0;
    for (let q = 0; q < P; q++) lb = Math.max(lb, free[q] + remLoad[q]);
    // Earliest starts of the unscheduled tasks, in id order (a topological order).
    for (let t = 0; t < T; t++) {
      if (end[t] >= 0) continue;
      let s = free[procOf[t]];
      for (const q of p.preds[t]) s = Math.max(s, end[q] >= 0 ? end[q] : est[q] + p.dur[q]);
      est[t] = s;
      lb = Math.max(lb, s + tail[t]);
    }
    return lb;
  };

  const ready: number[] = [];
  for (let t = 0; t < T; t++) if (!waiting[t]) ready.push(t);

  const dfs = (depth: number, last: number): void => {
    if (nodes++ >= maxNodes) {
      exhausted = false;
      return;
    }
    if (depth === T) {
      const mk = Math.max(...free);
      if (mk < best) {
        best = mk;
        bestSeqs = seqs.map((s) => [...s]);
      }
      return;
    }
    if (bound() >= best - 1e-9) return;
    // Most promising first: the earliest start, then the longest tail.
    const cands = ready
      .filter((t) => !(last >= 0 && procOf[t] !== procOf[last] && t < last && !isPred(last, t)))
      .map((t) => {
        let s = free[procOf[t]];
        for (const q of p.preds[t]) s = Math.max(s, end[q]);
        return { t, s };
      })
      .sort((a, b) => a.s - b.s || tail[b.t] - tail[a.t] || a.t - b.t);
    for (const { t, s } of cands) {
      const q = procOf[t];
      const freeBefore = free[q];
      end[t] = s + p.dur[t];
      free[q] = end[t];
      remLoad[q] -= p.dur[t];
      seqs[q].push(t);
      ready.splice(ready.indexOf(t), 1);
      const enabled: number[] = [];
      for (const h of p.succs[t]) if (--waiting[h] === 0) enabled.push(h);
      ready.push(...enabled);
      dfs(depth + 1, t);
      for (const h of p.succs[t]) waiting[h]++;
      for (const h of enabled) ready.splice(ready.indexOf(h), 1);
      ready.push(t);
      seqs[q].pop();
      remLoad[q] += p.dur[t];
      free[q] = freeBefore;
      end[t] = -1;
      if (!exhausted) return;
    }
  };
  dfs(0, -1);
  const found = bestSeqs ? evaluateSequences(p, bestSeqs) : null;
  const schedule = found && (!opts.upper || found.makespan < opts.upper.makespan) ? found : opts.upper!;
  return { schedule, optimal: exhausted, nodes };
}
