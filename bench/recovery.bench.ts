/**
 * Recovery of elastic levels (reorder.recover=lora): the quality bars and the costs.
 *   quality   per level, held-out perplexity and greedy agreement with the full model, before and
 *             after recovery, for each importance source; the share of the gap to the full model
 *             that recovery closes, in log-perplexity (nats, the loss) and in perplexity; the bars:
 *             ≥ 80% at 75% of the parameters, ≥ 50% at 50%, every level below uniform guessing.
 *   speed     recovery wall and CPU time for all levels of stories260K (goal: < 60 s on 2 cores),
 *             per-step time on stories260K and the 30M fixture (scaling with size).
 *   nested    the nested-training baseline at equal training steps (one adapter set shared by all
 *             levels, a level drawn per step; passes/reorder/nested.ts) against per-level recovery.
 *   runtime   the TS runtime with a level's adapters as low-rank terms (zero-copy switching) vs
 *             merged into F32 copies of the level's slices at load: decode tokens/s, 128-token
 *             prefill, switch / load cost and extra bytes.
 * Standalone: `npx tsc -p tsconfig.json && node dist/bench/recovery.bench.js [--quick]`.
 */
import os from 'node:os';
import path from 'node:path';
import type { ModelSource } from '../src/core/checkpoint/source.js';
import { compile } from '../src/app/compile/compile.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { silentProgress } from '../src/core/util/progress.js';
import { analyzeReorder } from '../passes/reorder/analyze.js';
import { parseReorderOptions } from '../passes/reorder/options.js';
import { trainNested } from '../passes/reorder/nested.js';
import { recoverSettings } from '../passes/reorder/recover.js';
import { calibrationSet, trainingSet } from '../src/measure/calibration.js';
import { findTarget } from '../src/app/compile/plan.js';
import { selectLevel, type Level } from '../src/core/records/index.js';
import { repeat, round, runIfMain, type BenchSuite } from './harness.js';
import { llama30M, randomPrompt, STORIES, withCheckpoint, withTmpDir } from './scoped.js';

const cpuMs = (c: NodeJS.CpuUsage) => (c.user + c.system) / 1000;

/** Share of the full model's gap a level's recovery closes: in log-perplexity and in perplexity. */
function gapClosed(before: number, after: number, full: number) {
  return { loss: round((Math.log(before) - Math.log(after)) / (Math.log(before) - Math.log(full)), 3), ppl: round((before - after) / (before - full), 3) };
}

/** Reorder + recovery with `options`; the recovery's own time is the difference to a run without it. */
async function recoveryRun(src: ModelSource, cacheDir: string, options: Record<string, string>) {
  const target = findTarget('ts');
  const ctx = { note: () => {}, cacheDir, target };
  await analyzeReorder(src, parseReorderOptions({ ...options, recover: 'none', evaluate: 'true' }), ctx); // importance, calibration, quality before: cached
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  const r = await analyzeReorder(src, parseReorderOptions(options), ctx);
  const wallMs = performance.now() - t0;
  const cpu = cpuMs(process.cpuUsage(c0));
  const md = r.metadata;
  const vocab = src.spec.vocabSize;
  const full = md.heldOutPpl!;
  const levels = md.levels.map((lv) => ({
    id: lv.id,
    paramFrac: lv.paramFrac,
    before: lv.unrecovered ? { ppl: round(lv.unrecovered.heldOutPpl, 2), agreement: round(lv.unrecovered.agreement, 3) } : null,
    after: { ppl: round(lv.heldOutPpl!, 2), agreement: round(lv.agreement!, 3) },
    gapClosed: lv.unrecovered ? gapClosed(lv.unrecovered.heldOutPpl, lv.heldOutPpl!, full) : null,
    belowUniform: lv.heldOutPpl! < vocab,
  }));
  const at = (f: string) => {
    const lv = selectLevel(md.levels, f) as Level;
    const row = levels.find((l) => l.id === lv.id)!;
    return { level: lv.id, paramFrac: lv.paramFrac, gapClosed: row.gapClosed };
  };
  const a75 = at('0.75');
  const a50 = at('0.5');
  const trained = md.levels.filter((l) => l.paramFrac < 1).length; // every level below full trains (validation may keep none)
  const steps = md.recovery!.steps;
  return {
    fullPpl: round(full, 3),
    uniformPpl: vocab,
    recovery: { rank: md.recovery!.method === 'lora' ? md.recovery!.rank : null, steps, batch: md.recovery!.batch, lr: md.recovery!.lr, data: md.recovery!.data.count },
    levels,
    bars: {
      at75: { ...a75, goal: 0.8, metLoss: (a75.gapClosed?.loss ?? 0) >= 0.8, metPpl: (a75.gapClosed?.ppl ?? 0) >= 0.8 },
      at50: { ...a50, goal: 0.5, metLoss: (a50.gapClosed?.loss ?? 0) >= 0.5, metPpl: (a50.gapClosed?.ppl ?? 0) >= 0.5 },
      allBelowUniform: levels.every((l) => l.belowUniform),
    },
    meanLogPplAfter: round(levels.reduce((s, l) => s + Math.log(l.after.ppl), 0) / levels.length, 4),
    time: { levelsTrained: trained, wallMs: Math.round(wallMs), cpuMs: Math.round(cpu), cpuMsPerStep: round(cpu / (trained * steps), 1), wallMsPerStep: round(wallMs / (trained * steps), 1), goalWallMs: 60_000 },
  };
}

/**
 * The nested-training baseline at equal training steps: one adapter set shared by all levels
 * (MatFormer/Flextron style, passes/reorder/nested.ts), trained for (levels × recoverSteps) steps
 * with a level drawn per step, against per-level recovery's (levels × recoverSteps) steps.
 */
export async function nestedRun(src: ModelSource, cacheDir: string, options: Record<string, string>) {
  const target = findTarget('ts');
  const o = parseReorderOptions(options);
  const r = await analyzeReorder(src, parseReorderOptions({ ...Object.fromEntries(Object.entries(options).filter(([k]) => !k.startsWith('recover'))), recover: 'none', evaluate: 'true' }), { note: () => {}, cacheDir, target });
  const calib = await calibrationSet(src, { source: 'self-generated', count: o.calibCount, length: o.calibLength, seed: o.seed, heldOut: o.heldOut }, { cacheDir });
  const data = await trainingSet(src, calib, o.recover!.data, o.recover!.seed, { cacheDir });
  const levels = r.metadata.levels.filter((lv) => lv.paramFrac < 1);
  const settings = recoverSettings(o.recover!, levels.length);
  const steps = levels.length * settings.steps;
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  const n = await trainNested(r.source, levels, calib.heldOut, data.seqs, settings, steps);
  const cpu = cpuMs(process.cpuUsage(c0));
  const full = n.full.heldOutPpl;
  return {
    steps,
    draws: n.draws,
    fullPpl: round(full, 3),
    levels: levels.map((lv) => {
      const q = n.levels.get(lv.id)!;
      return { id: lv.id, paramFrac: lv.paramFrac, before: round(q.before.heldOutPpl, 2), after: { ppl: round(q.after.heldOutPpl, 2), agreement: round(q.after.agreement, 3) }, gapClosed: gapClosed(q.before.heldOutPpl, q.after.heldOutPpl, full) };
    }),
    time: { wallMs: Math.round(performance.now() - t0), cpuMs: Math.round(cpu), cpuMsPerStep: round(cpu / steps, 1) },
  };
}

/** Low-rank terms vs merged-at-load, at level `request` of a ts artifact with adapters. */
export async function runtimeModes(src: ModelSource, outDir: string, cacheDir: string, options: Record<string, string>, request: string, quick: boolean) {
  await compile({ source: src, target: 'ts', outDir, passes: [{ name: 'reorder', options }], quant: 'F32', progress: silentProgress, note: () => {}, cacheDir });
  const reps = quick ? 3 : 7;
  const prompt = randomPrompt(src.spec);
  const load0 = await repeat(reps, () => loadDir(outDir));
  const lowRank = await loadDir(outDir);
  const switchMs = await repeat(reps * 10, () => lowRank.level(request));
  const run = lowRank.level(request);
  const loadMerged = await repeat(reps, () => loadDir(outDir, { mergeLevel: request }));
  const merged = await loadDir(outDir, { mergeLevel: request });
  const modes = {
    noAdapters: { m: lowRank, run: { widths: run.widths } },
    lowRankTerms: { m: lowRank, run },
    mergedAtLoad: { m: merged, run: merged.level(request) },
  };
  // Each mode warmed up, then the modes interleaved round by round; the best round of each.
  const n = 32;
  const decodeMs = async (mode: (typeof modes)['noAdapters']) => {
    const t0 = performance.now();
    for await (const _ of mode.m.generate([1], { maxTokens: n, stopTokens: [], ...mode.run })) void _;
    return performance.now() - t0;
  };
  const prefillMs = (mode: (typeof modes)['noAdapters']) => {
    const t0 = performance.now();
    mode.m.forward(prompt, mode.m.newCache(), { lastOnly: true, ...mode.run });
    return performance.now() - t0;
  };
  const best: Record<string, { decode: number; prefill: number }> = {};
  for (const [k, mode] of Object.entries(modes)) {
    await decodeMs(mode);
    prefillMs(mode);
    best[k] = { decode: Infinity, prefill: Infinity };
  }
  for (let i = 0; i < reps; i++) {
    for (const [k, mode] of Object.entries(modes)) {
      best[k].decode = Math.min(best[k].decode, await decodeMs(mode));
      best[k].prefill = Math.min(best[k].prefill, prefillMs(mode));
    }
  }
  const adapters = [...(run.adapters?.values() ?? [])];
  const mergedBytes = adapters.reduce((n, a) => n + a.b.rows * a.a.cols * 4, 0);
  const adapterBytes = adapters.reduce((n, a) => n + (a.a.rows * a.a.cols + a.b.rows * a.b.cols) * 4, 0);
  return {
    level: run.level.id,
    paramFrac: run.level.paramFrac,
    decodeTokPerSec: Object.fromEntries(Object.entries(best).map(([k, v]) => [k, round(n / (v.decode / 1000), 1)])),
    prefill128Ms: Object.fromEntries(Object.entries(best).map(([k, v]) => [k, round(v.prefill, 3)])),
    switchLevelMs: round(switchMs.median, 4),
    loadMs: { plain: round(load0.median, 1), mergedAtLoad: round(loadMerged.median, 1) },
    extraBytes: { adapters: adapterBytes, mergedCopies: mergedBytes },
  };
}

export const suite: BenchSuite = {
  name: 'recovery',
  description: 'reorder recovery (LoRA per level): held-out quality before/after per importance source, quality bars, recovery time, runtime low-rank vs merged',
  async run(opts = { quick: false }) {
    const quick = Boolean(opts.quick);
    return withTmpDir('llmc-bench-recovery-', async (tmp) => {
      const out: Record<string, unknown> = { cores: os.cpus().length, loadAverage: os.loadavg().map((x) => round(x, 2)) };
      await withCheckpoint(STORIES, async (stories) => {
        const providers = quick ? ['activation'] : ['activation', 'taylor', 'magnitude'];
        const byProvider: Record<string, unknown> = {};
        for (const p of providers) byProvider[p] = await recoveryRun(stories, path.join(tmp, `cache-stories-${p}`), { importance: p, ...(quick ? { levels: '0.5,0.75,1' } : {}) });
        out.stories260K = byProvider;
        // One adapter set for all levels, at equal training steps (the nested-training baseline).
        if (!quick) out.nestedStories260K = await nestedRun(stories, path.join(tmp, 'cache-stories-activation'), { importance: 'activation' });
        out.runtimeStories260K = await runtimeModes(stories, path.join(tmp, 'ts-stories'), path.join(tmp, 'cache-stories-activation'), { importance: 'activation', ...(quick ? { levels: '0.5,0.75,1' } : {}) }, '0.5', quick);
      });
      if (!quick) {
        await withCheckpoint(await llama30M(), async (m30) => {
          // 256 sequences, not the default 1024: their teacher distributions (8192-token vocabulary) would
          // not fit the kept-probabilities budget either way, and a step's teacher forward is then recomputed.
          // 80 steps, not auto's 240 for two levels: a 30M step costs 2.5–5 s CPU, 240 would take half an hour.
          out.llama30M = {
            note: 'random-init weights with planted structure: the full model is itself near uniform guessing, so the gap is the distance to the full function, not language quality',
            ...(await recoveryRun(m30, path.join(tmp, 'cache-30m'), { importance: 'activation', levels: '0.5,0.75,1', recoverData: '256', recoverSteps: '80' })),
          };
          out.runtimeLlama30M = await runtimeModes(m30, path.join(tmp, 'ts-30m'), path.join(tmp, 'cache-30m-rt'), { importance: 'activation', levels: '0.5,1', recoverSteps: '2', recoverData: '8' }, '0.5', quick);
        });
      }
      return out;
    });
  },
};

runIfMain(import.meta.url, suite);
