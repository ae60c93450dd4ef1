/**
 * Pass `reorder`: the level × provider held-out perplexity table (with a random-order baseline),
 * each provider's wall time, and the TS runtime's level-switch cost as a fraction of one
 * 128-token prefill (target < 1%).
 * Standalone: `npx tsc -p tsconfig.bench.json && node dist/bench/reorder.bench.js [--quick]`.
 */
import path from 'node:path';
import type { ModelSource } from '../src/core/checkpoint/source.js';
import { compile } from '../src/app/compile/compile.js';
import { calibrationSet } from '../src/measure/calibration.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { silentProgress } from '../src/core/util/progress.js';
import { analyzeReorder } from '../passes/reorder/analyze.js';
import { ELASTIC_LEVELS, findRecord, levelWidths, selectLevel as selectLevelOf, type PassRecord } from '../src/core/records/index.js';

const selectLevel = (passes: PassRecord[] | undefined, request: string) => selectLevelOf(findRecord(passes, ELASTIC_LEVELS)?.levels ?? null, request);
import { levelMasks, maskedLoss } from '../passes/reorder/masks.js';
import { parseReorderOptions } from '../passes/reorder/options.js';
import { randomOrders } from '../passes/reorder/permute.js';
import { repeat, round, runIfMain, type BenchSuite } from './harness.js';
import { llama30M, randomPrompt, STORIES, withCheckpoint, withTmpDir } from './scoped.js';
import { findTarget } from '../src/app/compile/plan.js';

/** Perplexity table: rows = levels, columns = providers (+ random median of 3, + auto's pick). */
async function providerTable(src: ModelSource, cacheDir: string, quick: boolean) {
  const providers = ['taylor', 'activation', 'magnitude'] as const;
  const levels = quick ? '0.5,0.75,1' : '10';
  const table: Record<string, Record<string, number>> = {};
  const timeMs: Record<string, number> = {};
  let elastic: number[] = [];
  let plan: Awaited<ReturnType<typeof analyzeReorder>>['metadata']['levels'] = [];
  for (const p of providers) {
    const r = await analyzeReorder(src, parseReorderOptions({ importance: p, levels, recover: 'none' }), { note: () => {}, cacheDir, target: findTarget('ts') });
    timeMs[p] = r.timeMs[p];
    plan = r.metadata.levels;
    elastic = r.orders.map((o) => o.layer);
    for (const lv of r.metadata.levels) {
      const key = `${lv.id} nominal=${lv.nominal} real=${lv.paramFrac}`;
      (table[key] ??= {})[p] = round(lv.heldOutPpl!, 2);
      table[key].fullPpl = round(r.metadata.heldOutPpl!, 2);
    }
  }
  const calib = await calibrationSet(src, { source: 'self-generated', count: 10, length: 64, seed: 42, heldOut: 10 }, { cacheDir });
  for (const lv of plan) {
    const key = `${lv.id} nominal=${lv.nominal} real=${lv.paramFrac}`;
    const rnd: number[] = [];
    for (let s = 0; s < 3; s++) rnd.push(Math.exp(await maskedLoss(src, levelMasks(src.spec, randomOrders(src, 50 + s, elastic), lv.layers), calib.heldOut)));
    table[key].randomMedian = round(rnd.sort((a, b) => a - b)[1], 2);
  }
  const auto = await analyzeReorder(src, parseReorderOptions({ importance: 'auto', levels: '0.5', evaluate: 'false', recover: 'none' }), { note: () => {}, cacheDir, target: findTarget('ts') });
  return { table, providerTimeMs: timeMs, auto: { picked: auto.metadata.importance.provider, pplAt50: auto.metadata.importance.auto } };
}

/** Switching level in the TS runtime (choose widths; weights are prefixes, nothing moves) vs a 128-token prefill. */
async function switchCost(src: ModelSource, outDir: string, cacheDir: string, quick: boolean) {
  const manifest = await compile({
    source: src,
    target: 'ts',
    outDir,
    passes: [{ name: 'reorder', options: { importance: 'magnitude', levels: '0.5,0.75,1', evaluate: 'false', recover: 'none' } }],
    quant: 'F32',
    progress: silentProgress,
    note: () => {},
    cacheDir,
  });
  const model = await loadDir(outDir);
  const prompt = randomPrompt(src.spec);
  const reps = quick ? 3 : 7;
  model.forward(prompt, model.newCache(), { lastOnly: true }); // warm-up (JIT, wasm kernels)
  const prefill = await repeat(reps, () => model.forward(prompt, model.newCache(), { lastOnly: true }));
  const requests = ['0.5', '0.75', '1'];
  let i = 0;
  // One switch = resolve the level from the manifest, build the widths and a fresh cache.
  const sw = await repeat(reps * 30, () => {
    const w = levelWidths(selectLevel(manifest.passes, requests[i++ % 3]));
    return { w, cache: model.newCache() };
  });
  const perLevel: Record<string, number> = {};
  for (const r of requests) {
    const widths = levelWidths(selectLevel(manifest.passes, r));
    perLevel[r] = round((await repeat(reps, () => model.forward(prompt, model.newCache(), { lastOnly: true, widths }))).median, 3);
  }
  return {
    prefill128Ms: round(prefill.median, 3),
    switchMs: round(sw.median, 5),
    switchOverPrefill: round(sw.median / prefill.median, 6),
    target: '< 0.01',
    prefillMsByLevel: perLevel,
  };
}

export const suite: BenchSuite = {
  name: 'reorder',
  description: 'reorder pass: level × importance-provider perplexity, provider times, runtime level-switch cost',
  async run(opts = { quick: false }) {
    const quick = Boolean(opts.quick);
    return withTmpDir('llmc-bench-reorder-', async (tmp) => {
      const out: Record<string, unknown> = {};
      await withCheckpoint(STORIES, async (stories) => {
        out.stories260K = await providerTable(stories, path.join(tmp, 'cache-stories'), quick);
        out.switchStories260K = await switchCost(stories, path.join(tmp, 'ts-stories'), path.join(tmp, 'cache-stories'), quick);
      });
      if (!quick) {
        out.switchLlama30M = await withCheckpoint(await llama30M(), (m30) => switchCost(m30, path.join(tmp, 'ts-30m'), path.join(tmp, 'cache-30m'), quick));
      }
      return out;
    });
  },
};

runIfMain(import.meta.url, suite);
