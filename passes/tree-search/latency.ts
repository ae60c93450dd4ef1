/**
 * Step costs measured on this host: one target verification of a tree of n nodes after a context
 * of c tokens (the TS runtime, as `llmc run --speculative` runs it, or onnxruntime), and one draft
 * forward over b tokens (the TS runtime). Each entry is the fastest of a few runs; entries are made
 * non-decreasing in size (a cumulative max) since the search treats each size as a step edge.
 * Cached as a profile keyed by the host, so a compile on the same machine reuses the same table.
 */
import type { ProfileCacheRef } from '../../src/core/pipeline/pass.js';
import os from 'node:os';
import * as ort from 'onnxruntime-node';
import { cachedProfile } from '../../src/measure/store.js';
import type { Engine } from '../../src/exec/engine/engine.js';
import type { Model, TreeAttention } from '../../src/exec/runtime/model.js';
import type { Drafter } from '../../src/exec/runtime/speculative.js';
import type { Progress } from '../../src/core/util/progress.js';
import type { LatencyModel } from './cost.js';

const SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128];
const BATCHES = [1, 2, 4, 8, 16, 32, 64, 128];
const REPS = 5;

export const hostName = () => `${os.cpus()[0]?.model ?? 'cpu'} ×${os.cpus().length}, ${Math.round(os.totalmem() / 2 ** 30)} GiB`;

const upTo = (list: number[], max: number) => [...new Set([...list.filter((x) => x <= max), max])].sort((a, b) => a - b);

/** A star tree over n new tokens after `c` cached ones (root at c, every other node its child). */
function starLayout(n: number, c: number): TreeAttention {
  return {
    shared: c,
    visible: Array.from({ length: n }, (_, i) => (i === 0 ? Int32Array.of(c) : Int32Array.of(c, c + i))),
    positions: Int32Array.from({ length: n }, (_, i) => c + (i ? 1 : 0)),
    keyPositions: Int32Array.from({ length: n }, (_, i) => c + (i ? 1 : 0)),
  };
}

const ids = (n: number, V: number, salt: number) => Array.from({ length: n }, (_, i) => ((i + salt) * 37 + 3) % V);

/**
 * The fastest of REPS runs of each call, taken round-robin (a slow moment of a shared machine hits
 * one run of many sizes, not every run of one size), after warming up on the largest.
 */
async function fastestEach(calls: (() => unknown)[]): Promise<number[]> {
  for (let w = 0; w < 3; w++) await calls[calls.length - 1]();
  const best = calls.map(() => Infinity);
  for (let r = 0; r < REPS; r++) {
    for (let i = 0; i < calls.length; i++) {
      const t = performance.now();
      await calls[i]();
      best[i] = Math.min(best[i], performance.now() - t);
    }
  }
  return best;
}

const cumMax = (row: number[]) => row.map((_, i) => Math.max(...row.slice(0, i + 1)));

/** Draft forward times over b tokens after c cached ones. */
function measureDraft(draft: Drafter, c: number, batches: number[]): Promise<number[]> {
  const m = draft.model;
  const cache = m.newCache();
  m.forward(ids(c, m.spec.vocabSize, 1), cache, { widths: draft.widths, lastOnly: true });
  return fastestEach(
    batches.map((b) => () => {
      m.forward(ids(b, m.spec.vocabSize, 2), cache, { widths: draft.widths, tree: starLayout(b, c), logitRows: Array.from({ length: b }, (_, i) => i) });
      cache.length = c;
    }),
  ).then(cumMax);
}

function measureTs(target: Model, c: number, sizes: number[]): Promise<number[]> {
  const cache = target.newCache();
  target.forward(ids(c, target.spec.vocabSize, 1), cache, { lastOnly: true });
  return fastestEach(
    sizes.map((n) => () => {
      target.forward(ids(n, target.spec.vocabSize, 2), cache, { tree: starLayout(n, c), rowwise: true, logitRows: Array.from({ length: n }, (_, i) => i) });
      cache.length = c;
    }),
  ).then(cumMax);
}

async function measureOrt(engine: Engine, c: number, sizes: number[]): Promise<number[]> {
  const V = engine.spec.vocabSize;
  const past: ort.Tensor[] = (await engine.forward([ids(c, V, 1)], null, [c - 1])).present;
  return cumMax(await fastestEach(sizes.map((n) => () => engine.forward([ids(n, V, 2)], past, Array.from({ length: n }, (_, i) => i)))));
}

export async function measuredLatency(
  kind: 'measure' | 'measure-ort',
  keyParts: Record<string, unknown>,
  deps: { target: () => Promise<Model>; draft: Drafter; engine: () => Promise<Engine>; nMax: number; ctx: number[]; cacheDir?: ProfileCacheRef; progress: Progress },
): Promise<LatencyModel> {
  const sizes = upTo(SIZES, deps.nMax);
  const batches = upTo(BATCHES, deps.nMax);
  const host = hostName();
  const prof = await cachedProfile(deps.cacheDir, 'spec-latency', { ...keyParts, kind, host, sizes, batches, ctx: deps.ctx }, async () => {
    const verify: number[][] = [];
    const draft: number[][] = [];
    deps.progress.start(`tree-search: latency on this host (${kind === 'measure' ? 'TS runtime' : 'onnxruntime'})`, deps.ctx.length);
    for (const c of deps.ctx) {
      verify.push(kind === 'measure' ? await measureTs(await deps.target(), c, sizes) : await measureOrt(await deps.engine(), c, sizes));
      draft.push(await measureDraft(deps.draft, c, batches));
      deps.progress.tick();
    }
    deps.progress.done();
    return { meta: { host }, arrays: { verify: Float64Array.from(verify.flat()), draft: Float64Array.from(draft.flat()) } };
  });
  const rows = (flat: Float64Array, w: number) => deps.ctx.map((_, b) => Array.from(flat.subarray(b * w, (b + 1) * w), (x) => Number(x.toFixed(4))));
  return {
    source: kind === 'measure' ? 'measured-ts' : 'measured-ort (draft on the TS runtime)',
    device: host,
    ctx: deps.ctx,
    verifyN: sizes,
    verifyMs: rows(prof.arrays.verify, sizes.length),
    draftBatch: batches,
    draftMs: rows(prof.arrays.draft, batches.length),
    perNodeMs: 0,
    perNnzMs: 0,
  };
}
