/**
 * `reorder.budget=latency` checked against measurement (issue 32): dense-28M (../shared) compiled for
 * ts at F32 with per-layer widths searched under a latency budget, then each level's decode step
 * measured with `llmc run --level … --json --ignore-eos --threads 1` (CPU ms per decode step from two
 * generation lengths, see decodeStep; one thread as the price model's kernel), beside the step
 * time the pass priced (latency.ts stepSeconds at the measured steps' mean context). Reported per
 * level: priced and measured ms, their ratio, and the level's fraction of the full step priced and
 * measured (what the budget bounds). Standalone:
 * `npx tsc -p tsconfig.bench.json && node dist/bench/reorder-latency.bench.js [--context 512] [--reps 3]
 * [--levels 0.5,0.75,1] [--cache DIR] [--model DIR]`.
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { compile } from '../src/app/compile/compile.js';
import { silentProgress } from '../src/core/util/progress.js';
import type { ReorderMetadata } from '../passes/reorder/analyze.js';
import { stepSeconds } from '../passes/reorder/latency.js';
import { REPO_ROOT, round, runIfMain, runNodeWithPeakRss, type BenchSuite } from './harness.js';
import { withCheckpoint } from './scoped.js';

const SHARED = path.resolve(REPO_ROOT, '../shared/models/trained');
const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
};

/** One `llmc run --level` call: its decode_ms and its whole-process CPU time. */
async function runLevel(dir: string, level: string, prompt: number[], n: number, threads: number | null) {
  const args = ['run', dir, '--level', level, '--prompt-ids', prompt.join(','), '-n', String(n), '--ignore-eos', '--json', ...(threads ? ['--threads', String(threads)] : [])];
  const run = await runNodeWithPeakRss(path.join(REPO_ROOT, 'bin/llmc.js'), args);
  if (run.code !== 0) throw new Error(`llmc run --level ${level}: ${run.stderr.trim()}`);
  return { decodeMs: (JSON.parse(run.stdout) as { timings: { decode_ms: number } }).timings.decode_ms, cpuMs: run.cpuMs };
}

/**
 * A decode step of `level`: CPU ms per step, from the difference of the least CPU time of `reps` runs
 * generating `n2` and `n1` tokens after the same prompt (loading, verification and prefill cancel; on
 * one thread CPU time is the step's time on an idle core, which wall time on a loaded machine is not),
 * and the best wall ms per step of the n2 runs (decode_ms).
 */
async function decodeStep(dir: string, level: string, prompt: number[], n1: number, n2: number, threads: number | null, reps: number) {
  let cpu1 = Infinity;
  let cpu2 = Infinity;
  let wall = Infinity;
  for (let r = 0; r < reps; r++) {
    cpu1 = Math.min(cpu1, (await runLevel(dir, level, prompt, n1, threads)).cpuMs);
    const b = await runLevel(dir, level, prompt, n2, threads);
    cpu2 = Math.min(cpu2, b.cpuMs);
    wall = Math.min(wall, b.decodeMs / (n2 - 1));
  }
  return { cpuMs: (cpu2 - cpu1) / (n2 - n1), wallMs: wall };
}

export const suite: BenchSuite = {
  name: 'reorder-latency',
  description: 'reorder.budget=latency: each level\'s priced decode step against `llmc run`\'s measured one (dense-28M, ts F32)',
  async run({ quick }) {
    const model = arg('--model') ?? path.join(SHARED, 'dense-28M');
    if (!existsSync(model)) return { skipped: `${model} is absent` };
    const context = Number(arg('--context') ?? 512);
    const reps = Number(arg('--reps') ?? (quick ? 1 : 3));
    const levels = arg('--levels') ?? '0.5,0.75,1';
    const [n1, n2] = quick ? [4, 20] : [8, 72];
    const calibText = path.join(SHARED, 'text/calibration.txt');
    const cacheDir = arg('--cache') ? path.resolve(arg('--cache')!) : path.join(os.tmpdir(), 'llmc-bench-cache');
    const tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-reorder-latency-'));
    try {
      return await withCheckpoint(model, async (source) => {
        const spec = source.spec;
        const out = path.join(tmp, 'ts');
        const t0 = performance.now();
        const options: Record<string, string> = { levels, widths: 'search', budget: 'latency', budgetContext: String(context), recover: 'none', evaluate: 'false', heldOut: '10', ...(existsSync(calibText) && model.includes('dense') ? { calibText } : {}) };
        const manifest = await compile({ source, target: 'ts', outDir: out, passes: [{ name: 'reorder', options }], quant: 'F32', progress: silentProgress, note: () => {}, cacheDir });
        const compileMs = performance.now() - t0;
        const md = manifest.passes[0].metadata as unknown as ReorderMetadata;
        const b = md.widthSearch?.budget;
        if (!b || b.kind !== 'latency') throw new Error('no latency budget in the record');
        // The steps measured (n1+1 … n2 after the prompt) run at a mean context of `context`: priced there.
        const prompt = Array.from({ length: context - Math.round((n1 + n2) / 2) }, (_, i) => 3 + ((i * 37) % (spec.vocabSize - 3)));
        const meanContext = prompt.length + (n1 + n2) / 2;
        const k = { perCall: b.perCallUs / 1e6, perMac: b.perMacNs / 1e9, context: meanContext, host: b.host };
        const full = md.levels[md.levels.length - 1];
        const rows: Record<string, unknown>[] = [];
        const measured: Record<string, { cpuMs: number; wallMs: number }> = {};
        for (const lv of md.levels) {
          const m = await decodeStep(out, lv.id, prompt, n1, n2, 1, reps);
          measured[lv.id] = m;
          const pricedMs = stepSeconds(spec, lv, k) * 1e3;
          rows.push({ id: lv.id, paramFrac: lv.paramFrac, pricedMs: round(pricedMs, 3), cpuMsPerStep: round(m.cpuMs, 3), pricedOverCpu: round(pricedMs / m.cpuMs, 3), wallMsPerStep: round(m.wallMs, 3) });
        }
        const pricedFull = stepSeconds(spec, full, k);
        for (const [i, lv] of md.levels.entries()) {
          const r = rows[i];
          r.pricedFrac = round(stepSeconds(spec, lv, k) / pricedFull, 3);
          r.cpuFrac = round(measured[lv.id].cpuMs / measured[full.id].cpuMs, 3);
          r.pricedFracOverCpuFrac = round((r.pricedFrac as number) / (r.cpuFrac as number), 3);
          r.widths = lv.layers.map((L) => `${L.kvGroups}×${L.qHeadsPerGroup}/${L.ffn}`).join(" ");
        }
        return { model: path.basename(model), context, meanContext, steps: [n1, n2], reps, threads: 1, kernel: { perCallUs: b.perCallUs, perMacNs: b.perMacNs, host: b.host }, compileMs: Math.round(compileMs), load: os.loadavg().map((x) => round(x, 1)), levels: rows };
      });
    } finally {
      await fsp.rm(tmp, { recursive: true, force: true });
    }
  },
};

runIfMain(import.meta.url, suite);
