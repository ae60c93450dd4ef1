/**
 * expert-bits' block-local sensitivities against the exact ones (a forward per item and candidate):
 * the plans each picks at several budgets, scored on held-out text the pass never saw (windows of
 * ../shared's heldout.txt; the pass calibrates on calibration.txt), and what each measurement cost.
 *   npx tsc -p tsconfig.bench.json && node dist/bench/scale-expert-bits.js MODEL [ts|gguf] [bpw,...] [windows]
 * Prints one JSON line per (measure, budget) and a summary line.
 */
import os from 'node:os';
import path from 'node:path';
import { promises as fsp } from 'node:fs';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { ts } from '../backends/ts/index.js';
import { gguf } from '../backends/gguf/index.js';
import { analyzeExpertBits } from '../passes/expert-bits/run.js';
import { parseExpertBitsOptions } from '../passes/expert-bits/options.js';
import { Lab } from '../passes/expert-bits/measure.js';
import { expertsOf } from '../passes/expert-bits/items.js';
import { textWindows } from '../src/measure/calibration.js';
import type { QuantType } from '../src/core/quant/types.js';

const [dir, targetName = 'ts', bpws = '3,3.5,4,4.5,5', windows = '32'] = process.argv.slice(2);
const TEXT = path.resolve(import.meta.dirname, '../../../shared/models/trained/text');
const target = targetName === 'gguf' ? gguf : ts;
const source = await openCheckpoint(dir);
const evalSeqs = (await textWindows(source, 64, path.join(TEXT, 'heldout.txt'))).slice(0, Number(windows));
const cacheDir = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-bench-ebm-'));
const lab = await Lab.open(source, expertsOf(source).flatMap((e) => Object.values(e.tensors)));
const nll = async (assign: [string, QuantType][]) => Math.log(await lab.ppl(evalSeqs, await lab.swap(assign)));
const ref = await nll([]);
const rows: { measure: string; bpw: number; heldOutText: number; passHeldOut: number; ms: number }[] = [];
try {
  for (const measure of ['exact', 'block']) {
    for (const bpw of bpws.split(',')) {
      const o = parseExpertBitsOptions({ calibText: path.join(TEXT, 'calibration.txt'), budgetBpw: bpw, measure });
      const t0 = performance.now();
      const { record } = await analyzeExpertBits(source, o, { target, note: () => {}, cacheDir, progress: silentProgress });
      const ms = performance.now() - t0;
      const assign = record.items.flatMap((it) => it.tensors.map((t, k) => [t, it.choices[it.chosen].written[k]] as [string, QuantType]));
      const r = { measure, bpw: Number(bpw), heldOutText: Math.expm1((await nll(assign)) - ref), passHeldOut: record.plan.heldOutLoss, ms: Math.round(ms), chosen: record.items.map((it) => it.chosen).join('') };
      rows.push(r);
      console.log(JSON.stringify(r));
    }
  }
} finally {
  await lab.close();
  await source.close();
  await fsp.rm(cacheDir, { recursive: true, force: true });
}
const worse = rows.filter((r) => r.measure === 'block').map((b) => ({ bpw: b.bpw, blockMinusExact: b.heldOutText - rows.find((e) => e.measure === 'exact' && e.bpw === b.bpw)!.heldOutText }));
console.log(JSON.stringify({ model: dir, target: target.name, windows: evalSeqs.length, summary: worse }));
