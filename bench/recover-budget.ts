/**
 * The budgeted blockwise recovery (the default above 200M parameters or where the model streams,
 * passes/reorder/budget.ts) against no recovery and against LoRA (the default below), on dense-28M:
 * held-out perplexity of each level with a 95% interval over heldout.txt windows (never trained on).
 * The budget's run uses the large-model settings (norm loss, recoverData 9, recoverBatch 2, no
 * end-to-end steps) with `--steps` per block and level forced to what the rule gives at the 1.1B shape
 * with the default 10 levels (the rule's steps hardly depend on size: both costs are ∝ parameters).
 *   node dist/bench/recover-budget.js [--steps 7] [--levels 0.5,0.75,1] [--held-out 64] [--only none,budget,lora] [--opts k=v,...]
 * One JSON line per method: per level {paramFrac, ppl, lo, hi}, the method's CPU seconds; then per method
 * the paired perplexity ratio to none on the same sequences (exp of the mean per-sequence loss difference, 95% interval).
 */
import path from 'node:path';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { analyzeReorder } from '../passes/reorder/analyze.js';
import { parseReorderOptions } from '../passes/reorder/options.js';
import { findTarget } from '../src/app/compile/plan.js';
import { LARGE_DEFAULTS } from '../passes/reorder/options.js';
import { heldOutWindows, loraPpl } from './elastic-quality.bench.js';
import { REPO_ROOT, round } from './harness.js';

const SHARED = path.resolve(REPO_ROOT, '../shared/models/trained');
const arg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : dflt;
};
const steps = arg('--steps', '7');
const levels = arg('--levels', '0.5,0.75,1');
const only = arg('--only', 'none,budget,lora').split(',');
const extra = Object.fromEntries(arg('--opts', '').split(',').filter(Boolean).map((kv) => kv.split('=') as [string, string]));
const base = { levels, calibText: path.join(SHARED, 'text/calibration.txt'), heldOut: '10', evaluate: 'false' };
const methods: Record<string, Record<string, string>> = {
  none: { recover: 'none' },
  budget: { recover: 'blockwise', recoverLoss: LARGE_DEFAULTS.loss, recoverEndToEnd: String(LARGE_DEFAULTS.endToEnd), recoverData: String(LARGE_DEFAULTS.data), recoverBatch: String(LARGE_DEFAULTS.batch), recoverSteps: steps, ...extra },
  lora: { recover: 'lora' },
};
const src = await openCheckpoint(path.join(SHARED, 'dense-28M'));
const heldOut = await heldOutWindows(src, path.join(SHARED, 'text/heldout.txt'), 64, Number(arg('--held-out', '64')));
/** Per method and level: each held-out sequence's mean loss (for paired intervals against none). */
const losses = new Map<string, Map<number, Float64Array>>();
for (const name of only) {
  const cpu0 = process.cpuUsage();
  const r = await analyzeReorder(src, parseReorderOptions({ ...base, ...methods[name] }), { note: () => {}, target: findTarget('ts') });
  const u = process.cpuUsage(cpu0);
  const per: Record<string, unknown> = {};
  const mine = new Map<number, Float64Array>();
  losses.set(name, mine);
  for (const lv of r.metadata.levels) per[lv.id] = { paramFrac: round(lv.paramFrac, 3), ...(await loraPpl(r, lv, heldOut, (l) => mine.set(round(lv.paramFrac, 3), l))) };
  console.log(JSON.stringify({ method: name, options: methods[name], cpuS: round((u.user + u.system) / 1e6, 1), recovery: r.metadata.recovery ?? null, levels: per }));
}
// Paired: per level, the perplexity ratio method / none over the same sequences, with a 95% interval.
const none = losses.get('none');
for (const [name, mine] of losses) {
  if (!none || name === 'none') continue;
  const ratio: Record<string, unknown> = {};
  for (const [frac, l] of mine) {
    const base = none.get(frac);
    if (!base) continue;
    const d = Array.from(l, (x, i) => x - base[i]);
    const mean = d.reduce((a, b) => a + b, 0) / d.length;
    const sd = Math.sqrt(d.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, d.length - 1));
    const h = (1.96 * sd) / Math.sqrt(d.length);
    ratio[String(frac)] = { ratio: round(Math.exp(mean), 3), lo: round(Math.exp(mean - h), 3), hi: round(Math.exp(mean + h), 3) };
  }
  console.log(JSON.stringify({ paired: `${name} / none`, perplexityRatio: ratio }));
}
await src.close();
