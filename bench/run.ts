/**
 * `npm run bench [-- --only a,b] [-- --quick]`: run the suites of bench/suites.ts, print one JSON
 * object on stdout and write it to bench/out/results.json. A failing suite is recorded with its
 * error and makes the exit code 1; the others still run.
 */
import os from 'node:os';
import path from 'node:path';
import { ensureOutputDir, writeFileAtomic } from '../src/core/util/atomic.js';
import { LLMC_VERSION } from '../src/core/version.js';
import { REPO_ROOT, round, timeMs } from './harness.js';
import { SUITES } from './suites.js';

function parseArgs(argv: string[]): { only: string[] | null; quick: boolean } {
  let only: string[] | null = null;
  let quick = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--quick') quick = true;
    else if (a === '--only' || a.startsWith('--only=')) {
      const v = a === '--only' ? argv[++i] : a.slice('--only='.length);
      if (!v) throw new Error('--only needs a comma-separated list of suite names');
      only = v.split(',').map((s) => s.trim()).filter(Boolean);
    } else throw new Error(`unknown argument "${a}" (usage: run.js [--only a,b] [--quick])`);
  }
  return { only, quick };
}

async function main(): Promise<number> {
  let args: ReturnType<typeof parseArgs>;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`bench: ${(e as Error).message}\n`);
    return 2;
  }
  const known = SUITES.map((s) => s.name);
  const unknown = (args.only ?? []).filter((n) => !known.includes(n));
  if (unknown.length) {
    process.stderr.write(`bench: unknown suite(s) ${unknown.join(', ')}; known: ${known.join(', ')}\n`);
    return 2;
  }
  const selected = SUITES.filter((s) => !args.only || args.only.includes(s.name));
  const results: Record<string, unknown> = {};
  let failed = false;
  for (const s of selected) {
    process.stderr.write(`bench: ${s.name}${args.quick ? ' (quick)' : ''} ...\n`);
    try {
      const { ms, result } = await timeMs(() => s.run({ quick: args.quick }));
      results[s.name] = { ok: true, seconds: round(ms / 1000, 1), ...result };
      process.stderr.write(`bench: ${s.name} done in ${(ms / 1000).toFixed(1)} s\n`);
    } catch (e) {
      failed = true;
      results[s.name] = { ok: false, error: (e as Error)?.message ?? String(e) };
      process.stderr.write(`bench: ${s.name} FAILED: ${(e as Error)?.stack ?? e}\n`);
    }
  }
  const report = {
    llmc: LLMC_VERSION,
    node: process.version,
    platform: `${os.platform()} ${os.arch()}`,
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    memoryGB: round(os.totalmem() / 2 ** 30, 1),
    quick: args.quick,
    date: new Date().toISOString(),
    suites: results,
  };
  const text = JSON.stringify(report, null, 2) + '\n';
  process.stdout.write(text);
  const outDir = path.join(REPO_ROOT, 'bench/out');
  await ensureOutputDir(outDir);
  await writeFileAtomic(path.join(outDir, 'results.json'), text);
  return failed ? 1 : 0;
}

process.exitCode = await main();
