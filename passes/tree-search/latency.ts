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
import type { ModelSource } from '../../src/core/checkpoint/source.js';

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

/** How a step is measured: on the whole target, or on its first one and two layers, scaled to `layers` (a streamed target). */
export type TargetRef =
  | { whole: () => Promise<Model>; engine: () => Promise<Engine> }
  | { blocks: (k: 1 | 2) => ModelSource; layers: number; /** The first two layers already built (a skip draft that keeps them): not loaded twice. */ twoLayers?: () => Promise<Model> };

/** T(L) = T1 + (L − 1)·max(0, T2 − T1), entry by entry: a step of L layers from steps of one and two. */
export const scaleLayers = (t1: number[], t2: number[], L: number): number[] => t1.map((a, i) => a + (L - 1) * Math.max(0, t2[i] - a));

export async function measuredLatency(
  kind: 'measure' | 'measure-ort',
  keyParts: Record<string, unknown>,
  deps: { target: TargetRef; draft: Drafter; nMax: number; ctx: number[]; cacheDir?: ProfileCacheRef; progress: Progress },
): Promise<LatencyModel> {
  const sizes = upTo(SIZES, deps.nMax);
  const batches = upTo(BATCHES, deps.nMax);
  const host = hostName();
  const target = deps.target;
  const scaled = 'blocks' in target;
  const prof = await cachedProfile(deps.cacheDir, 'spec-latency', { ...keyParts, kind, host, sizes, batches, ctx: deps.ctx, ...(scaled ? { scaledFrom: 'layers 0-1' } : {}) }, async () => {
    let verify: number[][] = [];
    const draft: number[][] = [];
    deps.progress.start(`tree-search: latency on this host (${kind === 'measure' ? 'TS runtime' : 'onnxruntime'}${scaled ? ', one and two layers, scaled' : ''})`, deps.ctx.length * (scaled ? 3 : 1));
    if (scaled) {
      // a streamed target: its first one, then two layers (one of them held at a time), every context each
      const { modelFromTensors } = await import('../../src/exec/runtime/memory.js');
      const { Engine } = await import('../../src/exec/engine/index.js');
      const on = async (k: 1 | 2): Promise<number[][]> => {
        const out: number[][] = [];
        if (kind === 'measure') {
          // a draft that keeps layers 0-1 lends its float32 copy: layer 0 alone runs on it with layer 1 skipped
          const lent = target.twoLayers;
          const m = lent ? (k === 2 ? await lent() : (await lent()).withoutLayers([1])) : await modelFromTensors(target.blocks(k));
          for (const c of deps.ctx) {
            out.push(await measureTs(m, c, sizes));
            deps.progress.tick();
          }
          return out;
        }
        const e = await Engine.open(target.blocks(k));
        try {
          for (const c of deps.ctx) {
            out.push(await measureOrt(e, c, sizes));
            deps.progress.tick();
          }
        } finally {
          await e.close();
        }
        return out;
      };
      const t1 = await on(1);
      const t2 = await on(2);
      verify = t1.map((row, b) => cumMax(scaleLayers(row, t2[b], target.layers)));
    }
    for (const c of deps.ctx) {
      if (!scaled) verify.push(kind === 'measure' ? await measureTs(await target.whole(), c, sizes) : await measureOrt(await target.engine(), c, sizes));
      draft.push(await measureDraft(deps.draft, c, batches));
      deps.progress.tick();
    }
    deps.progress.done();
    return { meta: { host }, arrays: { verify: Float64Array.from(verify.flat()), draft: Float64Array.from(draft.flat()) } };
  });
  const rows = (flat: Float64Array, w: number) => deps.ctx.map((_, b) => Array.from(flat.subarray(b * w, (b + 1) * w), (x) => Number(x.toFixed(4))));
  return {
    source: (kind === 'measure' ? 'measured-ts' : 'measured-ort (draft on the TS runtime)') + (scaled ? `, scaled from layers 0-1 to ${target.layers}` : ''),
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
