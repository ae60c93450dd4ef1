/**
 * The layer-streaming executor (src/exec/stream) against the whole-model Engine: the same logits and
 * the same calibration statistics to float32 rounding, on stories260K and dense-28M (bf16, tied).
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { normalizeConfig, openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { Engine, type TapResult } from '../src/exec/engine/index.js';
import { StreamEngine } from '../src/exec/stream/engine.js';
import { streamSegments } from '../src/core/ir/segments.js';
import { buildModel } from '../src/core/ir/build.js';
import { STORIES } from './stories-engine.js';
import { evaluateArtifact, heldOutSet } from '../src/app/evaluate/artifact.js';
import { locate } from '../src/app/artifact.js';
import { float32Bytes, STREAM_ABOVE_BYTES } from '../src/exec/stream/size.js';
import { llmcInProcess } from './cli.js';
import { activationScores } from '../passes/reorder/importance.js';
import { measureLinears } from '../passes/outliers/measure.js';
import { pieceCache } from '../src/measure/stream-cache.js';
import type { PieceHook } from '../src/exec/stream/engine.js';
import { promises as fsp } from 'node:fs';
import os from 'node:os';

const DENSE = path.resolve(__dirname, '../../shared/models/trained/dense-28M');

/** |a − b| ≤ atol + rtol·|b| everywhere; returns the largest violation ratio (≤ 1 passes). */
function closeness(a: ArrayLike<number>, b: ArrayLike<number>, rtol: number, atol: number): number {
  expect(a.length).toBe(b.length);
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]) / (atol + rtol * Math.abs(b[i])));
  return worst;
}

function sameTaps(got: TapResult, want: TapResult): void {
  expect(got.tokens).toBe(want.tokens);
  expect(got.batches).toEqual(want.batches);
  for (const k of ['linearInputs', 'linearOutputs', 'headOutputs', 'mlpActs'] as const) {
    const g = got[k] as Map<string, { tokens: number; absMax?: Float32Array; sumSq?: Float64Array; absSum?: Float64Array }>;
    const w = want[k] as typeof g;
    expect([...g.keys()].sort()).toEqual([...w.keys()].sort());
    for (const [key, s] of w) {
      const t = g.get(key)!;
      expect(t.tokens).toBe(s.tokens);
      if (s.absMax) expect(closeness(t.absMax!, s.absMax, 1e-4, 1e-6)).toBeLessThanOrEqual(1);
      if (s.sumSq) expect(closeness(t.sumSq!, s.sumSq, 1e-4, 1e-6)).toBeLessThanOrEqual(1);
      if (s.absSum) expect(closeness(t.absSum!, s.absSum, 1e-4, 1e-6)).toBeLessThanOrEqual(1);
    }
  }
}

for (const [name, dir] of [
  ['stories260K', STORIES],
  ['dense-28M', DENSE],
] as const) {
  const present = existsSync(dir);
  if (!present) console.log(`skipping the ${name} streaming tests: ${dir} is absent`);
  describe.skipIf(!present)(`streamed vs whole-graph on ${name}`, () => {
    let ck: Checkpoint;
    let engine: Engine;
    beforeAll(async () => {
      ck = await openCheckpoint(dir);
      engine = await Engine.open(ck, { threads: 1 });
    });
    afterAll(async () => {
      await engine?.close();
      await ck?.close();
    });

    const windows = (n: number, T: number, seed: number) => {
      let s = seed;
      const V = ck.spec.vocabSize;
      return Array.from({ length: n }, () =>
        Array.from({ length: T }, () => {
          s = (s * 1103515245 + 12345) >>> 0;
          return s % V;
        }),
      );
    };

    test('the pieces cover every op once, in order, and carry l<ℓ>.out', () => {
      const g = buildModel(ck.spec);
      const segs = streamSegments(g);
      expect(segs.map((s) => s.id)).toEqual(['embed', ...Array.from({ length: ck.spec.numLayers }, (_, l) => `l${l}`), 'head']);
      expect(segs.flatMap((s) => s.graph.ops)).toEqual(g.ops);
      expect(segs[1].carriedIn).toEqual(['h0']);
      expect(segs[2].carriedIn).toEqual(['l0.out']);
      expect(segs[segs.length - 1].graph.outputs).toEqual(['logits']);
      expect(segs.flatMap((s) => s.graph.taps).length).toBe(g.taps.length);
    });

    test('logits at every position equal the whole graph to float32 rounding', async () => {
      const ws = windows(5, 24, 7);
      const stream = new StreamEngine(ck, { threads: 1, batchTokens: 48 });
      const got = await stream.prefill(ws);
      try {
        for (let i = 0; i < ws.length; i++) {
          const want = await engine.logits(ws[i]);
          expect(closeness(await got.logits(i), want, 1e-4, 1e-4)).toBeLessThanOrEqual(1);
        }
        expect(got.activationBytes).toBe(5 * 24 * ck.spec.hiddenSize * 4);
      } finally {
        await got.close();
      }
    });

    test('calibration statistics (every tap kind the passes use) equal Engine.tap', async () => {
      const ws = [...windows(3, 16, 3), ...windows(2, 9, 5)];
      const specs = [{ kind: 'head-output' as const }, { kind: 'mlp-act' as const }, { kind: 'linear-input' as const, sums: true, top: 8 }, { kind: 'linear-output' as const }];
      const want = await engine.tap(ws, specs);
      const got = await new StreamEngine(ck, { threads: 1 }).tap(ws, specs);
      sameTaps(got, want);
      for (const [key, s] of want.linearInputs) {
        const t = got.linearInputs.get(key)!;
        expect(closeness(t.sum!, s.sum!, 1e-4, 1e-5)).toBeLessThanOrEqual(1);
        expect(closeness(t.top!.values, s.top!.values, 1e-4, 1e-6)).toBeLessThanOrEqual(1);
      }
    });

    test("the passes' statistics: reorder's activation importance and outliers' linear profiles equal the whole graph's", async () => {
      const calib = windows(6, 32, 11);
      const stream = new StreamEngine(ck, { threads: 1 });
      const [a, b] = [await activationScores(engine, calib), await activationScores(stream, calib)];
      for (let l = 0; l < ck.spec.numLayers; l++) expect(closeness(b.head[l], a.head[l], 1e-4, 1e-6)).toBeLessThanOrEqual(1);
      for (const [k, v] of Object.entries(a.mlp)) expect(closeness(b.mlp[k], v, 1e-4, 1e-6)).toBeLessThanOrEqual(1);
      const graph = buildModel(ck.spec);
      const set = { calib, key: 'stream-test' };
      const [x, y] = [await measureLinears(ck, graph, set, { engine: async () => engine }), await measureLinears(ck, graph, set, { engine: async () => stream })];
      expect(y.map((r) => `${r.weight}|${r.side}`)).toEqual(x.map((r) => `${r.weight}|${r.side}`));
      x.forEach((r, i) => {
        for (const f of ['absMax', 'sum', 'sumSq', 'top'] as const) expect(closeness(y[i][f], r[f], 1e-4, 1e-5)).toBeLessThanOrEqual(1);
        expect(y[i].topChannels).toEqual(r.topChannels);
      });
    });
  });
}

describe('the quality evaluation with the source streamed', () => {
  test('stories260K ts Q8_0: every figure equals the whole-graph evaluation; only large models stream by default', async () => {
    const tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-stream-eval-'));
    try {
      const out = path.join(tmp, 'a');
      const r = await llmcInProcess('compile', STORIES, '-o', out, '--target', 'ts', '--quant', 'Q8_0', '--cache-dir', path.join(tmp, 'cache'));
      expect(r.code, r.stderr).toBe(0);
      const located = await locate(out);
      if (located.kind !== 'artifact' || located.manifestPath === null) throw new Error('not an artifact');
      const source = await openCheckpoint(STORIES);
      try {
        const held = await heldOutSet(source, { tokens: 630, cacheDir: path.join(tmp, 'cache') });
        const whole = await evaluateArtifact({ artifact: located, source, sequences: held.sequences, stream: false, threads: 1 });
        const streamed = await evaluateArtifact({ artifact: located, source, sequences: held.sequences, stream: true, threads: 1 });
        expect(streamed.positions).toBe(whole.positions);
        for (const k of ['referencePpl', 'candidatePpl', 'kl', 'klP99', 'greedyAgreement'] as const) expect(streamed[k]).toBeCloseTo(whole[k], 6);
        expect(float32Bytes(source.spec)).toBeLessThan(STREAM_ABOVE_BYTES);
      } finally {
        await source.close();
      }
    } finally {
      await fsp.rm(tmp, { recursive: true, force: true });
    }
  });

  test('the TinyLlama-1.1B shape streams by default (its float32 graph is above 2 GiB)', () => {
    const config = {
      model_type: 'llama',
      architectures: ['LlamaForCausalLM'],
      vocab_size: 32000,
      hidden_size: 2048,
      intermediate_size: 5632,
      num_hidden_layers: 22,
      num_attention_heads: 32,
      num_key_value_heads: 4,
      max_position_embeddings: 2048,
      rms_norm_eps: 1e-5,
      tie_word_embeddings: false,
    };
    const spec = normalizeConfig(config, 'config.json');
    expect(float32Bytes(spec)).toBeGreaterThan(2 ** 31);
    expect(float32Bytes(spec)).toBeGreaterThan(STREAM_ABOVE_BYTES);
  });
});

describe('per-piece profiles', () => {
  test('a second sweep reads every piece from the cache; one stopped part way resumes at the first piece missing; same statistics', async () => {
    const tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-stream-cache-'));
    const ck = await openCheckpoint(STORIES);
    try {
      const ids = [[1, 5, 9, 33, 7, 2, 8, 100], [1, 40, 41, 42, 3, 5, 6, 7]];
      const specs = [{ kind: 'head-output' as const }, { kind: 'mlp-act' as const }, { kind: 'linear-input' as const, sums: true, top: 4 }];
      const want = await new StreamEngine(ck, { threads: 1 }).tap(ids, specs);
      const hook = (await pieceCache(ck, path.join(tmp, 'cache')))!;
      // stopped before layer 2 (as Ctrl-C would): pieces embed, l0, l1 are stored
      const stopping: PieceHook = (seg, t, i, run) => {
        if (seg.id === 'l2') throw new Error('stopped');
        return hook(seg, t, i, run);
      };
      await expect(new StreamEngine(ck, { threads: 1, pieces: stopping }).tap(ids, specs)).rejects.toThrow('stopped');
      const resumed = new StreamEngine(ck, { threads: 1, pieces: hook });
      sameTaps(await resumed.tap(ids, specs), want);
      const ran = resumed.timings.map((t) => t.id).filter((id) => id !== 'embed');
      expect(ran).toEqual(Array.from({ length: ck.spec.numLayers - 2 }, (_, k) => `l${k + 2}`).concat(ran.includes('head') ? ['head'] : []));
      const again = new StreamEngine(ck, { threads: 1, pieces: hook });
      sameTaps(await again.tap(ids, specs), want);
      expect(again.timings.filter((t) => t.id !== 'embed')).toEqual([]);
    } finally {
      await ck.close();
      await fsp.rm(tmp, { recursive: true, force: true });
    }
  });
});
