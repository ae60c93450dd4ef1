/**
 * Prefill against onnxruntime (issue 16): a 128-token prompt through the TS runtime (F32 and Q8_0
 * weights, one thread) and through onnxruntime-node running the project's own ONNX lowering (the
 * `Engine`, F32, intraOpNumThreads = 1, interOpNumThreads = 1) on the llama-30M fixture, in the
 * same process. Both compute the logits of the last position only (the Engine's graph gathers the
 * positions asked for before lm_head). One warm-up each, then rounds interleaved (ort, ts-F32,
 * ts-Q8_0, ts-Q8_0 on the one-token kernels per round) so a loaded machine slows them alike; the ratio is the median over rounds of
 * each round's ts / ort time ratio, beside the best tokens/s of each.
 *
 * Standalone: `npx tsc -p tsconfig.bench.json && node dist/bench/prefill.bench.js [--quick]`.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { Engine } from '../src/exec/engine/engine.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { useQuantizedTiles } from '../src/exec/runtime/wasm.js';
import { cachedFixture, round, runIfMain, type BenchSuite } from './harness.js';
import { compilePlain } from './compile-plain.js';

const WORK = path.join(os.tmpdir(), 'llmc-bench-prefill');
const PROMPT = 128;
const QUANTS = ['F32', 'Q8_0'] as const;

const median = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

export const suite: BenchSuite = {
  name: 'prefill',
  description: 'TS runtime prefill (128 tokens, F32 and Q8_0, one thread) vs onnxruntime one thread on llama-30M',
  async run(opts) {
    const rounds = opts.quick ? 3 : 9;
    await fsp.mkdir(WORK, { recursive: true });
    const { dir } = await cachedFixture('llama-30M', { arch: 'llama', seed: 1, tokenizer: 'none', planted: false });
    const prompt = Array.from({ length: PROMPT }, (_, i) => ((i * 37 + 1) % 8000) + 3);
    const ck = await openCheckpoint(dir);
    const engine = await Engine.open(ck, { threads: 1 });
    try {
      const runners: Record<string, () => Promise<Float32Array> | Float32Array> = {
        ort: () => engine.session().prefill(prompt),
      };
      for (const q of QUANTS) {
        const out = path.join(WORK, `llama-30M-${q}`);
        await compilePlain(dir, out, q); // always recompiled (seconds): a cached artifact from an older build would measure old code
        const model = await loadDir(out);
        runners[`ts-${q}`] = () => model.forward(prompt, model.newCache(), { lastOnly: true });
        // The same model on the one-token integer kernels (./qgemm.ts's tiles off; the same bits): the tiles' own gain.
        if (q !== 'F32') {
          runners[`ts-${q}-onetoken`] = () => {
            useQuantizedTiles(false);
            try {
              return model.forward(prompt, model.newCache(), { lastOnly: true });
            } finally {
              useQuantizedTiles(true);
            }
          };
        }
      }
      const last: Record<string, Float32Array> = {};
      for (const [name, run] of Object.entries(runners)) last[name] = await run(); // warm-up
      const ms: Record<string, number[]> = Object.fromEntries(Object.keys(runners).map((k) => [k, []]));
      for (let r = 0; r < rounds; r++) {
        for (const [name, run] of Object.entries(runners)) {
          const t0 = performance.now();
          await run();
          ms[name].push(performance.now() - t0);
        }
      }
      const tokPerSec = Object.fromEntries(Object.entries(ms).map(([k, t]) => [k, { best: round(PROMPT / (Math.min(...t) / 1000), 1), median: round(PROMPT / (median(t) / 1000), 1) }]));
      const ratios: Record<string, number> = {};
      for (const q of QUANTS) ratios[`ts-${q} / ort-1thread (median of per-round ratios)`] = round(median(ms.ort.map((o, i) => o / ms[`ts-${q}`][i])));
      ratios['ts-Q8_0 tiles / one-token kernels (median of per-round ratios)'] = round(median(ms['ts-Q8_0-onetoken'].map((o, i) => o / ms['ts-Q8_0'][i])));
      // Same last-position logits (F32 within float rounding of onnxruntime's).
      const ref = last.ort;
      const maxAbs = (a: Float32Array) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - ref[i])), 0);
      return {
        model: 'llama-30M (planted: false), F32 checkpoint',
        promptTokens: PROMPT,
        rounds,
        onnxruntime: 'Engine (project ONNX lowering), F32, intraOpNumThreads 1, interOpNumThreads 1',
        tokPerSec,
        ratios,
        maxAbsLogitDiffVsOrt: Object.fromEntries(QUANTS.map((q) => [`ts-${q}`, round(maxAbs(last[`ts-${q}`]), 5)])),
        q8TilesBitIdentical: last['ts-Q8_0'].every((v, i) => Object.is(v, last['ts-Q8_0-onetoken'][i])),
        targets: { 'prefill ts-F32 >= 1.0x ort-1thread': ratios['ts-F32 / ort-1thread (median of per-round ratios)'] >= 1 },
      };
    } finally {
      await engine.close();
      await ck.close();
    }
  },
};

runIfMain(import.meta.url, suite);
