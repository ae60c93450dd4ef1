/**
 * Layer-streamed generation (src/exec/stream/decode.ts) against the whole-model Engine, the
 * independent reference (one ONNX graph, weights as initializers): self-generated calibration
 * (temperature-1 sampling from BOS) gives the same tokens on stories260K and dense-28M, directly and
 * through calibrationSet above the streaming threshold; a weight budget of 0 (every piece read again
 * each step) changes nothing but what is read.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { Engine } from '../src/exec/engine/index.js';
import { StreamDecoder, float32Bytes, useStreamSettings, streamSettings } from '../src/exec/stream/index.js';
import { calibrationSet } from '../src/measure/calibration.js';
import { selfGeneratedSequences } from '../src/measure/sequences.js';
import { STORIES } from './stories-engine.js';

const DENSE = path.resolve(__dirname, '../../shared/models/trained/dense-28M');
const saved = { ...streamSettings() };
afterEach(() => useStreamSettings({ aboveBytes: saved.aboveBytes }));

for (const [name, dir, count, length] of [
  ['stories260K', STORIES, 6, 24],
  ['dense-28M', DENSE, 3, 12],
] as const) {
  const present = existsSync(dir);
  if (!present) console.log(`skipping streamed self-generation on ${name}: ${dir} is absent`);
  describe.skipIf(!present)(`streamed self-generation on ${name}`, () => {
    it(`${count} sequences of ${length}: the same tokens as the whole graph's`, async () => {
      const ck = await openCheckpoint(dir);
      try {
        const engine = await Engine.open(ck, { threads: 1 });
        const want = await selfGeneratedSequences(engine, { count, length, seed: 7 });
        await engine.close();
        const decoder = new StreamDecoder(ck, { threads: 1 });
        const got = await selfGeneratedSequences(decoder, { count, length, seed: 7 });
        await decoder.close();
        expect(got).toEqual(want);
        expect(new Set(want.map((w) => w.join(','))).size).toBe(count);
        // within the default budget every piece's weights are read once for all length − 1 steps
        expect(decoder.weightBytesRead).toBeLessThanOrEqual(float32Bytes(ck.spec) + ck.spec.vocabSize * ck.spec.hiddenSize * 4);
        expect(decoder.timings.filter((t) => t.id === 'l0' && t.openMs > 0)).toHaveLength(1);
      } finally {
        await ck.close();
      }
    });
  });
}

describe('streamed self-generation, wiring and budget (stories260K)', () => {
  it('calibrationSet above the streaming threshold samples the same set, with no whole-model engine', async () => {
    const ck = await openCheckpoint(STORIES);
    try {
      const spec = { source: 'self-generated' as const, count: 4, length: 16, seed: 3, heldOut: 2 };
      const whole = await calibrationSet(ck, spec);
      useStreamSettings({ aboveBytes: 0 });
      const streamed = await calibrationSet(ck, spec, { engine: () => Promise.reject(new Error('the whole-model engine was opened')) });
      expect(streamed.calib).toEqual(whole.calib);
      expect(streamed.heldOut).toEqual(whole.heldOut);
    } finally {
      await ck.close();
    }
  });

  it('a weight budget of 0 reads every piece at each step and gives the same tokens', async () => {
    const ck = await openCheckpoint(STORIES);
    try {
      const kept = new StreamDecoder(ck, { threads: 1 });
      const none = new StreamDecoder(ck, { threads: 1, weightBytes: 0 });
      const a = await selfGeneratedSequences(kept, { count: 2, length: 9, seed: 1 });
      const b = await selfGeneratedSequences(none, { count: 2, length: 9, seed: 1 });
      expect(b).toEqual(a);
      // 8 steps (the BOS step and 7 more): 8 sweeps against 1
      expect(none.weightBytesRead).toBe(8 * kept.weightBytesRead);
      await kept.close();
      await none.close();
    } finally {
      await ck.close();
    }
  });
});
