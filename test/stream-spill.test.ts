/**
 * The streamed executor's hidden states spilled to disk beyond a memory budget (src/exec/stream/spill.ts):
 * with a budget of a few bytes every batch's states go through the spill file, and tap statistics,
 * prefill logits and losses are bit-identical to the run that holds them all in memory; the spill
 * files are gone afterwards. And the sweep's status per piece ("block k/L · N s left").
 */
import { existsSync, promises as fsp, readdirSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { StreamEngine } from '../src/exec/stream/engine.js';
import { parseBytes } from '../src/exec/stream/spill.js';
import type { TapResult } from '../src/exec/engine/taps.js';
import type { Progress } from '../src/core/util/progress.js';
import { maskSource, skipLayerMasks } from '../passes/reorder/masks.js';
import { STORIES } from './stories-engine.js';

/** Every statistic of `a` equals `b`'s exactly. */
function identicalTaps(a: TapResult, b: TapResult): void {
  expect(a.tokens).toBe(b.tokens);
  expect(a.batches).toEqual(b.batches);
  for (const k of ['linearInputs', 'linearOutputs', 'headOutputs', 'mlpActs'] as const) {
    const x = a[k] as unknown as Map<string, unknown>;
    const y = b[k] as typeof x;
    expect([...x.keys()].sort()).toEqual([...y.keys()].sort());
    for (const [key, v] of y) expect(x.get(key), key).toEqual(v);
  }
}

describe('spilling the carried hidden states', () => {
  let ck: Checkpoint;
  let tmp: string;
  beforeAll(async () => {
    ck = await openCheckpoint(STORIES);
    tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-spill-test-'));
  });
  afterAll(async () => {
    await ck?.close();
    await fsp.rm(tmp, { recursive: true, force: true });
  });
  // three lengths, batches of 2 sequences: several batches per piece, some in memory and some spilled at a mid budget
  const ids = [
    [1, 5, 9, 33, 7, 2, 8, 100],
    [1, 40, 41, 42, 3, 5, 6, 7],
    [9, 8, 7, 6, 5, 4, 3, 2],
    [3, 3, 3, 4, 4, 4, 5],
    [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21],
  ];
  const engines = (budget: number) => {
    const dir = path.join(tmp, `spill-${budget}`);
    return {
      dir,
      held: new StreamEngine(ck, { threads: 1, batchTokens: 16, spill: { memoryBytes: 2 ** 40 } }),
      spilled: new StreamEngine(ck, { threads: 1, batchTokens: 16, spill: { memoryBytes: budget, dir } }),
    };
  };

  test('tap statistics are identical with every batch spilled and with some spilled; no spill file is left', async () => {
    const specs = [{ kind: 'head-output' as const }, { kind: 'mlp-act' as const }, { kind: 'linear-input' as const, sums: true, top: 4 }];
    const disk: number[] = [];
    let activations = 0;
    for (const budget of [1, 3000]) {
      const { dir, held, spilled } = engines(budget);
      const want = await held.tap(ids, specs);
      expect(held.spilledBytes).toBe(0);
      identicalTaps(await spilled.tap(ids, specs), want);
      expect(spilled.activationBytes).toBe(held.activationBytes);
      disk.push(spilled.spilledBytes);
      activations = held.activationBytes;
      expect(readdirSync(dir)).toEqual([]);
    }
    // all spilled: every state on disk (two pieces' files); some held: less on disk
    expect(activations).toBeGreaterThan(0);
    expect(disk[0]).toBeGreaterThanOrEqual(activations);
    expect(disk[1]).toBeGreaterThan(0);
    expect(disk[1]).toBeLessThan(disk[0]);
  });

  test('prefill logits and losses (model and skipped-layer branches) are identical spilled', async () => {
    const { dir, held, spilled } = engines(1);
    const a = await held.prefill(ids);
    const b = await spilled.prefill(ids);
    for (let i = 0; i < ids.length; i++) expect(await b.logits(i)).toEqual(await a.logits(i));
    expect(existsSync(dir) && readdirSync(dir).length).toBe(1); // the spill directory lives until close()
    await a.close();
    await b.close();
    expect(readdirSync(dir)).toEqual([]);
    const L = ck.spec.numLayers;
    const at = (e: StreamEngine, l: number) => e.segments.findIndex((g) => g.layer === l);
    const branches = (e: StreamEngine) => Array.from({ length: L }, (_, l) => ({ source: maskSource(ck, skipLayerMasks(ck.spec, l), 'mask'), from: at(e, l), until: at(e, l) + 1 }));
    const want = await held.losses(ids, branches(held));
    expect(await spilled.losses(ids, branches(spilled))).toEqual(want);
    expect(spilled.spilledBytes).toBeGreaterThan(0);
    expect(readdirSync(dir)).toEqual([]);
  });

  test('the sweep says which block it runs and, after the first, the time left', async () => {
    const said: string[] = [];
    const progress: Progress = { start() {}, tick() {}, done() {}, status: (t) => said.push(t) };
    const L = ck.spec.numLayers;
    await new StreamEngine(ck, { threads: 1, progress }).tap(ids, [{ kind: 'linear-input' as const, sums: true }]);
    expect(said[0]).toBe('embedding');
    expect(said[1]).toBe(`block 1/${L}`); // nothing computed yet to estimate from
    expect(said[2]).toMatch(new RegExp(`^block 2/${L} · \\d+ s left$`));
    expect(said.slice(1, L + 1).map((s) => s.split(' · ')[0])).toEqual(Array.from({ length: L }, (_, l) => `block ${l + 1}/${L}`));
  });

  test('sizes of --stream-memory', () => {
    expect(parseBytes('--stream-memory', '512M')).toBe(512 * 2 ** 20);
    expect(parseBytes('--stream-memory', '1.5G')).toBe(1.5 * 2 ** 30);
    expect(parseBytes('--stream-memory', '4096')).toBe(4096);
    expect(() => parseBytes('--stream-memory', 'lots')).toThrow('--stream-memory must be a size such as 512M or 2G, got "lots"');
  });
});
