/**
 * Out-of-order subgraph scheduling of chunked prefill (mllm-NPU §3.4, SPEC outliers-chunk-partition
 * §1.7). A prompt of N chunks runs the M subgraphs of the per-chunk template on each chunk: task
 * G_{i,j} (chunk i, subgraph j) runs on the processor of subgraph j for `dur(i, j)` ms, after
 *   intra-chunk edges (Eq. 3)  G_{i,to} ← G_{i,from}
 *   cross-chunk edges (Eq. 2)  G_{i,to} ← G_{k,from} for every k ≤ i   (attention reads the KV of
 *                              the chunks before it)
 * and each processor runs one task at a time, without preemption (Eq. 4). Here: the instance, the
 * semi-active schedule of given processor sequences, the in-order baseline, the paper's heuristic,
 * lower bounds and a validity check. ./exact.ts solves small instances, ./improve.ts searches from
 * the heuristic. Browser-safe (the TS runtime schedules online when a prompt outgrows the table).
 */

/** One subgraph of the per-chunk template. */
export interface TemplateNode {
  id: string;
  /** The processor it runs on (a name from the cost table: NPU, CPU, GPU, ...). */
  device: string;
}

/** `to` needs `from`'s output in the same chunk; `cross`: also that of every earlier chunk. */
export interface TemplateEdge {
  from: number;
  to: number;
  cross: boolean;
}

/** The subgraphs of one chunk in execution order (every edge goes forward) and their dependencies. */
export interface Template {
  nodes: TemplateNode[];
  edges: TemplateEdge[];
}

/** A scheduling instance: N chunks of the template; task t = i·M + j. */
export interface Problem {
  N: number;
  M: number;
  processors: string[];
  /** Processor index of subgraph j. */
  procOf: Int32Array;
  /** Duration of task t (ms). */
  dur: Float64Array;
  preds: Int32Array[];
  succs: Int32Array[];
}

/** When each task starts (ms) and the makespan; `order`: the tasks by start time (dispatch order). */
export interface Schedule {
  start: Float64Array;
  makespan: number;
  order: Int32Array;
}

/** Processors in first-use order over the template, the NPU first when there is one. */
export function processorsOf(template: Template): string[] {
  const seen = [...new Set(template.nodes.map((n) => n.device))];
  return seen.sort((a, b) => Number(isNpu(b)) - Number(isNpu(a)));
}

const isNpu = (d: string) => d.toUpperCase() === 'NPU';

/** Throws on a template whose edges go backwards or name no subgraph (./deps-file.ts names cycles for users). */
export function checkTemplate(t: Template): void {
  for (const e of t.edges) {
    if (!(e.from >= 0 && e.to < t.nodes.length && e.from < e.to)) throw new Error(`template edge ${e.from} → ${e.to} does not go forward between subgraphs 0..${t.nodes.length - 1}`);
  }
}

/** The instance of N chunks with durations `dur(i, j, N)`. */
export function buildProblem(template: Template, N: number, dur: (i: number, j: number, N: number) => number): Problem {
  checkTemplate(template);
  const M = template.nodes.length;
  const processors = processorsOf(template);
  const procOf = Int32Array.from(template.nodes, (n) => processors.indexOf(n.device));
  const T = N * M;
  const d = new Float64Array(T);
  const pred: Set<number>[] = Array.from({ length: T }, () => new Set<number>());
  for (let i = 0; i < N; i++) {
    for (let j = 0; j < M; j++) {
      const x = dur(i, j, N);
      if (!(x >= 0) || !Number.isFinite(x)) throw new Error(`duration of G(${i},${j}) is ${x}`);
      d[i * M + j] = x;
    }
    for (const e of template.edges) {
      for (let k = e.cross ? 0 : i; k <= i; k++) pred[i * M + e.to].add(k * M + e.from);
    }
  }
  const preds = pred.map((s) => Int32Array.from([...s].sort((a, b) => a - b)));
  const succList: number[][] = Array.from({ length: T }, () => []);
  preds.forEach((ps, t) => ps.forEach((p) => succList[p].push(t)));
  return { N, M, processors, procOf, dur: d, preds, succs: succList.map((s) => Int32Array.from(s)) };
}

export const procOfTask = (p: Problem, t: number) => p.procOf[t % p.M];

/** The tasks by start time (ties: lower processor index, then lower task id). */
function dispatchOrder(p: Problem, start: Float64Array): Int32Array {
  const order = Int32Array.from({ length: start.length }, (_, t) => t);
  return order.sort((a, b) => start[a] - start[b] || procOfTask(p, a) - procOfTask(p, b) || a - b);
}

function scheduleOf(p: Problem, start: Float64Array): Schedule {
  let makespan = 0;
  for (let t = 0; t < start.length; t++) makespan = Math.max(makespan, start[t] + p.dur[t]);
  return { start, makespan, order: dispatchOrder(p, start) };
}

/**
 * The semi-active schedule of per-processor sequences: each task starts when its predecessors and
 * the task before it on its processor are done. Null when the sequences deadlock (a task waits for
 * one queued behind it).
 */
export function evaluateSequences(p: Problem, seqs: readonly ArrayLike<number>[]): Schedule | null {
  const T = p.N * p.M;
  const prevOnProc = new Int32Array(T).fill(-1);
  const nextOnProc = new Int32Array(T).fill(-1);
  let count = 0;
  for (const s of seqs) {
    for (let k = 0; k < s.length; k++) {
      if (k > 0) {
        prevOnProc[s[k]] = s[k - 1];
        nextOnProc[s[k - 1]] = s[k];
      }
      count++;
    }
  }
  if (count !== T) throw new Error(`sequences hold ${count} tasks, the instance ${T}`);
  const waiting = new Int32Array(T);
  const queue: number[] = [];
  for (let t = 0; t < T; t++) {
    waiting[t] = p.preds[t].length + (prevOnProc[t] >= 0 ? 1 : 0);
    if (!waiting[t]) queue.push(t);
  }
  const start = new Float64Array(T);
  let done = 0;
  while (queue.length) {
    const t = queue.pop()!;
    done++;
    const end = start[t] + p.dur[t];
    const release = (h: number) => {
      if (end > start[h]) start[h] = end;
      if (--waiting[h] === 0) queue.push(h);
    };
    for (const h of p.succs[t]) release(h);
    if (nextOnProc[t] >= 0) release(nextOnProc[t]);
  }
  return done === T ? scheduleOf(p, start) : null;
}

/** Each processor's tasks in start order. */
export function sequencesOf(p: Problem, s: Schedule): Int32Array[] {
  const seqs: number[][] = p.processors.map(() => []);
  for (const t of s.order) seqs[procOfTask(p, t)].push(t);
  return seqs.map((x) => Int32Array.from(x));
}

/**
 * In order: every processor takes its tasks chunk by chunk, subgraph by subgraph (ascending (i, j)),
 * each as soon as its inputs are there — the overlap of a plain pipelined executor, with its bubbles.
 */
export function inOrder(p: Problem): Schedule {
  const seqs: number[][] = p.processors.map(() => []);
  for (let t = 0; t < p.N * p.M; t++) seqs[procOfTask(p, t)].push(t);
  return evaluateSequences(p, seqs)!;
}

/**
 * mllm-NPU's released pipeline (SPEC §1.7, QNNPipelineExecutor): chunks in pairs; at step k chunk 2m
 * runs subgraph k while chunk 2m+1 runs subgraph k − lag (two threads; one after the other when both
 * need the same processor), with a barrier after every step; pairs one after the other, an odd last
 * chunk alone, subgraph by subgraph. Valid for any lag ≥ 1 (edges go forward in the template).
 */
export function stagger(p: Problem, lag = 4): Schedule {
  const start = new Float64Array(p.N * p.M);
  let clock = 0;
  for (let a = 0; a < p.N; a += 2) {
    const b = a + 1 < p.N ? a + 1 : -1;
    const steps = b < 0 ? p.M : p.M + lag;
    for (let k = 0; k < steps; k++) {
      const ta = k < p.M ? a * p.M + k : -1;
      const tb = b >= 0 && k - lag >= 0 && k - lag < p.M ? b * p.M + k - lag : -1;
      let end = clock;
      if (ta >= 0) {
        start[ta] = clock;
        end = clock + p.dur[ta];
      }
      if (tb >= 0) {
        start[tb] = ta >= 0 && procOfTask(p, ta) === procOfTask(p, tb) ? end : clock;
        end = Math.max(end, start[tb] + p.dur[tb]);
      }
      clock = end;
    }
  }
  return scheduleOf(p, start);
}

/**
 * Plain overlap: a greedy executor with no plan. Whenever a processor is free it starts the ready task
 * (every predecessor done) that became ready first, ties to the lower chunk then subgraph. No task
 * waits while its processor idles, so chunk i+1's work fills chunk i's gaps as far as the edges allow
 * (a list scheduler; what a runtime with one queue per processor does).
 */
export function plainOverlap(p: Problem): Schedule {
  const T = p.N * p.M;
  const start = new Float64Array(T);
  const ready = new Float64Array(T); // when the last predecessor ends
  const waiting = Int32Array.from(p.preds, (x) => x.length);
  const free = new Float64Array(p.processors.length);
  const avail = new Set<number>();
  for (let t = 0; t < T; t++) if (!waiting[t]) avail.add(t);
  for (let done = 0; done < T; done++) {
    let best = -1;
    let bestStart = Infinity;
    for (const t of avail) {
      const s = Math.max(ready[t], free[procOfTask(p, t)]);
      if (s < bestStart || (s === bestStart && (ready[t] < ready[best] || (ready[t] === ready[best] && t < best)))) {
        best = t;
        bestStart = s;
      }
    }
    avail.delete(best);
    start[best] = bestStart;
    const end = bestStart + p.dur[best];
    free[procOfTask(p, best)] = end;
    for (const h of p.succs[best]) {
      if (end > ready[h]) ready[h] = end;
      if (--waiting[h] === 0) avail.add(h);
    }
  }
  return scheduleOf(p, start);
}

/** Everything on one processor after the other: Σ T. */
export function serialMakespan(p: Problem): number {
  return p.dur.reduce((a, x) => a + x, 0);
}

export type HeuristicVariant = 'all' | 'opposite';

/**
 * mllm-NPU's online heuristic (§3.4 Eq. 6). When a processor is idle it starts, among its ready
 * tasks, the one with the largest C(g):
 *   S(g) = the successors g enables (all their other predecessors done)
 *   C(g) = +Σ_{h∈S(g)} T(h) when g runs off the critical processor (CPU/GPU work that unlocks NPU work)
 *          −Σ_{h∈S(g)} T(h) when g runs on it (NPU work whose unlocked CPU work is short)
 * ties: lower chunk i, then lower subgraph j. The critical processor is the NPU when the template has
 * one, else the most loaded. `opposite`: S(g) counts only successors on another processor (the
 * paper's wording; `all`, the default, is SPEC §1.7's reading).
 */
export function heuristic(p: Problem, variant: HeuristicVariant = 'all'): Schedule {
  const T = p.N * p.M;
  const P = p.processors.length;
  const critical = criticalProcessor(p);
  const remaining = Int32Array.from(p.preds, (x) => x.length);
  const ready: number[][] = Array.from({ length: P }, () => []);
  for (let t = 0; t < T; t++) if (!remaining[t]) ready[procOfTask(p, t)].push(t);
  const running = new Int32Array(P).fill(-1);
  const start = new Float64Array(T);
  const contribution = (g: number) => {
    const pg = procOfTask(p, g);
    let sum = 0;
    for (const h of p.succs[g]) if (remaining[h] === 1 && (variant === 'all' || procOfTask(p, h) !== pg)) sum += p.dur[h];
    return pg === critical ? -sum : sum;
  };
  let now = 0;
  let finished = 0;
  while (finished < T) {
    for (let q = 0; q < P; q++) {
      if (running[q] >= 0 || !ready[q].length) continue;
      let best = -1;
      let bestC = -Infinity;
      for (let k = 0; k < ready[q].length; k++) {
        const c = contribution(ready[q][k]);
        // t = i·M + j: the lower id is the lower chunk, then the lower subgraph.
        if (c > bestC || (c === bestC && ready[q][k] < ready[q][best])) {
          best = k;
          bestC = c;
        }
      }
      const g = ready[q][best];
      ready[q].splice(best, 1);
      running[q] = g;
      start[g] = now;
    }
    // Advance to the next completion; finish every task ending then.
    let next = Infinity;
    for (let q = 0; q < P; q++) if (running[q] >= 0) next = Math.min(next, start[running[q]] + p.dur[running[q]]);
    if (next === Infinity) throw new Error('internal: the heuristic stalled (a dependency cycle?)');
    now = next;
    for (let q = 0; q < P; q++) {
      const g = running[q];
      if (g < 0 || start[g] + p.dur[g] !== now) continue;
      running[q] = -1;
      finished++;
      for (const h of p.succs[g]) if (--remaining[h] === 0) ready[procOfTask(p, h)].push(h);
    }
  }
  return scheduleOf(p, start);
}

/** Index of the processor whose stalls the heuristic minimizes: the NPU, else the most loaded. */
export function criticalProcessor(p: Problem): number {
  const npu = p.processors.findIndex(isNpu);
  if (npu >= 0) return npu;
  const load = loads(p);
  return load.indexOf(Math.max(...load));
}

/** Total work per processor (ms). */
export function loads(p: Problem): number[] {
  const load = p.processors.map(() => 0);
  for (let t = 0; t < p.dur.length; t++) load[procOfTask(p, t)] += p.dur[t];
  return load;
}

/** tail[t] = T(t) + the longest path from t to the end. */
export function tails(p: Problem): Float64Array {
  const T = p.dur.length;
  const tail = new Float64Array(T);
  // Task ids are a topological order (every edge goes to a later chunk or a later subgraph).
  for (let t = T - 1; t >= 0; t--) {
    let m = 0;
    for (const h of p.succs[t]) m = Math.max(m, tail[h]);
    tail[t] = p.dur[t] + m;
  }
  return tail;
}

export interface LowerBound {
  /** The longest dependency chain. */
  criticalPath: number;
  /** The most loaded processor's work. */
  busiest: number;
  bound: number;
}

/** makespan ≥ max(longest chain, busiest processor's load). */
export function lowerBound(p: Problem): LowerBound {
  const tail = tails(p);
  let criticalPath = 0;
  for (let t = 0; t < tail.length; t++) if (!p.preds[t].length) criticalPath = Math.max(criticalPath, tail[t]);
  const busiest = Math.max(...loads(p));
  return { criticalPath, busiest, bound: Math.max(criticalPath, busiest) };
}

/** Why `s` is not a valid schedule of `p` (a dependency started early, two tasks overlap on a processor), or null. */
export function scheduleProblem(p: Problem, s: Pick<Schedule, 'start' | 'makespan'>, eps = 1e-9): string | null {
  const T = p.N * p.M;
  if (s.start.length !== T) return `${s.start.length} start times for ${T} tasks`;
  const name = (t: number) => `G(${Math.floor(t / p.M)},${t % p.M})`;
  let makespan = 0;
  for (let t = 0; t < T; t++) {
    if (!(s.start[t] >= 0)) return `${name(t)} starts at ${s.start[t]}`;
    makespan = Math.max(makespan, s.start[t] + p.dur[t]);
    for (const q of p.preds[t]) if (s.start[t] < s.start[q] + p.dur[q] - eps) return `${name(t)} starts at ${s.start[t]} before ${name(q)} ends at ${s.start[q] + p.dur[q]}`;
  }
  if (Math.abs(makespan - s.makespan) > eps * Math.max(1, makespan)) return `makespan ${s.makespan} is not the last end ${makespan}`;
  for (let q = 0; q < p.processors.length; q++) {
    const mine = [...Array(T).keys()].filter((t) => procOfTask(p, t) === q && p.dur[t] > 0).sort((a, b) => s.start[a] - s.start[b]);
    for (let k = 1; k < mine.length; k++) {
      const a = mine[k - 1];
      const b = mine[k];
      if (s.start[b] < s.start[a] + p.dur[a] - eps) return `${name(a)} and ${name(b)} overlap on ${p.processors[q]}`;
    }
  }
  return null;
}

/** Idle share of a processor's time before the makespan (the paper's bubble rate on the critical path). */
export function bubbleRate(p: Problem, s: Schedule, processor = criticalProcessor(p)): number {
  return s.makespan > 0 ? 1 - loads(p)[processor] / s.makespan : 0;
}
