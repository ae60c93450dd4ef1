/**
 * Elastic levels' quality with baselines (issue 32 item 3), per level on held-out sequences, as
 * perplexity with a 95% interval over sequences (mean per-sequence loss ± 1.96·sd/√n, exponentiated):
 *   importance   the pass's order (unrecovered)        random   3 seeded random orders (median)
 *   reverse      the pass's order reversed              lora     reorder.recover=lora (the default)
 *   distill      reorder.recover=distill (joint elastic distillation of the shared weights)
 * and floors fit on the training tokens (never the held-out ones): a unigram and an interpolated
 * bigram model. dense-28M (../shared) calibrates and trains on text/calibration.txt and is measured on
 * text/heldout.txt windows, beside draft-5M (5.2M parameters trained from scratch on the same corpus).
 * Targets (issue 32): stories260K 50% below the bigram floor and ≥ 80% of the gap closed at 75%
 * (log-perplexity); dense-28M every level ≥ 50% within 1.5× the full model's perplexity.
 * Per-layer widths (reorder.widths=search) against the uniform cut at the same parameter count (each
 * searched level's budget is the uniform level's parameter fraction): unrecovered with the default
 * anchors and with none (the search then decides which layers stay full), with iterative importance,
 * with the table re-measured at each level (searchRefine), with Fisher importance, and LoRA-recovered with the default settings (`--no-search` skips them).
 * Standalone: `npx tsc -p tsconfig.bench.json && node dist/bench/elastic-quality.bench.js [--quick]
 * [--only stories|dense] [--distill-steps N] [--no-train] [--no-search] [--no-fisher] [--dense-held-out N]
 * [--recovered-only [--searched-only] [--lora-opts k=v,...] [--search-opts k=v,...]] [--levels 0.5,1]
 * [--cache DIR]` (--recovered-only: LoRA-recovered searched widths against LoRA-recovered uniform widths
 * at the same parameter count, nothing else; --searched-only: the searched levels alone, budgets from
 * --levels; --cache: a profile cache kept between runs instead of a temporary one).
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import type { ModelSource } from '../src/core/checkpoint/source.js';
import { sliceSource } from '../src/core/pipeline/elastic.js';
import { TfModel, type RunOptions } from '../src/exec/autodiff/lower.js';
import { tf } from '../src/exec/autodiff/tf.js';
import { analyzeReorder } from '../passes/reorder/analyze.js';
import { parseReorderOptions } from '../passes/reorder/options.js';
import { levelMasks } from '../passes/reorder/masks.js';
import { randomOrders, type LayerOrder } from '../passes/reorder/permute.js';
import { lowRankTerms, type Adapter } from '../passes/reorder/recover.js';
import { calibrationSet, textFileSpec, textWindows, trainingSet } from '../src/measure/calibration.js';
import { findTarget } from '../src/app/compile/plan.js';
import type { Level } from '../src/core/records/elastic.js';
import { REPO_ROOT, round, runIfMain, type BenchSuite } from './harness.js';
import { STORIES, withCheckpoint, withTmpDir } from './scoped.js';

const SHARED = path.resolve(REPO_ROOT, '../shared/models/trained');

/** Perplexity with a 95% interval over sequences. */
export interface PplCI {
  ppl: number;
  lo: number;
  hi: number;
  n: number;
}

export function pplCI(perSeq: ArrayLike<number>): PplCI {
  const n = perSeq.length;
  let mean = 0;
  for (let i = 0; i < n; i++) mean += perSeq[i] / n;
  let v = 0;
  for (let i = 0; i < n; i++) v += (perSeq[i] - mean) ** 2 / Math.max(1, n - 1);
  const h = 1.96 * Math.sqrt(v / n);
  return { ppl: round(Math.exp(mean), 3), lo: round(Math.exp(mean - h), 3), hi: round(Math.exp(mean + h), 3), n };
}

/** Mean next-token loss of each sequence under `opts` (tfjs lowering). */
export async function perSeqLoss(model: TfModel, seqs: number[][], opts: RunOptions = {}): Promise<Float64Array> {
  const out = new Float64Array(seqs.length);
  for (let i = 0; i < seqs.length; i++) out[i] = await model.meanLoss([seqs[i]], opts, 1);
  return out;
}

/**
 * Unigram and interpolated bigram floors from `train` tokens, per held-out sequence (the same
 * positions a model predicts). Unigram add-one; bigram p(b|a) = λa·c(a,b)/c(a) + (1 − λa)·p(b),
 * λa = c(a)/(c(a) + 5): fixed in advance, not tuned on held-out data.
 */
export function ngramFloors(train: number[][], heldOut: number[][], V: number): { unigram: PplCI; bigram: PplCI; trainTokens: number } {
  const uni = new Float64Array(V);
  const bi = new Map<number, Map<number, number>>();
  let N = 0;
  for (const s of train) {
    for (let t = 0; t < s.length; t++) {
      uni[s[t]]++;
      N++;
      if (t > 0) {
        const row = bi.get(s[t - 1]) ?? new Map<number, number>();
        row.set(s[t], (row.get(s[t]) ?? 0) + 1);
        bi.set(s[t - 1], row);
      }
    }
  }
  const pu = (b: number) => (uni[b] + 1) / (N + V);
  const rowTotal = new Map<number, number>([...bi].map(([a, row]) => [a, [...row.values()].reduce((x, y) => x + y, 0)]));
  const u = new Float64Array(heldOut.length);
  const b = new Float64Array(heldOut.length);
  heldOut.forEach((s, i) => {
    let lu = 0;
    let lb = 0;
    for (let t = 1; t < s.length; t++) {
      lu -= Math.log(pu(s[t]));
      const c = rowTotal.get(s[t - 1]) ?? 0;
      const lam = c / (c + 5);
      const cab = bi.get(s[t - 1])?.get(s[t]) ?? 0;
      lb -= Math.log((c ? (lam * cab) / c : 0) + (1 - lam) * pu(s[t]));
    }
    u[i] = lu / (s.length - 1);
    b[i] = lb / (s.length - 1);
  });
  return { unigram: pplCI(u), bigram: pplCI(b), trainTokens: N };
}

/** Each order list reversed (least important first): the adversarial baseline. */
function reverseOrders(orders: LayerOrder[]): LayerOrder[] {
  return orders.map((o) => ({
    layer: o.layer,
    groups: [...o.groups].reverse(),
    qInGroup: [...o.qInGroup].reverse().map((q) => [...q].reverse()),
    mlp: Object.fromEntries(Object.entries(o.mlp).map(([k, v]) => [k, [...v].reverse()])),
  }));
}

/** Share of the log-perplexity gap to the full model a level closes (from the unrecovered order). */
const gapClosed = (before: number, after: number, full: number) => round((Math.log(before) - Math.log(after)) / (Math.log(before) - Math.log(full)), 3);

interface ModelCase {
  name: string;
  source: ModelSource;
  /** Reorder options (calibration source, levels). */
  options: Record<string, string>;
  /** Held-out sequences; null: the calibration set's (self-generated). */
  heldOut: number[][] | null;
  distillSteps: number;
  /** Training sequences for distillation (the option's default is ≥ 1M tokens; the bench sizes it to its steps). */
  distillData: number;
  loraSteps: string;
  /** Baselines only (orders, floors): no LoRA or distillation runs. */
  noTrain: boolean;
  /** Per-layer widths searched at the uniform levels' parameter fractions (and Fisher importance among them). */
  search: boolean;
  fisher: boolean;
  /** Recovered searched vs recovered uniform only (no random/reverse orders, variants or distillation). */
  recoveredOnly?: boolean;
  /** Extra reorder options for both LoRA runs (e.g. recoverData, recoverBatch). */
  lora?: Record<string, string>;
  /** Extra reorder options for the searched runs (e.g. importance=fisher, anchors). */
  searchOpts?: Record<string, string>;
  /** Recovered-only: the searched levels alone, at the `levels` option's fractions (no uniform run). */
  searchedOnly?: boolean;
}

/** The case's calibration and held-out sets, and the original model with its held-out perplexity. */
async function baseline(c: ModelCase, cacheDir: string) {
  const o = parseReorderOptions({ ...c.options, recover: 'none' });
  const calib = await calibrationSet(c.source, { source: o.calibText ? await textFileSpec(o.calibText) : 'self-generated', count: o.calibCount, length: o.calibLength, seed: o.seed, heldOut: o.heldOut }, { cacheDir });
  const heldOut = c.heldOut ?? calib.heldOut;
  const original = await TfModel.load(c.source);
  return { calib, heldOut, spec: c.source.spec, original, full: pplCI(await perSeqLoss(original, heldOut)) };
}

async function measureCase(c: ModelCase, cacheDir: string, quick: boolean): Promise<Record<string, unknown>> {
  if (c.recoveredOnly) return recoveredCase(c, cacheDir);
  const target = findTarget('ts');
  const ctx = { note: () => {}, cacheDir, target };
  const base = await analyzeReorder(c.source, parseReorderOptions({ ...c.options, recover: 'none', evaluate: 'false' }), ctx);
  const md = base.metadata;
  const { calib, heldOut, spec, original, full } = await baseline(c, cacheDir);
  const elastic = base.orders.map((x) => x.layer);
  const levels = md.levels.filter((lv) => lv.paramFrac < 1);
  const rows: Record<string, Record<string, unknown>> = {};
  for (const lv of levels) {
    const at = (orders: LayerOrder[]) => perSeqLoss(original, heldOut, levelMasks(spec, orders, lv.layers));
    const rnd: PplCI[] = [];
    for (let s = 0; s < (quick ? 1 : 3); s++) rnd.push(pplCI(await at(randomOrders(c.source, 50 + s, elastic))));
    rnd.sort((a, b) => a.ppl - b.ppl);
    rows[lv.id] = {
      paramFrac: lv.paramFrac,
      params: lv.params,
      importance: pplCI(await at(base.orders)),
      randomMedian: rnd[Math.floor(rnd.length / 2)],
      reverse: pplCI(await at(reverseOrders(base.orders))),
    };
  }
  // Per-layer widths searched under each uniform level's parameter fraction.
  const search: Record<string, unknown> = {};
  if (c.search) {
    const budgets = levels.map((lv) => lv.paramFrac).join(',');
    const variants: Record<string, Record<string, string>> = {
      searched: {},
      searchedNoAnchors: { anchors: '0' },
      searchedIterative: { iterative: 'true' },
      searchedRefined: { searchRefine: 'true' },
      ...(c.fisher ? { searchedFisher: { importance: 'fisher' }, searchedFisherRefined: { importance: 'fisher', searchRefine: 'true' } } : {}),
    };
    for (const [name, extra] of Object.entries(variants)) {
      const t = performance.now();
      const r = await analyzeReorder(c.source, parseReorderOptions({ ...c.options, ...extra, levels: `${budgets},1`, widths: 'search', recover: 'none', evaluate: 'false' }), ctx);
      const wallMs = Math.round(performance.now() - t);
      const per: Record<string, unknown> = {};
      for (const lv of r.metadata.levels.filter((l) => l.paramFrac < 1)) {
        per[lv.id] = { paramFrac: lv.paramFrac, params: lv.params, ppl: pplCI(await perSeqLoss(original, heldOut, levelMasks(spec, r.orders, lv.layers))), widths: lv.layers.map((L) => [L.kvGroups, L.qHeadsPerGroup, L.ffn]) };
      }
      search[name] = { wallMs, anchors: r.metadata.anchors, ...(r.metadata.fisherTokens ? { fisherTokens: r.metadata.fisherTokens } : {}), levels: per, notes: r.metadata.notes };
    }
  }
  original.dispose();
  // Floors on the tokens recovery trains on (text windows or self-generated sequences).
  const train = await trainingSet(c.source, calib, quick ? 256 : 1024, 42, { cacheDir });
  const floors = ngramFloors(train.seqs, heldOut, spec.vocabSize);

  if (c.noTrain) return { heldOut: { sequences: heldOut.length, tokensPerSequence: heldOut[0].length }, full, floors, levels: rows, ...(c.search ? { search } : {}) };
  if (c.search) {
    // LoRA (default settings) on the searched levels: each level's slice with its adapters.
    const budgets = levels.map((lv) => lv.paramFrac).join(',');
    const t = performance.now();
    const r = await analyzeReorder(c.source, parseReorderOptions({ ...c.options, levels: `${budgets},1`, widths: 'search', recover: 'lora', evaluate: 'true', recoverSteps: c.loraSteps }), ctx);
    const per: Record<string, unknown> = {};
    for (const lv of r.metadata.levels.filter((l) => l.paramFrac < 1)) per[lv.id] = { paramFrac: lv.paramFrac, ppl: await loraPpl(r, lv, heldOut), unrecoveredCalibPpl: lv.unrecovered?.heldOutPpl ?? null };
    search.searchedLora = { wallMs: Math.round(performance.now() - t), levels: per };
  }
  // LoRA (the default recovery): per level, its slice with its adapters.
  const t0 = performance.now();
  const lora = await analyzeReorder(c.source, parseReorderOptions({ ...c.options, recover: 'lora', evaluate: 'true', recoverSteps: c.loraSteps }), ctx);
  const loraMs = performance.now() - t0;
  for (const lv of lora.metadata.levels.filter((l) => l.paramFrac < 1)) rows[lv.id].lora = await loraPpl(lora, lv, heldOut);
  // Joint elastic distillation: every level a slice of the one trained weight set.
  const t1 = performance.now();
  const dist = await analyzeReorder(c.source, parseReorderOptions({ ...c.options, recover: 'distill', evaluate: 'true', recoverSteps: String(c.distillSteps), recoverData: String(c.distillData) }), ctx);
  const distillMs = performance.now() - t1;
  const trainedFull = await TfModel.load(dist.source);
  const distillFull = pplCI(await perSeqLoss(trainedFull, heldOut));
  for (const lv of levels) rows[lv.id].distill = pplCI(await perSeqLoss(trainedFull, heldOut, levelMasks(spec, [], lv.layers)));
  trainedFull.dispose();

  const levelOf = (f: number) => levels.find((l) => Math.abs(l.paramFrac - f) < 0.06) ?? null;
  const best = (id: string) => Math.min(...(['lora', 'distill'] as const).map((k) => (rows[id][k] as PplCI).ppl));
  const check = (f: number) => {
    const lv = levelOf(f);
    if (!lv) return null;
    const r = rows[lv.id];
    const before = (r.importance as PplCI).ppl;
    return { level: lv.id, paramFrac: lv.paramFrac, gapClosedLora: gapClosed(before, (r.lora as PplCI).ppl, full.ppl), gapClosedDistill: gapClosed(before, (r.distill as PplCI).ppl, full.ppl), best: best(lv.id), belowBigram: best(lv.id) < floors.bigram.ppl, withinOneAndHalfFull: best(lv.id) <= 1.5 * full.ppl };
  };
  return {
    heldOut: { sequences: heldOut.length, tokensPerSequence: heldOut[0].length },
    full,
    floors,
    levels: rows,
    ...(c.search ? { search } : {}),
    distill: { full: distillFull, recovery: dist.metadata.recovery, wallMs: Math.round(distillMs) },
    lora: { recovery: lora.metadata.recovery, wallMs: Math.round(loraMs) },
    at50: check(0.5),
    at75: check(0.75),
    notes: dist.metadata.notes,
  };
}

/**
 * Recovered searched widths against recovered uniform widths at the same parameter count (issue 32):
 * per level, unrecovered and LoRA-recovered held-out perplexity of both, the floors and the gap closed.
 */
async function recoveredCase(c: ModelCase, cacheDir: string): Promise<Record<string, unknown>> {
  const ctx = { note: () => {}, cacheDir, target: findTarget('ts') };
  const { calib, heldOut, spec, original, full } = await baseline(c, cacheDir);
  const train = await trainingSet(c.source, calib, 1024, 42, { cacheDir });
  const floors = ngramFloors(train.seqs, heldOut, spec.vocabSize);
  const run = async (extra: Record<string, string>) => {
    const t = performance.now();
    const cpu0 = process.cpuUsage();
    const r = await analyzeReorder(c.source, parseReorderOptions({ ...c.options, ...extra, recover: 'lora', evaluate: 'true', recoverSteps: c.loraSteps, ...(c.lora ?? {}) }), ctx);
    // The compile's CPU (user + sys, worker threads included), beside its wall: the machine is shared.
    const cpu = process.cpuUsage(cpu0);
    const compileCpuMs = Math.round((cpu.user + cpu.system) / 1000);
    const per: Record<string, unknown> = {};
    for (const lv of r.metadata.levels.filter((l) => l.paramFrac < 1)) {
      const before = pplCI(await perSeqLoss(original, heldOut, levelMasks(spec, r.orders, lv.layers)));
      const after = await loraPpl(r, lv, heldOut);
      per[lv.id] = { paramFrac: lv.paramFrac, params: lv.params, before, lora: after, gapClosed: gapClosed(before.ppl, after.ppl, full.ppl), gapClosedPpl: round((before.ppl - after.ppl) / (before.ppl - full.ppl), 3), widths: lv.layers.map((L) => [L.kvGroups, L.qHeadsPerGroup, L.ffn]) };
    }
    return { wallMs: Math.round(performance.now() - t), compileCpuMs, recovery: r.metadata.recovery, notes: r.metadata.notes, levels: per };
  };
  const uniform = c.searchedOnly ? null : await run({});
  const budgets = uniform ? Object.values(uniform.levels).map((lv) => (lv as { paramFrac: number }).paramFrac).join(',') + ',1' : c.options.levels;
  const searched = await run({ levels: budgets, widths: 'search', ...(c.searchOpts ?? {}) });
  original.dispose();
  return { heldOut: { sequences: heldOut.length, tokensPerSequence: heldOut[0].length }, full, floors, ...(uniform ? { uniform } : {}), searched };
}

/** Held-out perplexity of a LoRA-recovered level: its slice with its adapters (tfjs). */
export async function loraPpl(r: Awaited<ReturnType<typeof analyzeReorder>>, lv: Level, heldOut: number[][], perSeq?: (losses: Float64Array) => void): Promise<PplCI> {
  const student = await TfModel.load(sliceSource(r.source, lv.layers, 'level'));
  const ads: Adapter[] = [];
  let scale = 1;
  let rank = 1;
  for (const [weight, ann] of r.adapters) {
    const a = ann.adapters?.[lv.id];
    if (!a) continue;
    ads.push({ weight, inFeatures: a.inFeatures, outFeatures: a.outFeatures, a: a.a, b: a.b });
    scale = a.scale;
    rank = a.rank;
  }
  const terms = lowRankTerms(ads, rank, scale * 1);
  try {
    const losses = await perSeqLoss(student, heldOut, ads.length ? { lowRank: terms } : {});
    perSeq?.(losses);
    return pplCI(losses);
  } finally {
    tf.dispose([...terms.values()].flatMap((t) => [t.at, t.bt]));
    student.dispose();
  }
}

/** heldout.txt as windows of `length` tokens (never trained on), `count` of them spread over the file. */
export async function heldOutWindows(source: ModelSource, file: string, length: number, count: number): Promise<number[][]> {
  const all = await textWindows(source, length, file);
  const step = Math.max(1, Math.floor(all.length / count));
  return Array.from({ length: Math.min(count, all.length) }, (_, i) => all[i * step]);
}

const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
};

export const suite: BenchSuite = {
  name: 'elastic-quality',
  description: 'elastic levels: held-out perplexity with 95% intervals against random / reverse orders, unigram / bigram floors, LoRA vs joint distillation; dense-28M beside draft-5M',
  async run({ quick }) {
    const only = arg('--only');
    const steps = arg('--distill-steps');
    const noTrain = process.argv.includes('--no-train');
    const search = !process.argv.includes('--no-search');
    const fisher = !process.argv.includes('--no-fisher');
    const recoveredOnly = process.argv.includes('--recovered-only');
    const kv = (flag: string) => Object.fromEntries((arg(flag) ?? '').split(/,(?=\w+=)/).filter(Boolean).map((p) => p.split('=') as [string, string]));
    const lora = kv('--lora-opts');
    const searchOpts = kv('--search-opts');
    const denseHeldOut = Number(arg('--dense-held-out') ?? (quick ? 16 : 64));
    const searchedOnly = process.argv.includes('--searched-only');
    const levels = arg('--levels') ?? '0.5,0.75,1';
    const out: Record<string, unknown> = {};
    const cache = arg('--cache');
    const inDir = (f: (dir: string) => Promise<void>) => (cache ? f(path.resolve(cache)) : withTmpDir('llmc-elastic-quality-', f));
    await inDir(async (tmp) => {
      if (only !== 'dense') {
        await withCheckpoint(STORIES, async (src) => {
          out.stories260K = await measureCase(
            { name: 'stories260K', source: src, options: { levels, heldOut: quick ? '16' : '64' }, heldOut: null, distillSteps: Number(steps ?? (quick ? 40 : 600)), distillData: 16 * Number(steps ?? (quick ? 40 : 600)) + 16, loraSteps: quick ? '40' : 'auto', noTrain, search, fisher, recoveredOnly, lora, searchOpts, searchedOnly },
            path.join(tmp, 'cache-stories'),
            quick,
          );
        });
      }
      const dense = path.join(SHARED, 'dense-28M');
      if (only !== 'stories' && existsSync(dense)) {
        const calib = path.join(SHARED, 'text/calibration.txt');
        await withCheckpoint(dense, async (src) => {
          const heldOut = await heldOutWindows(src, path.join(SHARED, 'text/heldout.txt'), 64, denseHeldOut);
          const draft = await withCheckpoint(path.join(SHARED, 'draft-5M'), async (d) => {
            const m = await TfModel.load(d);
            try {
              return { params: 5.2e6, heldOut: pplCI(await perSeqLoss(m, heldOut)) };
            } finally {
              m.dispose();
            }
          });
          out.dense28M = {
            draft5M: draft,
            ...(await measureCase(
              { name: 'dense-28M', source: src, options: { levels, calibText: calib, heldOut: '10' }, heldOut, distillSteps: Number(steps ?? (quick ? 10 : 120)), distillData: 100000, loraSteps: quick ? '10' : 'auto', noTrain, search, fisher, recoveredOnly, lora, searchOpts, searchedOnly },
              path.join(tmp, 'cache-dense'),
              quick,
            )),
          };
        });
      } else if (only !== 'stories') out.dense28M = { skipped: `${dense} is absent` };
    });
    return out;
  },
};

runIfMain(import.meta.url, suite);
