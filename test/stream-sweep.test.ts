/**
 * Reorder's streamed anchor-layer sweep in one visit per block: skipped layers handed on as the
 * identity (no session) give the masked-weights sweep's losses (the layer masked out is the identity
 * exactly, without o/down biases); the activation taps taken on the model's own states in that sweep
 * equal a separate tap sweep's; and a sweep stopped part way (its save throws, as Ctrl-C ends it)
 * continues from the profile cache to the same results, bit for bit (so does a stopped prefill, the
 * evaluation's sweep, from its per-piece profiles); and `llmc compile --passes
 * reorder` streamed (--stream-above 0) writes the whole graph's artifact byte for byte (the same
 * anchors, the same orders). stories260K, in process.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { StreamEngine, type SweepResume } from '../src/exec/stream/engine.js';
import { maskSource, skipLayerMasks } from '../passes/reorder/masks.js';
import { ACTIVATION_TAPS } from '../passes/reorder/importance.js';
import { pieceCache, sweepResume } from '../src/measure/stream-cache.js';
import type { PieceHook } from '../src/exec/stream/engine.js';
import { STORIES, storiesEngine } from './stories-engine.js';
import { llmcInProcess } from './cli.js';

const present = existsSync(STORIES);
if (!present) console.log(`skipping the streamed anchor sweep test: ${STORIES} is absent`);

describe.skipIf(!present)('streamed anchor-layer sweep (stories260K)', () => {
  const stories = storiesEngine();
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-stream-sweep-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  const seqs = (() => {
    let s = 7;
    const V = 512; // stories260K's vocabulary
    return [24, 24, 24, 17].map((T) => Array.from({ length: T }, () => ((s = (s * 1103515245 + 12345) >>> 0), s % V)));
  })();

  test('identity branches, fused taps and a resumed sweep give the separate sweeps\' results', { timeout: 60_000 }, async () => {
    const ck = stories.ck;
    const L = ck.spec.numLayers;
    expect(ck.spec.oBias || ck.spec.mlpBias).toBeFalsy();
    const engine = () => new StreamEngine(ck, { threads: 1, batchTokens: 48 });
    const ref = engine();
    const at = (l: number) => ref.segments.findIndex((g) => g.layer === l);
    const masked = await ref.losses(seqs, Array.from({ length: L }, (_, l) => ({ source: maskSource(ck, skipLayerMasks(ck.spec, l), 'mask'), from: at(l), until: at(l) + 1 })));
    const tapped = await engine().tap(seqs, ACTIVATION_TAPS);

    const skips = Array.from({ length: L }, (_, l) => ({ source: ck, from: at(l), until: at(l) + 1, skip: true }));
    const fused = engine();
    const got = await fused.losses(seqs, skips, { taps: ACTIVATION_TAPS });
    expect(got.base).toBe(masked.base);
    for (let l = 0; l < L; l++) expect(Math.abs(got.branches[l] - masked.branches[l]), `layer ${l}`).toBeLessThan(1e-6 * Math.max(1, masked.branches[l]));
    // no session for a skipped layer: one per layer in all
    expect(fused.timings.filter((t) => t.id.startsWith('l')).length).toBe(L);
    for (const [key, h] of tapped.headOutputs) expect(Array.from(got.taps.headOutputs.get(key)!.sumSq), key).toEqual(Array.from(h.sumSq));
    for (const [key, a] of tapped.mlpActs) expect(Array.from(got.taps.mlpActs.get(key)!.absSum), key).toEqual(Array.from(a.absSum));
    expect(got.taps.headOutputs.size).toBe(L);
    expect(got.taps.tokens).toBe(tapped.tokens);

    // stopped after piece k (its save throws, as Ctrl-C ends the process), then run again on the same cache
    const cache = path.join(tmp, 'cache');
    const pieces = fused.segments.length;
    const store = (await sweepResume(ck, cache, { test: 'anchor' }, pieces))!;
    const k = 2;
    const stopping: SweepResume = {
      load: () => store.load(),
      clear: () => store.clear(),
      save: async (p) => {
        await store.save(p);
        if (p.piece === k) throw new Error('stopped');
      },
    };
    await expect(engine().losses(seqs, skips, { taps: ACTIVATION_TAPS, resume: stopping })).rejects.toThrow('stopped');
    // only the latest point is kept, its hidden states as float32
    expect(readdirSync(cache).filter((f) => f.startsWith('stream-sweep-') && f.endsWith('.json')).length).toBe(1);
    const resumedEngine = engine();
    const resumed = await resumedEngine.losses(seqs, skips, { taps: ACTIVATION_TAPS, resume: store });
    expect(resumed.resumedAt).toBe(k + 1);
    expect(resumedEngine.timings.filter((t) => t.id.startsWith('l')).length).toBe(L - (k + 1 - at(0)));
    expect(resumed.base).toBe(got.base);
    expect(resumed.branches).toEqual(got.branches);
    for (const [key, h] of got.taps.headOutputs) expect(Array.from(resumed.taps.headOutputs.get(key)!.sumSq), key).toEqual(Array.from(h.sumSq));
    for (const [key, a] of got.taps.mlpActs) expect(Array.from(resumed.taps.mlpActs.get(key)!.absSum), key).toEqual(Array.from(a.absSum));
    // the finished sweep's point is removed
    expect(readdirSync(cache).filter((f) => f.startsWith('stream-sweep-')).length).toBe(0);
  });

  test('reorder streamed decides as the whole graph: the same artifact', { timeout: 60_000 }, async () => {
    const out = (above: string) => path.join(tmp, `reorder-${above}`);
    // calibration ids given (sampling them from the model would take most of the test's time)
    const ids = path.join(tmp, 'calib.json');
    writeFileSync(ids, JSON.stringify([...seqs, ...seqs.map((q) => [...q].reverse())].map((q) => q.slice(0, 16))));
    for (const above of ['0', '8G']) {
      const r = await llmcInProcess('compile', STORIES, '--target', 'ts', '--quant', 'Q8_0', '--passes', 'reorder', '--levels', '0.5,1', '--opt', 'reorder.recover=none', '--opt', `reorder.calibText=${ids}`, '--opt', 'reorder.calib=6', '--opt', 'reorder.heldOut=2', '--opt', 'reorder.evaluate=false', '--opt', 'reorder.calibLength=16', '--stream-above', above, '--cache-dir', path.join(tmp, `cache-${above}`), '-o', out(above), '--json');
      expect(r.code, r.stderr).toBe(0);
    }
    for (const f of ['weights.bin', 'llmc-manifest.json']) expect(readFileSync(path.join(out('0'), f)).equals(readFileSync(path.join(out('8G'), f))), f).toBe(true);
  });

  test('a stopped prefill resumes from the stored pieces: the same logits, the finished pieces not run again', { timeout: 60_000 }, async () => {
    const ck = stories.ck;
    const windows = seqs.slice(0, 3);
    const logitsOf = async (e: StreamEngine) => {
      const p = await e.prefill(windows);
      try {
        return await Promise.all(windows.map((_, i) => p.logits(i).then((x) => Array.from(x))));
      } finally {
        await p.close();
      }
    };
    const want = await logitsOf(new StreamEngine(ck, { threads: 1 }));
    const cache = path.join(tmp, 'prefill-cache');
    const hook = (await pieceCache(ck, cache))!;
    let stored = 0;
    const stopping: PieceHook = async (seg, taps, ids, run) => {
      if (stored === 2) throw new Error('stopped');
      const r = await hook(seg, taps, ids, run);
      stored++;
      return r;
    };
    await expect(new StreamEngine(ck, { threads: 1, pieces: stopping }).prefill(windows)).rejects.toThrow('stopped');
    const resumed = new StreamEngine(ck, { threads: 1, pieces: hook });
    expect(await logitsOf(resumed)).toEqual(want);
    // layers 0 and 1 came from the cache (the embedding is a copy of table rows, never stored): only the later layers ran
    expect(resumed.timings.filter((t) => t.id.startsWith('l')).length).toBe(ck.spec.numLayers - 2);
  });
});
