/**
 * Pass `chunk-partition` (docs/chunk-partition.md): cut the IR into the chunk subgraphs of
 * mllm-NPU's chunk-sharing graphs (src/core/chunks/partition.ts), take per-subgraph costs (measured
 * on this host or from a cost file), choose the chunk length(s) for the prompt-length distribution,
 * and tabulate out-of-order schedules for N = 1..nMax chunks (in order, the paper's heuristic, the
 * improved schedule, the lower bound). Writes record chunk-schedule/1; the model is unchanged.
 */
import { LlmcError, UsageError } from '../../src/core/errors.js';
import { buildModel } from '../../src/core/ir/build.js';
import type { ModelGraph, Op } from '../../src/core/ir/ir.js';
import { activationBytes, partitionGraph, PartitionError, templateOf, type Partition, type SubgraphKind } from '../../src/core/chunks/partition.js';
import { improve } from '../../src/core/chunks/improve.js';
import { buildProblem, heuristic, inOrder, lowerBound, plainOverlap, serialMakespan, stagger, type Template } from '../../src/core/chunks/schedule.js';
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import type { Pass } from '../../src/core/pipeline/pass.js';
import type { ChunkPlanRecord, ChunkSchedule, ScheduleRow } from '../../src/core/records/chunk-schedule.js';
import { chunkDuration } from '../../src/core/chunks/dispatch.js';
import { silentProgress, type Progress } from '../../src/core/util/progress.js';
import { candidateCosts, chooseSet, describePrompts, expectedCost, promptSamples } from './choose.js';
import { findCycle, readCostFile, readDepsFile, type CostTable } from './files.js';
import { measuredCosts, type MeasureDeps } from './measure.js';
import { costBlock } from './block.js';
import type { ChunkPartitionOptions } from './options.js';

const r6 = (x: number) => Number(x.toPrecision(6));

/** The partition of the unit's graph, with the dependency file's edges added (unknown ids and cycles refused). */
export function partitionOf(graph: ModelGraph, o: ChunkPartitionOptions): Partition {
  const L = graph.spec.numLayers;
  for (const l of o.shadowLayers) if (l >= L) throw new UsageError(`chunk-partition.shadowLayers: layer ${l} does not exist (the model has ${L} layers)`);
  let p: Partition;
  try {
    p = partitionGraph(graph, { shadowLayers: o.shadowLayers });
  } catch (e) {
    if (e instanceof PartitionError) throw new LlmcError(`chunk-partition cannot cut this model's graph: ${e.message}`);
    throw e;
  }
  if (!o.deps) return p;
  const file = o.deps;
  const ids = new Map(p.subgraphs.map((s) => [s.id, s.j]));
  const extra = readDepsFile(file).map((e) => {
    for (const id of [e.from, e.to]) if (!ids.has(id)) throw new LlmcError(`no subgraph "${id}" (ids look like ${p.subgraphs.slice(0, 4).map((s) => s.id).join(', ')}, ..., head)`, file, 2);
    return { from: ids.get(e.from)!, to: ids.get(e.to)!, cross: e.cross };
  });
  const named = [...p.edges, ...extra].map((e) => ({ from: p.subgraphs[e.from].id, to: p.subgraphs[e.to].id }));
  const cycle = findCycle(named);
  if (cycle) throw new LlmcError(`cyclic dependency with the data dependencies: ${cycle.join(' → ')}`, file, 2);
  const edges = [...p.edges];
  for (const e of extra) {
    const seen = edges.find((x) => x.from === e.from && x.to === e.to);
    if (seen) seen.cross ||= e.cross;
    else edges.push(e);
  }
  return { ...p, edges: edges.sort((a, b) => a.to - b.to || a.from - b.from) };
}

/** The kinds a partition's cost table must price. */
export const kindsOf = (p: Partition): SubgraphKind[] => [...new Set(p.subgraphs.map((s) => s.kind))];

/** The chunk lengths to cost: the asked ones, or the candidates (the cost file's own with a file), within the context. */
function lengthsToCost(o: ChunkPartitionOptions, context: number, file: CostTable | null): number[] {
  if (o.chunk !== 'auto') {
    for (const c of o.chunk) {
      if (c > context) throw new UsageError(`chunk-partition.chunk=${c} is larger than the model's context (${context} tokens)`);
      if (file && !file.byChunk.has(c)) throw new LlmcError(`has no costs for chunk length ${c} (it has ${[...file.byChunk.keys()].join(', ')})`, (o.costs as { file: string }).file, 2);
    }
    return o.chunk;
  }
  const pool = file ? [...file.byChunk.keys()].sort((a, b) => a - b) : o.candidates;
  const fit = pool.filter((c) => c <= context);
  if (!fit.length) throw new UsageError(`no candidate chunk length fits the model's context of ${context} tokens (candidates ${pool.join(', ')})`);
  return fit;
}

/** Bytes (f32) of the weights the static subgraphs read: W_npu of SPEC §1.6's model. */
function staticWeightBytes(source: ModelSource, graph: ModelGraph, p: Partition): number {
  const names = new Set<string>();
  const ofOp = (op: Op) => {
    if (op.op === 'linear') [op.weight, op.bias].forEach((w) => w && names.add(w));
    else if (op.op === 'rmsnorm') names.add(op.weight);
    else if (op.op === 'embed') names.add(op.table);
    else if (op.op === 'moe') {
      names.add(op.router);
      for (const m of [...op.experts, ...(op.shared ? [op.shared.mlp] : [])]) [m.gate, m.up, m.down].forEach((w) => names.add(w));
      if (op.shared) names.add(op.shared.gate);
    }
  };
  for (const s of p.subgraphs) if (s.share === 'static') for (let k = s.ops[0]; k < s.ops[1]; k++) ofOp(graph.ops[k]);
  const numel = new Map(source.tensors.map((t) => [t.name, t.shape.reduce((a, b) => a * b, 1)]));
  let n = 0;
  for (const w of names) n += numel.get(w) ?? 0;
  return 4 * n;
}

/** Activations of one attention instance of chunk i: scores H·c·(i+1)c, the KV of (i+1)c keys, the output (f32). */
function dynamicBytes(graph: ModelGraph, c: number, i: number): number {
  const att = graph.ops.find((op): op is Extract<Op, { op: 'attention' }> => op.op === 'attention')!;
  const keys = (i + 1) * c;
  return 4 * (att.heads * c * keys + 2 * att.kvHeads * att.headDim * keys + c * att.heads * att.headDim);
}

function scheduleTable(template: Template, dur: (i: number, j: number, N: number) => number, nMax: number, o: ChunkPartitionOptions, progress: Progress): ScheduleRow[] {
  const rows: ScheduleRow[] = [];
  for (let N = 1; N <= nMax; N++) {
    const p = buildProblem(template, N, dur);
    const io = inOrder(p);
    const h = heuristic(p, o.heuristic);
    // Local search from the best of the paper's heuristic and the baselines (in order, plain greedy
    // overlap, the released code's 2-chunk stagger), so the tabulated schedule is never slower than any.
    const start = [h, io, plainOverlap(p), stagger(p)].reduce((a, b) => (b.makespan < a.makespan ? b : a));
    const best = improve(p, start, { seed: o.seed + N, evaluations: o.evaluations, nodes: o.nodes });
    const lb = lowerBound(p);
    rows.push({
      N,
      criticalPath: lb.criticalPath,
      busiest: lb.busiest,
      lowerBound: lb.bound,
      makespan: { serial: serialMakespan(p), inOrder: io.makespan, heuristic: h.makespan, improved: best.schedule.makespan },
      optimal: best.optimal || best.schedule.makespan <= lb.bound + 1e-9,
      order: Array.from(best.schedule.order),
      start: Array.from(best.schedule.start),
    });
    progress.tick();
  }
  return rows;
}

export const chunkPartitionPass: Pass<ChunkPartitionOptions> = {
  async run(unit, o, ctx) {
    const progress = ctx.progress ?? silentProgress;
    const record = await plan(unit.source, unit.graph, o, { cacheDir: ctx.cacheDir, progress, note: ctx.note });
    return { unit, record };
  },

  async preview(source, o, ctx) {
    return plan(source, buildModel(source.spec), o, { cacheDir: ctx.cacheDir, progress: ctx.progress, note: ctx.note });
  },

  async profile(source, o, ctx) {
    // The host measurements a compile will look up (a cost file needs none).
    if (typeof o.costs === 'object') return;
    const graph = buildModel(source.spec);
    const p = partitionOf(graph, o);
    await measuredCosts(o.costs, lengthsToCost(o, source.spec.maxPositions, null), await measureDeps(source, graph, p, o, ctx));
  },
};

/**
 * What the costs are measured on: the model, or for a model that streams (its float32 weights above
 * 1 GiB, or `stream` forcing it) layer 0 of it cut to its first layers (./block.ts), whose costs are every layer's.
 */
async function measureDeps(source: ModelSource, graph: ModelGraph, partition: Partition, o: ChunkPartitionOptions, ctx: { cacheDir?: MeasureDeps['cacheDir']; progress: Progress; stream?: boolean }): Promise<MeasureDeps> {
  const { streams } = await import('../../src/exec/stream/index.js');
  const block = streams(source.spec, ctx.stream) ? costBlock(source, graph, o.shadowLayers) : null;
  if (block) {
    const p = partitionOf(block.graph, o);
    return { source: block.source, graph: block.graph, partition: p, oneBlock: true, cacheDir: ctx.cacheDir, progress: ctx.progress, ort: async (c, probes, timed) => (await import('./measure-ort.js')).timeOrt(block.source, block.graph, p, c, probes, timed) };
  }
  return { source, graph, partition, cacheDir: ctx.cacheDir, progress: ctx.progress, ort: async (c, probes) => (await import('./measure-ort.js')).timeOrt(source, graph, partition, c, probes) };
}

/** The record for `graph` over `source`'s weights. */
export async function plan(source: ModelSource, graph: ModelGraph, o: ChunkPartitionOptions, ctx: { cacheDir?: MeasureDeps['cacheDir']; progress: Progress; note: (m: string) => void; stream?: boolean }): Promise<ChunkSchedule> {
  const context = source.spec.maxPositions;
  const p = partitionOf(graph, o);
  const kinds = kindsOf(p);
  const file = typeof o.costs === 'object' ? readCostFile(o.costs.file, kinds) : null;
  const lengths = lengthsToCost(o, context, file);
  const costs = file ?? (await measuredCosts(o.costs as 'measure' | 'measure-ort', lengths, await measureDeps(source, graph, p, o, ctx)));
  const first = costs.byChunk.get(lengths[0])!;
  const template = templateOf(p, (k) => first[k].device);
  const notes: string[] = [];
  const processors = [...new Set(template.nodes.map((n) => n.device))];
  if (processors.length === 1) notes.push(`every subgraph runs on ${processors[0]}: schedules are serial (give a cost file with NPU / CPU costs for out-of-order gains)`);

  // The chunk length(s).
  const samples = promptSamples(o.prompts, context);
  const expected = lengths.map((c) => {
    const table = costs.byChunk.get(c)!;
    const f = candidateCosts(template, chunkDuration(p, { costs: table }), o.heuristic);
    return { c, serial: { c, cost: f.serial }, makespan: { c, cost: f.makespan } };
  });
  const chosen = o.chunk === 'auto' ? chooseSet(samples, expected.map((e) => e[o.objective]), o.lengths).sort((a, b) => a - b) : o.chunk;
  if (o.chunk === 'auto') ctx.note(`chunk-partition: chunk length ${chosen.join(', ')} for prompts ${describePrompts(o.prompts)} (${o.objective})`);

  // Schedules per chunk length.
  const rows = chosen.map((c) => Math.min(Math.ceil(context / c), o.nMax));
  ctx.progress.start('chunk-partition: schedules', rows.reduce((a, b) => a + b, 0));
  const wBytes = staticWeightBytes(source, graph, p);
  const chunks: ChunkPlanRecord[] = chosen.map((c, k) => {
    const table = costs.byChunk.get(c)!;
    return {
      c,
      nMax: rows[k],
      costs: Object.fromEntries(kinds.map((kind) => [kind, table[kind]])),
      schedules: scheduleTable(template, chunkDuration(p, { costs: table }), rows[k], o, ctx.progress),
      memory: {
        staticWeightBytes: wBytes,
        staticActivationBytes: p.subgraphs.filter((s) => s.share === 'static').reduce((a, s) => a + activationBytes(graph, s, c), 0),
        dynamicActivationBytes: Array.from({ length: rows[k] }, (_, i) => dynamicBytes(graph, c, i)),
      },
    };
  });
  ctx.progress.done();
  for (const plan of chunks) {
    const r = plan.schedules.at(-1)!;
    const f = (x: number) => x.toPrecision(4);
    ctx.note(`chunk-partition: c = ${plan.c}, ${r.N} chunks: makespan in order ${f(r.makespan.inOrder)} ms, heuristic ${f(r.makespan.heuristic)}, improved ${f(r.makespan.improved)}, lower bound ${f(r.lowerBound)}${r.optimal ? ' (optimal)' : ''}`);
  }
  const rec: ChunkSchedule = {
    format: 'chunk-schedule/1',
    subgraphs: p.subgraphs.map((s) => ({ j: s.j, id: s.id, kind: s.kind, layer: s.layer, share: s.share, device: template.nodes[s.j].device, ops: s.ops, inputs: s.inputs, outputs: s.outputs })),
    edges: p.edges,
    processors,
    heuristic: o.heuristic,
    costs: { source: costs.source, device: costs.device },
    chunks,
    choice: {
      mode: o.chunk === 'auto' ? 'auto' : 'given',
      objective: o.objective,
      prompts: describePrompts(o.prompts),
      expected: expected.map((e) => ({ c: e.c, serialMs: r6(expectedCost(samples, e.serial)), makespanMs: r6(expectedCost(samples, e.makespan)) })),
      chosen,
    },
    shadowLayers: o.shadowLayers,
    notes,
  };
  return rec;
}
