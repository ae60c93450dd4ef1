/**
 * The passes' remaining measurements layer-streamed (src/exec/stream) against the whole-model
 * Engine, the independent reference: reorder's anchor-layer losses (each layer replaced by identity)
 * and the base loss, to float32 rounding, on stories260K, dense-28M and moe-8x; and the evaluation's
 * streamed source logits computed in a child process (llmc's build) equal the whole graph's.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { Engine } from '../src/exec/engine/index.js';
import { StreamEngine } from '../src/exec/stream/engine.js';
import { maskedLoss, maskSource, skipLayerMasks } from '../passes/reorder/masks.js';
import { STORIES } from './stories-engine.js';
import { ensureBuilt } from './build-once.js';
import { pathToFileURL } from 'node:url';
import { llmcInProcess } from './cli.js';
import { available, streamDevice, useStreamDevice } from '../src/exec/stream/device.js';
import { promises as fsp } from 'node:fs';
import os from 'node:os';

const TRAINED = path.resolve(__dirname, '../../shared/models/trained');

for (const [name, dir] of [
  ['stories260K', STORIES],
  ['dense-28M', path.join(TRAINED, 'dense-28M')],
  ['moe-8x', path.join(TRAINED, 'moe-8x')],
] as const) {
  const present = existsSync(dir);
  if (!present) console.log(`skipping the streamed pass measurements on ${name}: ${dir} is absent`);
  describe.skipIf(!present)(`streamed pass measurements on ${name}`, () => {
    let ck: Checkpoint;
    beforeAll(async () => {
      ck = await openCheckpoint(dir);
    });
    afterAll(async () => {
      await ck?.close();
    });

    const windows = (n: number, T: number, seed: number) => {
      let s = seed;
      return Array.from({ length: n }, () =>
        Array.from({ length: T }, () => {
          s = (s * 1103515245 + 12345) >>> 0;
          return s % ck.spec.vocabSize;
        }),
      );
    };

    test('anchor-layer losses: one streamed sweep equals the whole graph with each layer masked out', async () => {
      const seqs = [...windows(2, 24, 5), ...windows(1, 17, 9)];
      const L = ck.spec.numLayers;
      const engine = await Engine.open(ck, { threads: 1 });
      const base = Math.log(await engine.perplexity(seqs));
      await engine.close();
      // the whole-graph reference builds a model per layer: every layer on stories260K, the first and last elsewhere (test time)
      const checked = name === 'stories260K' ? Array.from({ length: L }, (_, l) => l) : [0, L - 1];
      const want = new Map<number, number>();
      for (const l of checked) want.set(l, await maskedLoss(ck, skipLayerMasks(ck.spec, l), seqs));
      const stream = new StreamEngine(ck, { threads: 1, batchTokens: 48 });
      const at = (l: number) => stream.segments.findIndex((g) => g.layer === l);
      const got = await stream.losses(seqs, Array.from({ length: L }, (_, l) => ({ source: maskSource(ck, skipLayerMasks(ck.spec, l), 'mask'), from: at(l), until: at(l) + 1 })));
      expect(Math.abs(got.base - base)).toBeLessThan(1e-5 * Math.max(1, base));
      for (const [l, w] of want) expect(Math.abs(got.branches[l] - w), `layer ${l}`).toBeLessThan(1e-5 * Math.max(1, w));
      // the layers matter differently: a sweep that mixed the branches up would not give these
      expect(new Set(got.branches.map((x) => x.toFixed(6))).size).toBe(L);
      // one session per piece for the model, one more per skipped layer: L²/2 layer runs, not L forwards
      expect(stream.timings.filter((t) => t.id.startsWith('l')).length).toBe(2 * L);
    });
  });
}

describe("the evaluation's streamed source logits in a child process", () => {
  test('stories260K: every window equals the whole graph, its progress drawn by the parent', async () => {
    ensureBuilt();
    const ref = (await import(pathToFileURL(path.resolve(__dirname, '../dist/src/measure/source-logits.js')).href)) as typeof import('../src/measure/source-logits.js');
    const built = (await import(pathToFileURL(path.resolve(__dirname, '../dist/src/core/checkpoint/index.js')).href)) as typeof import('../src/core/checkpoint/index.js');
    const ck = await built.openCheckpoint(STORIES);
    const windows = [0, 1, 2].map((k) => Array.from({ length: 20 }, (_, t) => (t * 37 + k * 101 + 1) % ck.spec.vocabSize));
    const ticks: string[] = [];
    const progress = { start: (l: string) => ticks.push(l), tick: () => {}, done: () => {} };
    const got = await ref.sourceLogits(ck, windows, { stream: true, threads: 1, progress });
    const engine = await Engine.open(ck, { threads: 1 });
    try {
      expect(got.executor).toBe('onnxruntime, layer-streamed');
      // the child's progress is drawn by the parent
      expect(ticks.some((l) => l.startsWith("quality: the source's head"))).toBe(true);
      for (const w of windows) {
        const [a, b] = [await got.logits(w), await engine.logits(w)];
        let worst = 0;
        for (let i = 0; i < b.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]) / (1e-4 + 1e-4 * Math.abs(b[i])));
        expect(worst).toBeLessThanOrEqual(1);
      }
    } finally {
      await got.close();
      await engine.close();
      await ck.close();
    }
  }, 120_000);
});

describe('--device: the streamed pieces\' execution provider', () => {
  test('cpu runs (the same losses); a device onnxruntime-node lacks, or an unknown one, is refused in one line before any work', async () => {
    expect(available()).toContain('cpu');
    const ck = await openCheckpoint(STORIES);
    const seqs = [Array.from({ length: 12 }, (_, t) => (t * 13 + 1) % ck.spec.vocabSize)];
    try {
      const engine = await Engine.open(ck, { threads: 1 });
      const want = Math.log(await engine.perplexity(seqs));
      await engine.close();
      expect(Math.abs((await new StreamEngine(ck, { threads: 1, device: 'cpu' }).losses(seqs)).base - want)).toBeLessThan(1e-5);
    } finally {
      await ck.close();
    }
    const tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-device-'));
    try {
      const missing = (['coreml', 'dml', 'cuda'] as const).find((d) => !available().includes(d))!;
      for (const [device, says] of [
        ['tpu', '--device must be one of cpu, cuda, coreml, dml, got "tpu"'],
        [missing, `--device ${missing}: the installed onnxruntime-node has no ${missing} execution provider`],
      ] as const) {
        const r = await llmcInProcess('compile', STORIES, '--target', 'gguf', '--quant', 'Q8_0', '-o', path.join(tmp, 'x.gguf'), '--device', device);
        expect(r.code).toBe(2);
        expect(r.stderr.trim().split('\n')).toHaveLength(1);
        expect(r.stderr).toContain(says);
        expect(await fsp.readdir(tmp)).toEqual([]);
      }
      const ok = await llmcInProcess('compile', STORIES, '--target', 'gguf', '--quant', 'Q8_0', '-o', path.join(tmp, 'x.gguf'), '--device', 'cpu');
      expect(ok.code).toBe(0);
      // llmcInProcess runs the built CLI (test/cli.ts): its device is dist's module's, not this file's import's.
      const cliDevice = (await import(pathToFileURL(path.resolve(__dirname, '../dist/src/exec/stream/device.js')).href)) as typeof import('../src/exec/stream/device.js');
      expect(cliDevice.streamDevice()).toBe('cpu');
      expect(streamDevice()).toBe('cpu');
    } finally {
      useStreamDevice('cpu');
      await fsp.rm(tmp, { recursive: true, force: true });
    }
  }, 60_000);
});
