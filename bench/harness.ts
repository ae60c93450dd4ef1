/**
 * Benchmark plumbing: the suite interface, timing helpers, a cached fixture generator, and peak
 * RSS of a child process (measured inside the child as its own VmHWM: see peak-rss.ts).
 */
import { spawn } from 'node:child_process';
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { FIXTURE_PRESETS, generateFixture, type FixtureOptions } from '../fixtures/generate.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { expectedTensors } from '../src/core/arch/names.js';

export interface BenchSuite {
  name: string;
  description: string;
  /** quick: a smaller/faster variant for smoke runs. Returns JSON-serializable results. */
  run(opts: { quick: boolean }): Promise<Record<string, unknown>>;
}

const HERE = path.dirname(fileURLToPath(import.meta.url));
/** The repository root (bench/ is compiled to dist/bench/, so this works from both). */
export const REPO_ROOT = path.basename(path.dirname(HERE)) === 'dist' ? path.resolve(HERE, '../..') : path.resolve(HERE, '..');

/** Wall-clock milliseconds of one call. */
export async function timeMs<T>(fn: () => Promise<T> | T): Promise<{ ms: number; result: T }> {
  const t = performance.now();
  const result = await fn();
  return { ms: performance.now() - t, result };
}

/** Run `fn` `reps` times, return the times (ms) and their min/median. */
export async function repeat(reps: number, fn: () => Promise<unknown> | unknown): Promise<{ times: number[]; min: number; median: number }> {
  const times: number[] = [];
  for (let i = 0; i < reps; i++) times.push((await timeMs(fn)).ms);
  const sorted = [...times].sort((a, b) => a - b);
  return { times, min: sorted[0], median: sorted[Math.floor(sorted.length / 2)] };
}

/** MB/s (10^6 bytes per second). */
export const mbPerSec = (bytes: number, ms: number) => bytes / 1e6 / (ms / 1000);

export const round = (x: number, digits = 3) => Number(x.toFixed(digits));

/** Where benchmarks keep generated checkpoints between runs. */
export const BENCH_CACHE = path.join(os.tmpdir(), 'llmc-bench-cache');

/**
 * A generated checkpoint, cached by its options: generated once, reused while its
 * fixture-truth.json (written last) exists.
 */
export async function cachedFixture(preset: keyof typeof FIXTURE_PRESETS, opts: Omit<FixtureOptions, 'dims'>): Promise<{ dir: string; generatedMs: number | null }> {
  const key = [preset, opts.arch, opts.dtype ?? 'F32', `s${opts.seed ?? 1}`, `x${opts.shards ?? 1}`, opts.tokenizer ?? 'byte-level', opts.planted === false ? 'plain' : 'planted', opts.tieEmbeddings ? 'tied' : 'untied'].join('-');
  const dir = path.join(BENCH_CACHE, key);
  if (existsSync(path.join(dir, 'fixture-truth.json'))) return { dir, generatedMs: null };
  await fsp.mkdir(BENCH_CACHE, { recursive: true });
  const { ms } = await timeMs(() => generateFixture(dir, { ...opts, dims: FIXTURE_PRESETS[preset] }));
  return { dir, generatedMs: ms };
}

export interface ChildRun {
  code: number | null;
  stdout: string;
  stderr: string;
  wallMs: number;
  /** The child's peak resident set size in bytes. */
  peakRssBytes: number;
  /** The child's CPU time (user + system, all threads) in ms: less moved by other load than wallMs. */
  cpuMs: number;
}

/**
 * Run `node <script> ...args` and report its peak RSS: the script runs inside
 * dist/bench/peak-rss.js, which records the process's own VmHWM when it exits.
 */
export async function runNodeWithPeakRss(script: string, args: string[], opts: { cwd?: string } = {}): Promise<ChildRun> {
  const wrapper = path.join(REPO_ROOT, 'dist/bench/peak-rss.js');
  const out = path.join(os.tmpdir(), `llmc-peak-rss-${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}.json`);
  const t = performance.now();
  const child = spawn(process.execPath, [wrapper, script, ...args], {
    cwd: opts.cwd ?? REPO_ROOT,
    env: { ...process.env, LLMC_PEAK_RSS_OUT: out },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  const wallMs = performance.now() - t;
  let peakRssBytes = NaN;
  let cpuMs = NaN;
  try {
    const r = JSON.parse(await fsp.readFile(out, 'utf8')) as { vmHwmKiB: number; cpuMs: number };
    peakRssBytes = r.vmHwmKiB * 1024;
    cpuMs = r.cpuMs;
  } finally {
    await fsp.rm(out, { force: true });
  }
  return { code, stdout, stderr, wallMs, peakRssBytes, cpuMs };
}

/** Run `suite` and print its JSON when `moduleUrl` is the script node was started with (`node dist/bench/x.bench.js [--quick]`). */
export function runIfMain(moduleUrl: string, suite: Pick<BenchSuite, 'run'>): void {
  if (!process.argv[1] || fileURLToPath(moduleUrl) !== path.resolve(process.argv[1])) return;
  suite
    .run({ quick: process.argv.includes('--quick') })
    .then((r) => process.stdout.write(JSON.stringify(r, null, 2) + '\n'))
    .catch((e) => {
      process.stderr.write(`${e instanceof Error ? e.stack : e}\n`);
      process.exitCode = 1;
    });
}

/** Copy `files` into `dir` with a plain read/write loop (8 MB buffer): the baseline export speeds are compared with; returns bytes copied. */
export async function plainCopy(files: string[], dir: string): Promise<number> {
  const buf = Buffer.allocUnsafe(8 << 20);
  let total = 0;
  for (const f of files) {
    const src = await fsp.open(f, 'r');
    const dst = await fsp.open(path.join(dir, `copy-${path.basename(f)}`), 'w');
    try {
      for (let pos = 0; ; ) {
        const { bytesRead } = await src.read(buf, 0, buf.length, pos);
        if (bytesRead === 0) break;
        await dst.write(buf, 0, bytesRead, pos);
        pos += bytesRead;
        total += bytesRead;
      }
    } finally {
      await src.close();
      await dst.close();
    }
  }
  return total;
}

/** The parameters of the checkpoint at `dir`: every tensor its architecture expects. */
export async function checkpointParameters(dir: string): Promise<number> {
  const ck = await openCheckpoint(dir);
  try {
    return expectedTensors(ck.spec).reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1), 0);
  } finally {
    await ck.close();
  }
}
