/**
 * tree-search's skip draft beside a layer-streamed target (passes/tree-search): its float32 model is
 * built only when asked (`ready()`: after the target's streamed continuations, so the two never
 * peak together), gives the same ranks as the draft cut from the whole target, and lends itself to
 * the latency pricing of the target's first two layers (one float32 copy of them, not two).
 */
import path from 'node:path';
import os from 'node:os';
import { promises as fsp } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { firstLayers } from '../src/core/checkpoint/layers.js';
import { silentProgress } from '../src/core/util/progress.js';
import { streamSettings, useStreamSettings } from '../src/exec/stream/index.js';
import { modelFromTensors } from '../src/exec/runtime/memory.js';
import { Engine } from '../src/exec/engine/index.js';
import { parseTreeSearchOptions } from '../passes/tree-search/options.js';
import { rankProfile, resolveDraft } from '../passes/tree-search/profile.js';
import { measuredLatency } from '../passes/tree-search/latency.js';
import { STORIES } from './stories-engine.js';

let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-draft-stream-'));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

/** Run `f` with every model streamed (as `--stream-above 0`). */
async function streamedAll<T>(f: () => Promise<T>): Promise<T> {
  const before = streamSettings().aboveBytes;
  useStreamSettings({ aboveBytes: 0 });
  try {
    return await f();
  } finally {
    useStreamSettings({ aboveBytes: before });
  }
}

describe('a streamed target\'s skip draft (stories260K, --stream-above 0)', () => {
  it('is built at ready(), not at resolve, and ranks as the draft cut from the whole target', async () => {
    const ck = await openCheckpoint(STORIES);
    try {
      const o = parseTreeSearchOptions({ calib: '4', heldOut: '2', calibLength: '6', generate: '12', draftSkip: '2,3,4' });
      let engine: Promise<Engine> | undefined;
      const open = () => (engine ??= Engine.open(ck));
      // the reference: the whole target without layers 2-4, ranks along whole-graph continuations
      const whole = await resolveDraft(o.draft, ck, [], () => modelFromTensors(ck));
      const ref = await rankProfile(ck, whole, o, { cacheDir: path.join(tmp, 'whole'), progress: silentProgress, engine: open, stream: false });
      const lazy = await streamedAll(() => resolveDraft(o.draft, ck, [], () => Promise.reject(new Error('the whole target was loaded')), new Map(), { lazy: true }));
      expect(() => lazy.drafter).toThrow(/before ready/);
      const streamed = await streamedAll(() => rankProfile(ck, lazy, o, { cacheDir: path.join(tmp, 'streamed'), progress: silentProgress, engine: open, stream: true }));
      expect(lazy.drafter.model.spec.numLayers).toBe(2);
      expect(streamed.sequences).toEqual(ref.sequences);
      expect(streamed.ranks).toEqual(ref.ranks);
      expect(streamed.heldOut).toEqual(ref.heldOut);
      await (await engine)?.close();
    } finally {
      await ck.close();
    }
  });

  it('lends its layers 0-1 to the latency pricing: no block of the target is read again', async () => {
    const ck = await openCheckpoint(STORIES);
    try {
      const o = parseTreeSearchOptions({ draftSkip: '2,3,4' });
      const draft = await streamedAll(() => resolveDraft(o.draft, ck, [], () => Promise.reject(new Error('the whole target was loaded')), new Map(), { lazy: true }));
      const opened: number[] = [];
      const target = { blocks: (k: 1 | 2) => (opened.push(k), firstLayers(ck, k)), layers: ck.spec.numLayers, twoLayers: async () => (await draft.ready()).model };
      const lat = await measuredLatency('measure', { checkpoint: 'stories-lent' }, { target, draft: await draft.ready(), nMax: 4, ctx: [8, 16], progress: silentProgress });
      expect(opened).toEqual([]);
      expect(lat.source).toMatch(/scaled from layers 0-1 to 5/);
      expect(lat.verifyMs.map((r) => r.length)).toEqual([4, 4]);
      for (const row of lat.verifyMs) for (let i = 1; i < row.length; i++) expect(row[i]).toBeGreaterThanOrEqual(row[i - 1]);
    } finally {
      await ck.close();
    }
  });
});
