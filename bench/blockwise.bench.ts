/**
 * Blockwise recovery (reorder.recover=blockwise, passes/reorder/blockwise.ts) against whole-model LoRA
 * (reorder.recover=lora, the default) on real models, levels 0.5 / 0.75 / 1: per level the held-out
 * perplexity with a 95% interval over sequences (each level's slice with its adapters, whole model in
 * tfjs: an independent check of the streamed measurement), wall and CPU seconds of the pass.
 *   stories260K   self-generated calibration, 64 held-out sequences of the pass's
 *   dense-28M     (../shared) calibrates and trains on text/calibration.txt, held out on text/heldout.txt windows
 * Variants: `--variant name:key=value,key=value` (reorder options over recover=blockwise; repeatable),
 * `--no-lora` skips the LoRA baseline, `--only stories|dense`.
 * Standalone: `npx tsc -p tsconfig.bench.json && node dist/bench/blockwise.bench.js [--quick]`.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { ModelSource } from '../src/core/checkpoint/source.js';
import { sliceSource } from '../src/core/pipeline/elastic.js';
import { TfModel } from '../src/exec/autodiff/lower.js';
import { tf } from '../src/exec/autodiff/tf.js';
import { analyzeReorder } from '../passes/reorder/analyze.js';
import { parseReorderOptions } from '../passes/reorder/options.js';
import { lowRankTerms, type Adapter } from '../passes/reorder/recover.js';
import { calibrationSet, textFileSpec, textWindows, trainingSet } from '../src/measure/calibration.js';
import { findTarget } from '../src/app/compile/plan.js';
import type { Level } from '../src/core/records/elastic.js';
import { pplCI, type PplCI } from './elastic-quality.bench.js';
import { REPO_ROOT, round, runIfMain, type BenchSuite } from './harness.js';
import { STORIES, withCheckpoint, withTmpDir } from './scoped.js';

const SHARED = path.resolve(REPO_ROOT, '../shared/models/trained');

/** Per-sequence held-out loss of a level: its slice with its adapters (none: unrecovered). */
async function levelCI(r: Awaited<ReturnType<typeof analyzeReorder>>, lv: Level | null, heldOut: number[][]): Promise<PplCI> {
  const student = await TfModel.load(lv ? sliceSource(r.source, lv.layers, 'level') : r.source);
  const ads: Adapter[] = [];
  let scale = 1;
  let rank = 1;
  for (const [weight, ann] of lv ? r.adapters : []) {
    const a = ann.adapters?.[lv!.id];
    if (!a) continue;
    ads.push({ weight, inFeatures: a.inFeatures, outFeatures: a.outFeatures, a: a.a, b: a.b });
    scale = a.scale;
    rank = a.rank;
  }
  const terms = lowRankTerms(ads, rank, scale);
  try {
    const per = new Float64Array(heldOut.length);
    for (let i = 0; i < heldOut.length; i++) per[i] = await student.meanLoss([heldOut[i]], ads.length ? { lowRank: terms } : {}, 1);
    return pplCI(per);
  } finally {
    tf.dispose([...terms.values()].flatMap((t) => [t.at, t.bt]));
    student.dispose();
  }
}

interface Case {
  source: ModelSource;
  options: Record<string, string>;
  /** Held-out sequences; null: the pass's own (calibration's held-out part). */
  heldOut: number[][] | null;
}

async function runVariant(c: Case, extra: Record<string, string>, cacheDir: string) {
  const ctx = { note: () => {}, cacheDir, target: findTarget('ts') };
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const r = await analyzeReorder(c.source, parseReorderOptions({ ...c.options, evaluate: 'true', ...extra }), ctx);
  const wallS = round((performance.now() - t0) / 1000, 1);
  const u = process.cpuUsage(cpu0);
  const heldOut = c.heldOut;
  const levels: Record<string, unknown> = {};
  for (const lv of r.metadata.levels.filter((l) => l.paramFrac < 1)) {
    levels[lv.id] = {
      paramFrac: round(lv.paramFrac, 4),
      passHeldOutPpl: lv.heldOutPpl !== undefined ? round(lv.heldOutPpl, 2) : null,
      unrecoveredPassPpl: lv.unrecovered ? round(lv.unrecovered.heldOutPpl, 2) : null,
      ...(heldOut ? { ppl: await levelCI(r, lv, heldOut) } : {}),
    };
  }
  return { options: extra, wallS, cpuS: round((u.user + u.system) / 1e6, 1), fullPassPpl: r.metadata.heldOutPpl, levels, recovery: r.metadata.recovery, notes: r.metadata.notes };
}

const args = (name: string) => process.argv.flatMap((a, i) => (a === name ? [process.argv[i + 1]] : []));

/** `name:key=value,key=value` → reorder options. */
function variants(quick: boolean): Record<string, Record<string, string>> {
  const out: Record<string, Record<string, string>> = {};
  for (const v of args('--variant')) {
    const [name, rest = ''] = v.split(':');
    out[name] = Object.fromEntries(rest.split(',').filter(Boolean).map((kv) => kv.split('=') as [string, string]));
    out[name].recover ??= 'blockwise';
  }
  if (!Object.keys(out).length) out.blockwise = quick ? { recover: 'blockwise', recoverSteps: '8', recoverEndToEnd: '8' } : { recover: 'blockwise' };
  if (!process.argv.includes('--no-lora')) out.lora = quick ? { recover: 'lora', recoverSteps: '16' } : { recover: 'lora' };
  return out;
}

async function measureCase(c: Case, quick: boolean, tmp: string) {
  const out: Record<string, unknown> = {};
  // The unrecovered levels and the full model on the same held-out sequences; the measurements and
  // the training data cached first (one cache for every variant: their recoveries' keys differ), so
  // each variant's time is its recovery's.
  const base = await analyzeReorder(c.source, parseReorderOptions({ ...c.options, recover: 'none', evaluate: 'false' }), { note: () => {}, cacheDir: tmp, target: findTarget('ts') });
  const o = parseReorderOptions(c.options);
  const calib = await calibrationSet(c.source, { source: o.calibText ? await textFileSpec(o.calibText) : 'self-generated', count: o.calibCount, length: o.calibLength, seed: o.seed, heldOut: o.heldOut }, { cacheDir: tmp });
  await trainingSet(c.source, calib, 1024, o.seed, { cacheDir: tmp });
  const heldOut = c.heldOut ?? calib.heldOut;
  const cc = { ...c, heldOut };
  out.full = await levelCI(base, null, heldOut);
  out.unrecovered = Object.fromEntries(await Promise.all(base.metadata.levels.filter((l) => l.paramFrac < 1).map(async (lv) => [lv.id, await levelCI(base, lv, heldOut!)])));
  for (const [name, extra] of Object.entries(variants(quick))) {
    process.stderr.write(`blockwise bench: ${name} ${JSON.stringify(extra)}\n`);
    out[name] = await runVariant(cc, extra, tmp);
    process.stderr.write(`  → ${JSON.stringify(out[name])}\n`);
  }
  return out;
}

export const suite: BenchSuite = {
  name: 'blockwise',
  description: 'blockwise recovery (one decoder block at a time) vs whole-model LoRA: held-out perplexity per level with 95% intervals, wall and CPU (stories260K, dense-28M)',
  async run({ quick }) {
    const only = args('--only')[0];
    const out: Record<string, unknown> = {};
    await withTmpDir('llmc-blockwise-', async (tmp) => {
      if (only !== 'dense') {
        await withCheckpoint(STORIES, async (src) => {
          out.stories260K = await measureCase({ source: src, options: { levels: '0.5,0.75,1', heldOut: quick ? '16' : '64' }, heldOut: null }, quick, path.join(tmp, 'stories'));
        });
      }
      const dense = path.join(SHARED, 'dense-28M');
      if (only !== 'stories' && existsSync(dense)) {
        await withCheckpoint(dense, async (src) => {
          const all = await textWindows(src, 64, path.join(SHARED, 'text/heldout.txt'));
          const n = quick ? 16 : 64;
          const step = Math.max(1, Math.floor(all.length / n));
          const heldOut = Array.from({ length: Math.min(n, all.length) }, (_, i) => all[i * step]);
          out.dense28M = await measureCase({ source: src, options: { levels: '0.5,0.75,1', calibText: path.join(SHARED, 'text/calibration.txt'), heldOut: '10' }, heldOut }, quick, path.join(tmp, 'dense'));
        });
      } else if (only !== 'stories') out.dense28M = { skipped: `${dense} is absent` };
    });
    return out;
  },
};

runIfMain(import.meta.url, suite);
