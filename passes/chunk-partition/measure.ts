/**
 * Subgraph costs measured on this host (one processor, the CPU): every subgraph of a few chunks run
 * in order, timed one by one, on the TS runtime (the interpreter staging each chunk, as `llmc run
 * --chunk` runs it) or on onnxruntime (the chunk graphs the cuda target emits, lowered in memory).
 * Static costs are the mean per layer over the probed chunks (the fastest of a few repetitions);
 * attention's cost is fitted as ms + msPerChunk·(i+1) by least squares over chunk indices 0..3.
 * Cached as a profile keyed by the checkpoint, the host and the chunk lengths.
 */
import os from 'node:os';
import { cachedProfile } from '../../src/measure/store.js';
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import type { ModelGraph } from '../../src/core/ir/ir.js';
import { SUBGRAPH_KINDS, type Partition, type Subgraph, type SubgraphKind } from '../../src/core/chunks/partition.js';
import type { ProfileCacheRef } from '../../src/core/pipeline/pass.js';
import type { KindCost } from '../../src/core/records/chunk-schedule.js';
import type { Progress } from '../../src/core/util/progress.js';
import { modelFromTensors } from '../../src/exec/runtime/memory.js';
import type { Interpreter, Model } from '../../src/exec/runtime/model.js';

const REPS = 3;
/** Chunks probed per length (attention's growth is fitted over them). */
const PROBES = 4;

export const hostName = () => `${os.cpus()[0]?.model ?? 'cpu'} ×${os.cpus().length}, ${Math.round(os.totalmem() / 2 ** 30)} GiB`;

/** times[kind][i]: ms per subgraph of that kind (mean over layers) in chunk i. */
export type ChunkTimes = Record<SubgraphKind, number[]>;

/** One run of `probes` chunks in order on the TS runtime, each subgraph timed. */
function timeTs(model: Model, pool: Interpreter[], partition: Partition, c: number, probes: number, timed: (s: Subgraph) => boolean): ChunkTimes {
  const V = model.spec.vocabSize;
  const cache = model.newCache();
  cache.reserve(probes * c);
  const sums = Object.fromEntries(SUBGRAPH_KINDS.map((k) => [k, new Array<number>(probes).fill(0)])) as ChunkTimes;
  const count = (k: SubgraphKind) => partition.subgraphs.filter((s) => s.kind === k && timed(s)).length || 1;
  for (let i = 0; i < probes; i++) {
    const ids = Array.from({ length: c }, (_, t) => ((i * c + t) * 37 + 11) % V);
    while (pool.length <= i) pool.push(model.newInterpreter());
    const call = pool[i].stage(ids, cache, [c - 1], { pos0: i * c });
    for (const s of partition.subgraphs) {
      const t0 = performance.now();
      call.runOps(s.ops[0], s.ops[1]);
      if (timed(s)) sums[s.kind][i] += performance.now() - t0;
    }
  }
  for (const k of SUBGRAPH_KINDS) sums[k] = sums[k].map((x) => x / count(k));
  return sums;
}

/** The fastest of `reps` runs, entry by entry. */
export function fastest(runs: ChunkTimes[]): ChunkTimes {
  return Object.fromEntries(SUBGRAPH_KINDS.map((k) => [k, runs[0][k].map((_, i) => Math.min(...runs.map((r) => r[k][i])))])) as ChunkTimes;
}

/** Static kinds: the mean over chunks; attention: least squares ms + msPerChunk·(i+1), both ≥ 0. */
export function fitCosts(times: ChunkTimes, kinds: readonly SubgraphKind[], device = 'CPU'): Record<string, KindCost> {
  const r6 = (x: number) => Number(x.toPrecision(6));
  const out: Record<string, KindCost> = {};
  for (const k of kinds) {
    const y = times[k];
    const mean = y.reduce((a, b) => a + b, 0) / y.length;
    if (k !== 'attention' || y.length < 2) {
      out[k] = { device, ms: r6(mean), msPerChunk: 0 };
      continue;
    }
    const x = y.map((_, i) => i + 1);
    const mx = x.reduce((a, b) => a + b, 0) / x.length;
    const slope = Math.max(0, x.reduce((a, xi, i) => a + (xi - mx) * (y[i] - mean), 0) / x.reduce((a, xi) => a + (xi - mx) ** 2, 0));
    out[k] = { device, ms: r6(Math.max(0, mean - slope * mx)), msPerChunk: r6(slope) };
  }
  return out;
}

export interface MeasureDeps {
  source: ModelSource;
  graph: ModelGraph;
  partition: Partition;
  cacheDir?: ProfileCacheRef;
  progress: Progress;
  /** The source is the model cut to its first blocks (./block.ts): layer 0's costs stand for every layer. */
  oneBlock?: boolean;
  /** onnxruntime timing of the chunk graphs (./measure-ort.ts), loaded only when asked for. */
  ort?: (c: number, probes: number, timed: (s: Subgraph) => boolean) => Promise<ChunkTimes>;
}

/** Measured cost tables per chunk length (all on the CPU). */
export async function measuredCosts(kind: 'measure' | 'measure-ort', lengths: number[], deps: MeasureDeps): Promise<{ source: string; device: string; byChunk: Map<number, Record<string, KindCost>> }> {
  const host = hostName();
  const kinds = [...new Set(deps.partition.subgraphs.map((s) => s.kind))];
  const context = deps.source.spec.maxPositions;
  const layout = deps.partition.subgraphs.map((s) => `${s.id}:${s.ops[0]}-${s.ops[1]}`).join(',');
  const prof = await cachedProfile(deps.cacheDir, 'chunk-costs', { checkpoint: await deps.source.identity(), kind, host, lengths, layout }, async () => {
    // the cut model's layer 0 only: its last layer runs at the logit rows alone (./block.ts)
    const timed = (s: Subgraph) => !deps.oneBlock || s.layer === null || s.layer === 0;
    let model: Model | null = null;
    const pool: Interpreter[] = [];
    const arrays: Record<string, Float64Array> = {};
    deps.progress.start(`chunk-partition: subgraph costs on this host (${kind === 'measure' ? 'TS runtime' : 'onnxruntime'})`, lengths.length);
    for (const c of lengths) {
      const probes = Math.max(1, Math.min(PROBES, Math.floor(context / c)));
      const runs: ChunkTimes[] = [];
      if (kind === 'measure') {
        model ??= await modelFromTensors(deps.source);
        timeTs(model, pool, deps.partition, c, probes, timed); // warm-up
        for (let r = 0; r < REPS; r++) runs.push(timeTs(model, pool, deps.partition, c, probes, timed));
      } else {
        await deps.ort!(c, probes, timed); // warm-up
        for (let r = 0; r < REPS; r++) runs.push(await deps.ort!(c, probes, timed));
      }
      const best = fastest(runs);
      for (const k of SUBGRAPH_KINDS) arrays[`${c}.${k}`] = Float64Array.from(best[k]);
      deps.progress.tick();
    }
    deps.progress.done();
    return { meta: { host }, arrays };
  });
  const byChunk = new Map<number, Record<string, KindCost>>();
  for (const c of lengths) {
    const times = Object.fromEntries(SUBGRAPH_KINDS.map((k) => [k, Array.from(prof.arrays[`${c}.${k}`])])) as ChunkTimes;
    byChunk.set(c, fitCosts(times, kinds));
  }
  const on = kind === 'measure' ? 'measured on this host: TS runtime' : 'measured on this host: onnxruntime (CPU)';
  return { source: deps.oneBlock ? `${on}, on layer 0 of the model cut to 2 layers (every layer's)` : on, device: host, byChunk };
}
