/**
 * Record `chunk-schedule/1`: what the `chunk-partition` pass decided for chunked prefill (mllm-NPU,
 * SPEC outliers-chunk-partition §1.5–1.7): the chunk subgraphs of the IR (ops, boundary values,
 * static or dynamic, processor), their dependency template (Eq. 2–3), the cost table the schedules
 * were computed from, and per chunk length c a table of schedules for N = 1..nMax chunks (the order
 * tasks G_{i,j} run in, with the in-order, heuristic and improved makespans and the lower bound),
 * plus how c was chosen. Read by the TS runtime (`llmc run --chunk`), the cuda target (chunk graphs)
 * and the report. Every schedule is re-checked against the template and the costs when the record is
 * read (dependencies, one task at a time per processor, makespan), so a reader can trust it.
 * The record's types and that check only: choosing a plan and a dispatch order from it is
 * src/core/chunks/dispatch.ts, beside the scheduler. Browser-safe.
 */
import { LlmcError, UsageError, summarize } from '../errors.js';
import { Checker } from '../util/check.js';
import { SUBGRAPH_KINDS, type SubgraphKind } from '../chunks/partition.js';
import { scheduleProblem, type HeuristicVariant, type TemplateEdge } from '../chunks/schedule.js';
import { chunkProblem } from '../chunks/dispatch.js';
import { defineRecord } from './types.js';

export interface ChunkSubgraphRecord {
  j: number;
  id: string;
  kind: SubgraphKind;
  layer: number | null;
  share: 'static' | 'dynamic';
  device: string;
  /** graph.ops[from, to) of the unit's IR (moe ops whole). */
  ops: [number, number];
  inputs: string[];
  outputs: string[];
}

/** T(i) = ms + msPerChunk·(i + 1) for chunk i (msPerChunk = 0 for static subgraphs). */
export interface KindCost {
  device: string;
  ms: number;
  msPerChunk: number;
}

export interface ScheduleRow {
  N: number;
  criticalPath: number;
  busiest: number;
  lowerBound: number;
  makespan: { serial: number; inOrder: number; heuristic: number; improved: number };
  /** Branch and bound proved the improved schedule optimal. */
  optimal: boolean;
  /** The improved schedule: tasks t = i·M + j in dispatch order, and when each starts (ms), by t. */
  order: number[];
  start: number[];
}

export interface ChunkPlanRecord {
  c: number;
  /** Schedules are tabulated for N = 1..nMax; longer prompts are scheduled online by the heuristic. */
  nMax: number;
  costs: Record<string, KindCost>;
  schedules: ScheduleRow[];
  /** SPEC §1.6's model, bytes: W = weights of the static subgraphs, A = activations per chunk. */
  memory: { staticWeightBytes: number; staticActivationBytes: number; dynamicActivationBytes: number[] };
}

export interface ChunkChoice {
  mode: 'given' | 'auto';
  objective: 'serial' | 'makespan';
  /** The prompt-length distribution, as given. */
  prompts: string;
  /** E_P[cost] per candidate c (ms). */
  expected: { c: number; serialMs: number; makespanMs: number }[];
  chosen: number[];
}

export interface ChunkSchedule {
  format: 'chunk-schedule/1';
  subgraphs: ChunkSubgraphRecord[];
  edges: TemplateEdge[];
  processors: string[];
  heuristic: HeuristicVariant;
  costs: { source: string; device: string };
  /** Ascending c; several lengths share the weights (the runtime picks one per prompt). */
  chunks: ChunkPlanRecord[];
  choice: ChunkChoice;
  shadowLayers: number[];
  notes: string[];
}

/** The plan of chunk length `c`, or a usage error naming the lengths there are. */
export function chunkPlanOf(rec: ChunkSchedule, c: number, where?: string): ChunkPlanRecord {
  const plan = rec.chunks.find((p) => p.c === c);
  if (!plan) throw new LlmcError(`the artifact has chunk graphs for c = ${rec.chunks.map((p) => p.c).join(', ')}, not ${c}`, where, 2);
  return plan;
}

function readPlan(c: Checker, v: unknown, path: string, rec: ChunkSchedule): ChunkPlanRecord {
  const o = c.obj(v, path);
  const plan = o as unknown as ChunkPlanRecord;
  c.int(o.c, `${path}.c`, 1);
  c.int(o.nMax, `${path}.nMax`, 1);
  const costs = c.obj(o.costs, `${path}.costs`);
  for (const s of rec.subgraphs) {
    const k = costs[s.kind];
    if (k === undefined) c.fail(`${path}.costs`, `lacks subgraph kind "${s.kind}"`);
    const x = c.obj(k, `${path}.costs.${s.kind}`);
    for (const f of ['ms', 'msPerChunk'] as const) if (c.num(x[f], `${path}.costs.${s.kind}.${f}`) < 0) c.fail(`${path}.costs.${s.kind}.${f}`, 'is negative');
    if (x.device !== s.device) c.fail(`${path}.costs.${s.kind}.device`, `is ${summarize(x.device)}, subgraph ${s.id} runs on ${s.device}`);
  }
  const rows = c.arr(o.schedules, `${path}.schedules`);
  rows.forEach((r, k) => {
    const at = `${path}.schedules[${k}]`;
    const row = c.obj(r, at);
    const N = c.int(row.N, `${at}.N`, 1);
    if (N !== k + 1) c.fail(`${at}.N`, `must be ${k + 1} (rows run N = 1..nMax)`);
    const p = chunkProblem(rec, plan, N);
    const order = c.ints(row.order, `${at}.order`);
    const start = c.arr(row.start, `${at}.start`).map((x, t) => c.num(x, `${at}.start[${t}]`));
    if (order.length !== N * p.M || [...order].sort((a, b) => a - b).some((t, n) => t !== n)) c.fail(`${at}.order`, `is not a permutation of the ${N * p.M} tasks`);
    const ms = c.obj(row.makespan, `${at}.makespan`);
    const improved = c.num(ms.improved, `${at}.makespan.improved`);
    const why = scheduleProblem(p, { start: Float64Array.from(start), makespan: improved }, 1e-6);
    if (why) c.fail(at, `is not a valid schedule: ${why}`);
    for (let n = 1; n < order.length; n++) if (start[order[n]] < start[order[n - 1]]) c.fail(`${at}.order`, 'is not in start order');
    if (improved < c.num(row.lowerBound, `${at}.lowerBound`) - 1e-6) c.fail(`${at}.makespan.improved`, 'is below the lower bound');
  });
  if (rows.length !== plan.nMax) c.fail(`${path}.schedules`, `has ${rows.length} rows for nMax ${plan.nMax}`);
  return plan;
}

export const CHUNK_SCHEDULE = defineRecord<ChunkSchedule>('chunk-schedule/1', 'chunk graphs and their out-of-order schedules (chunk-partition)', (v, c) => {
  const o = c.obj(v, 'chunk-schedule');
  const rec = o as unknown as ChunkSchedule;
  const subs = c.arr(o.subgraphs, 'subgraphs');
  if (!subs.length) c.fail('subgraphs', 'is empty');
  subs.forEach((s, j) => {
    const x = c.obj(s, `subgraphs[${j}]`);
    if (x.j !== j) c.fail(`subgraphs[${j}].j`, `must be ${j}`);
    c.str(x.id, `subgraphs[${j}].id`);
    if (!SUBGRAPH_KINDS.includes(x.kind as SubgraphKind)) c.fail(`subgraphs[${j}].kind`, `must be one of ${SUBGRAPH_KINDS.join(', ')}`);
    c.str(x.device, `subgraphs[${j}].device`);
    const ops = c.ints(x.ops, `subgraphs[${j}].ops`);
    if (ops.length !== 2 || ops[1] < ops[0]) c.fail(`subgraphs[${j}].ops`, 'must be [from, to)');
  });
  const edges = c.arr(o.edges, 'edges');
  edges.forEach((e, k) => {
    const x = c.obj(e, `edges[${k}]`);
    const from = c.int(x.from, `edges[${k}].from`);
    const to = c.int(x.to, `edges[${k}].to`);
    if (from >= to || to >= subs.length) c.fail(`edges[${k}]`, `${from} → ${to} does not go forward between subgraphs`);
  });
  const chunks = c.arr(o.chunks, 'chunks');
  if (!chunks.length) c.fail('chunks', 'is empty');
  chunks.forEach((p, k) => readPlan(c, p, `chunks[${k}]`, rec));
  if (rec.heuristic !== 'all' && rec.heuristic !== 'opposite') c.fail('heuristic', 'must be all or opposite');
  return rec;
});

/** The record of an artifact compiled with --passes chunk-partition, or a usage error. */
export function requireChunkSchedule(rec: ChunkSchedule | null, where?: string): ChunkSchedule {
  if (!rec) throw new UsageError(`--chunk needs an artifact compiled with --passes chunk-partition (${where ?? 'no chunk-schedule record'})`);
  return rec;
}
