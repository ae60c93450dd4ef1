/**
 * Prefill dispatch from a `chunk-schedule/1` record: the chunk length predicted fastest for a prompt,
 * and the order the chunk subgraphs' tasks run in (the record's tabulated schedule, or the paper's
 * heuristic online beyond the table). Used by the executors' chunked prefill, the chunk-partition
 * pass (the cost model) and the record's own check. Browser-safe.
 */
import { buildProblem, heuristic, type Problem, type Template } from './schedule.js';
import type { ChunkPlanRecord, ChunkSchedule, KindCost } from '../records/chunk-schedule.js';

/** The record's scheduling template. */
export function chunkTemplate(rec: Pick<ChunkSchedule, 'subgraphs' | 'edges'>): Template {
  return { nodes: rec.subgraphs.map((s) => ({ id: s.id, device: s.device })), edges: rec.edges };
}

/**
 * Duration of G(i, j) of N chunks at chunk length `plan.c`: the kind's ms plus msPerChunk per chunk up
 * to i (SPEC's cost model; the pass tabulates with it too). The head costs nothing before the last
 * chunk: a prefill for decoding runs it on the last chunk only.
 */
export function chunkDuration(rec: { subgraphs: readonly { kind: string }[] }, plan: { costs: Readonly<Record<string, KindCost>> }): (i: number, j: number, N: number) => number {
  return (i, j, N) => {
    const kind = rec.subgraphs[j].kind;
    if (kind === 'head' && i < N - 1) return 0;
    const k = plan.costs[kind];
    return k.ms + k.msPerChunk * (i + 1);
  };
}

export function chunkProblem(rec: Pick<ChunkSchedule, 'subgraphs' | 'edges'>, plan: Pick<ChunkPlanRecord, 'costs'>, N: number): Problem {
  return buildProblem(chunkTemplate(rec), N, chunkDuration(rec, plan));
}

/** The dispatch order for N chunks: the tabulated improved schedule, or the heuristic online beyond nMax. */
export function chunkOrderFor(rec: ChunkSchedule, plan: ChunkPlanRecord, N: number): { order: ArrayLike<number>; makespan: number; tabulated: boolean } {
  const row = plan.schedules.find((r) => r.N === N);
  if (row) return { order: row.order, makespan: row.makespan.improved, tabulated: true };
  const s = heuristic(chunkProblem(rec, plan, N), rec.heuristic);
  return { order: s.order, makespan: s.makespan, tabulated: false };
}

/** Predicted prefill time of N chunks at `plan.c` by the record's objective: Σ T (serial) or the schedule's makespan. */
export function predictedMs(rec: ChunkSchedule, plan: ChunkPlanRecord, N: number): number {
  if (rec.choice.objective === 'makespan') return chunkOrderFor(rec, plan, N).makespan;
  const dur = chunkDuration(rec, plan);
  let s = 0;
  for (let i = 0; i < N; i++) for (let j = 0; j < rec.subgraphs.length; j++) s += dur(i, j, N);
  return s;
}

/** The chunk length the record predicts fastest for a prompt of P tokens (ties: the shorter). */
export function pickChunkPlan(rec: ChunkSchedule, P: number): ChunkPlanRecord {
  let best = rec.chunks[0];
  let bestMs = Infinity;
  for (const plan of rec.chunks) {
    const ms = predictedMs(rec, plan, Math.ceil(P / plan.c));
    if (ms < bestMs) [best, bestMs] = [plan, ms];
  }
  return best;
}
