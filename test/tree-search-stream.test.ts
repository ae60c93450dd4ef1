/**
 * tree-search's traces layer-streamed (src/exec/stream; forced here, automatic above 1 GiB of
 * float32 weights): the target's greedy continuations from StreamEngine.greedy (each layer's KV cache
 * kept between the per-token sweeps) against the whole-model Engine's session steps, the
 * independent reference, on stories260K, dense-28M and moe-8x; on stories260K the whole rank
 * profile (sequences and the draft's ranks) is the same.
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { argmax } from '../src/core/sampling.js';
import { silentProgress } from '../src/core/util/progress.js';
import { Engine } from '../src/exec/engine/index.js';
import { StreamEngine } from '../src/exec/stream/engine.js';
import { streamSettings, useStreamSettings } from '../src/exec/stream/index.js';
import { modelFromTensors } from '../src/exec/runtime/memory.js';
import { parseTreeSearchOptions } from '../passes/tree-search/options.js';
import { rankProfile, resolveDraft } from '../passes/tree-search/profile.js';
import { measuredLatency, scaleLayers } from '../passes/tree-search/latency.js';
import { firstLayers, layersOf } from '../src/core/checkpoint/layers.js';
import { STORIES } from './stories-engine.js';

const TRAINED = path.resolve(__dirname, '../../shared/models/trained');
let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-tree-stream-'));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

/** The whole-model Engine's greedy continuation (as rankProfile runs it). */
async function engineGreedy(engine: Engine, prompts: number[][], G: number): Promise<number[][]> {
  const session = engine.session(prompts.length);
  const out = prompts.map(() => [] as number[]);
  let logits = await session.step(prompts);
  for (let g = 0; g < G; g++) {
    const next = logits.map((l) => argmax(l));
    next.forEach((id, b) => out[b].push(id));
    if (g + 1 < G) logits = await session.step(next.map((id) => [id]));
  }
  return out;
}

for (const [name, dir, G] of [
  ['stories260K', STORIES, 24],
  ['dense-28M', path.join(TRAINED, 'dense-28M'), 12],
  ['moe-8x', path.join(TRAINED, 'moe-8x'), 12],
] as const) {
  const present = existsSync(dir);
  if (!present) console.log(`skipping the streamed greedy continuation on ${name}: ${dir} is absent`);
  describe.skipIf(!present)(`streamed greedy continuation on ${name}`, () => {
    it(`${G} tokens for 3 prompts: the same ids as the whole graph's session`, async () => {
      const ck = await openCheckpoint(dir);
      try {
        const V = ck.spec.vocabSize;
        // prompts that differ, so a mixed-up batch or KV cache shows
        const prompts = [0, 1, 2].map((k) => Array.from({ length: 7 }, (_, t) => (t * 131 + k * 977 + 3) % V));
        const engine = await Engine.open(ck, { threads: 1 });
        const want = await engineGreedy(engine, prompts, G);
        await engine.close();
        const stream = new StreamEngine(ck, { threads: 1 });
        const got = await stream.greedy(prompts, G);
        expect(got).toEqual(want);
        expect(new Set(want.map((w) => w.join(','))).size).toBeGreaterThan(1);
        // each layer's session built once (its weights fed), run once per step: the prompt and G − 1 one-token steps
        expect(stream.timings.filter((t) => t.id === 'l0' && t.openMs > 0).length).toBe(1);
        expect(stream.timings.filter((t) => t.id === 'l0').length).toBe(G + 1);
        expect(stream.activationBytes).toBe(2 * ck.spec.numLayers * 3 * ck.spec.numKvHeads * (7 + G - 1) * ck.spec.headDim * 4);
      } finally {
        await ck.close();
      }
    });
  });
}

describe('rank profile on stories260K, streamed and whole-graph', () => {
  it('the same continuations and draft ranks (a skip-layer draft)', async () => {
    const ck = await openCheckpoint(STORIES);
    try {
      const o = parseTreeSearchOptions({ calib: '4', heldOut: '2', calibLength: '6', generate: '12', draftSkip: '2,3' });
      let target: ReturnType<typeof modelFromTensors> | undefined;
      const draft = await resolveDraft(o.draft, ck, [], () => (target ??= modelFromTensors(ck)));
      let engine: Promise<Engine> | undefined;
      const open = () => (engine ??= Engine.open(ck));
      const whole = await rankProfile(ck, draft, o, { cacheDir: path.join(tmp, 'whole'), progress: silentProgress, engine: open, stream: false });
      const streamed = await rankProfile(ck, draft, o, { cacheDir: path.join(tmp, 'streamed'), progress: silentProgress, engine: open, stream: true });
      expect(streamed.sequences).toEqual(whole.sequences);
      expect(streamed.ranks).toEqual(whole.ranks);
      expect(streamed.heldOut).toEqual(whole.heldOut);
      await (await engine)?.close();
    } finally {
      await ck.close();
    }
  });
});

describe('a streamed target is never loaded whole (stories260K)', () => {
  it('a skip-layer draft from the kept layers alone gives the same logits as the target without them', async () => {
    const ck = await openCheckpoint(STORIES);
    try {
      const L = ck.spec.numLayers;
      const kept = [0, 2].filter((l) => l < L);
      const skip = Array.from({ length: L }, (_, l) => l).filter((l) => !kept.includes(l));
      const whole = (await modelFromTensors(ck)).withoutLayers(skip);
      const alone = await modelFromTensors(layersOf(ck, kept));
      expect(alone.spec.numLayers).toBe(kept.length);
      const ids = [1, 50, 300, 7, 99, 12];
      const a = whole.forward(ids, whole.newCache(), { logitRows: ids.map((_, i) => i) });
      const b = alone.forward(ids, alone.newCache(), { logitRows: ids.map((_, i) => i) });
      expect(Array.from(b)).toEqual(Array.from(a));
    } finally {
      await ck.close();
    }
  });

  it('the latency of a streamed target is priced from its first one and two layers and scaled', async () => {
    expect(scaleLayers([2, 3], [3, 3], 10)).toEqual([2 + 9 * 1, 3]);
    const ck = await openCheckpoint(STORIES);
    try {
      const o = parseTreeSearchOptions({ draftSkip: '1,2,3,4' });
      // streamed (as above 1 GiB): the draft is built without the whole target
      const before = streamSettings().aboveBytes;
      useStreamSettings({ aboveBytes: 0 });
      const draft = await resolveDraft(o.draft, ck, [], () => Promise.reject(new Error('the whole target was loaded'))).finally(() => useStreamSettings({ aboveBytes: before }));
      const opened: number[] = [];
      const target = { blocks: (k: 1 | 2) => (opened.push(k), firstLayers(ck, k)), layers: ck.spec.numLayers };
      const lat = await measuredLatency('measure', { checkpoint: 'stories' }, { target, draft: draft.drafter, nMax: 4, ctx: [8, 16], progress: silentProgress });
      expect(opened).toEqual([1, 2]);
      expect(lat.source).toMatch(/scaled from layers 0-1 to 5/);
      expect(lat.verifyMs.map((r) => r.length)).toEqual([4, 4]);
      for (const row of lat.verifyMs) for (let i = 1; i < row.length; i++) expect(row[i]).toBeGreaterThanOrEqual(row[i - 1]);
    } finally {
      await ck.close();
    }
  });
});
