/**
 * SIGKILL through a compile, for every target: `llmc compile` of the llama-30M fixture is killed at 20
 * points spread evenly over a measured run (--quick: 5). After each kill, whatever is at the output is
 * either nothing an llmc loader accepts (`llmc verify` fails or there is no manifest) or the whole
 * artifact; then a re-run must succeed, give the reference's bytes and leave no temp file of the dead
 * compile. Counts per target; `incompleteAccepted`, `rerunFailed`, `bytesDiffer` and `leftovers` must be 0.
 * Standalone: `npx tsc -p tsconfig.bench.json && node dist/bench/kill.bench.js [--quick]`.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { cachedFixture, REPO_ROOT, round, runIfMain, type BenchSuite } from './harness.js';

const CLI = path.join(REPO_ROOT, 'bin/llmc.js');

/** Each target with the options of a typical compile. */
const COMPILES: Record<string, string[]> = {
  gguf: ['--target', 'gguf', '--quant', 'Q8_0'],
  'gguf-levels': ['--target', 'gguf-levels', '--passes', 'reorder', '--importance', 'magnitude', '--levels', '0.5,1', '--quant', 'Q8_0'],
  ts: ['--target', 'ts', '--quant', 'Q8_0'],
  hf: ['--target', 'hf'],
  cuda: ['--target', 'cuda', '--quant', 'int8'],
  'tensorrt-llm': ['--target', 'tensorrt-llm'],
  qnn: ['--target', 'qnn', '--passes', 'outliers', '--opt', 'outliers.calib=2'],
};

function llmc(args: string[], killAfterMs?: number): Promise<{ code: number | null; ms: number; stderr: string }> {
  const t0 = performance.now();
  const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const timer = killAfterMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), killAfterMs);
  return new Promise((resolve) =>
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, ms: performance.now() - t0, stderr });
    }),
  );
}

/** Every file under `dir` (relative path → sha256), temp files included. */
function digest(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (d: string) => {
    for (const f of readdirSync(d)) {
      const p = path.join(d, f);
      if (statSync(p).isDirectory()) walk(p);
      else out.set(path.relative(dir, p), createHash('sha256').update(readFileSync(p)).digest('hex'));
    }
  };
  walk(dir);
  return out;
}

const same = (a: Map<string, string>, b: Map<string, string>) => a.size === b.size && [...a].every(([k, v]) => b.get(k) === v);

export const suite: BenchSuite = {
  name: 'kill',
  description: 'SIGKILL at points through a compile of every target: no incomplete artifact accepted, re-runs give the same bytes',
  async run({ quick }) {
    const model = (await cachedFixture('llama-30M', { arch: 'llama', tokenizer: 'byte-level', planted: false })).dir;
    const tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-kill-bench-'));
    const points = quick ? 5 : 20;
    const results: Record<string, unknown> = {};
    try {
      // LLMC_KILL_TARGETS=cuda,ts: those targets only.
      const only = process.env.LLMC_KILL_TARGETS?.split(',');
      for (const [target, opts] of Object.entries(COMPILES).filter(([t]) => !only || only.includes(t))) {
        const common = ['compile', model, ...opts, '--no-eval', '--cache-dir', path.join(tmp, 'cache')];
        const ref = path.join(tmp, `${target}-ref`);
        // Once to fill the profile cache (reorder), once timed: the kills spread over the timed run.
        await llmc([...common, '-o', ref]);
        rmSync(ref, { recursive: true, force: true });
        const whole = await llmc([...common, '-o', ref]);
        if (whole.code !== 0) throw new Error(`${target}: the reference compile failed`);
        const refFiles = digest(ref);
        const r = { runMs: round(whole.ms, 0), points, killedMidway: 0, finishedFirst: 0, incompleteAccepted: 0, wholeAfterKill: 0, rerunFailed: 0, bytesDiffer: 0, leftovers: 0, firstRerunError: null as string | null };
        for (let i = 0; i < points; i++) {
          const out = path.join(tmp, `${target}-${i}`);
          const at = (whole.ms * (i + 0.5)) / points;
          if ((await llmc([...common, '-o', out], at)).code === 0) r.finishedFirst++;
          else {
            r.killedMidway++;
            if (existsSync(path.join(out, 'llmc-manifest.json'))) {
              // Only the whole artifact may be accepted, and then it is the reference's bytes.
              if ((await llmc(['verify', out])).code === 0) {
                if (same(digest(out), refFiles)) r.wholeAfterKill++;
                else r.incompleteAccepted++;
              }
            }
          }
          const rerun = await llmc([...common, '-o', out]);
          if (rerun.code !== 0) {
            r.rerunFailed++;
            r.firstRerunError ??= rerun.stderr.trim().split('\n').pop() ?? '';
          } else if (!same(digest(out), refFiles)) r.bytesDiffer++;
          r.leftovers += readdirSync(tmp).filter((f) => f.startsWith(`.${target}-${i}.`)).length;
          rmSync(out, { recursive: true, force: true });
        }
        results[target] = r;
        process.stderr.write(`${JSON.stringify({ [target]: r })}\n`);
      }
      return results;
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  },
};

runIfMain(import.meta.url, suite);
