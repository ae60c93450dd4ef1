/**
 * The long fuzz run of every reader of untrusted files (bench/fuzz-targets.ts): mutants (bench/fuzz-mutate.ts:
 * bit flips, byte runs, truncations, value swaps, deleted/duplicated keys, deep nesting) through the real
 * readers in-process, in worker threads. Each mutant is classified clean (one LlmcError of one bounded
 * line), accepted, crash (anything else thrown, or a worker that died) or hang (over the per-mutant limit:
 * the worker is killed and a fresh one goes on at the next index). Accepted inputs of the readers with a
 * costly use (the qnn simulation, onnxruntime) run it for a sample (`used`).
 *
 *   npx tsc -p tsconfig.bench.json && node dist/bench/fuzz.bench.js [--quick] > fuzz.json
 *
 * LLMC_FUZZ_PER=n mutants per reader (default 100,000; --quick 2,000); LLMC_FUZZ_ONLY=name,… those readers;
 * LLMC_FUZZ_WORKERS=n threads (default: the cores); LLMC_FUZZ_LIMIT_MS per-mutant limit (default 20,000 as in
 * issue 36's campaign: wall time, and a loaded machine stretches it);
 * LLMC_FUZZ_USE=n accepted inputs run on the costly path per reader (default 300; --quick 20);
 * LLMC_FUZZ_JOB=n mutants per thread start (default 10,000); LLMC_FUZZ_FROM=i the first index (a run that goes on
 * from where another stopped);
 * LLMC_FUZZ_RECORD=reader:index[:use],… stores those mutants (a crash the run found) as regression files in
 * bench/fuzz-corpus/regressions/ (binary ones shrunk), which test/reliability.test.ts and
 * test/artifact-files.test.ts replay. A reader that takes a path gets one file per thread, in TMPDIR
 * (/dev/shm when it is there and TMPDIR is not set).
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { COUNTS, targetsFor, type CrashReport, type WorkerJob } from './fuzz-worker.js';
import { FUZZ_SEED, recordRegression } from './fuzz-targets.js';
import { REPO_ROOT, round, runIfMain, type BenchSuite } from './harness.js';

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fuzz-worker.js');
/** The readers, in the order of issue 36's table. */
export const READERS = [
  'model.safetensors',
  'config.json',
  'tokenizer.json',
  'ts llmc-manifest.json',
  'ts weights.bin',
  '.gguf',
  'cuda onnx/model.onnx',
  'cuda config.json',
  'qnn graph/subgraphs.json',
  'qnn weights/shadow_index.json',
  'qnn config.json',
  'budgets.json',
  'llmc.config.json',
  'calibration file',
  'tree-search latency file',
  'profile cache entry',
];

interface ReaderResult {
  mutants: number;
  clean: number;
  accepted: number;
  crash: number;
  hang: number;
  /** Accepted inputs also run on the costly path (qnn simulation, onnxruntime): clean / accepted / crash there. */
  used?: { runs: number; clean: number; accepted: number; crash: number };
  perMutantMs: number;
  slowestMs: number;
  wallS: number;
  crashes: CrashReport[];
  hangs: { index: number }[];
}

/** Artifacts compiled from stories260K (the repo's fixture) for the artifact readers. */
export async function artifacts(tmp: string): Promise<WorkerJob['art']> {
  const src = await openCheckpoint(path.join(REPO_ROOT, 'fixtures/models/stories260K'));
  const out = (name: string) => path.join(tmp, name);
  const opts = { source: src, progress: silentProgress, note: () => {} };
  await compile({ ...opts, target: 'ts', quant: 'Q8_0', outDir: out('ts'), passes: [] });
  await compile({ ...opts, target: 'gguf', quant: 'Q8_0', outDir: out('gguf'), passes: [] });
  await compile({ ...opts, target: 'cuda', quant: 'fp32', outDir: out('cuda'), passes: [] });
  await compile({ ...opts, target: 'qnn', outDir: out('qnn'), passes: ['outliers'] });
  await src.close();
  return { ts: out('ts'), gguf: path.join(out('gguf'), 'model.gguf'), onnx: path.join(out('cuda'), 'onnx/model.onnx'), qnn: out('qnn'), cuda: out('cuda') };
}

/** Runs the jobs on `workers` threads; a thread whose mutant passes `limitMs` is killed (a hang) and replaced. */
async function runJobs(jobs: Omit<WorkerJob, 'shared'>[], workers: number, limitMs: number, onJob: (job: Omit<WorkerJob, 'shared'>, counts: Float64Array, crashes: CrashReport[], hangs: number[]) => void): Promise<void> {
  const queue = [...jobs];
  const slot = async () => {
    for (let job = queue.shift(); job; job = queue.shift()) {
      const crashes: CrashReport[] = [];
      const hangs: number[] = [];
      const total = new Float64Array(COUNTS.length);
      let from = job.from;
      while (from < job.to) {
        const shared = new SharedArrayBuffer(64 + 8 * COUNTS.length);
        const state = new Int32Array(shared, 0, 3);
        state[0] = from;
        const w = new Worker(WORKER, { workerData: { ...job, from, shared }, resourceLimits: { maxOldGenerationSizeMb: 3072 } });
        const ended = await new Promise<{ next: number }>((resolve, reject) => {
          // The clock of a mutant starts when the thread starts it (not while the thread loads).
          let last = 0;
          let since = performance.now();
          const timer = setInterval(() => {
            const i = Atomics.load(state, 0);
            const started = Atomics.load(state, 2);
            if (started !== last) [last, since] = [started, performance.now()];
            else if (started > 0 && Atomics.load(state, 1) === 1 && performance.now() - since > limitMs) {
              clearInterval(timer);
              hangs.push(i);
              void w.terminate().then(() => resolve({ next: i + 1 }));
            }
          }, 100);
          w.on('message', (m: { crash?: CrashReport; done?: true; failed?: string }) => {
            if (m.crash) crashes.push(m.crash);
            if (m.failed) {
              clearInterval(timer);
              reject(new Error(`fuzz worker for ${job.reader} failed: ${m.failed}`));
            }
            if (m.done) {
              clearInterval(timer);
              resolve({ next: job.to });
            }
          });
          // A thread that dies (out of memory, an abort in native code) is a crash of the mutant in hand.
          w.on('error', (e) => {
            clearInterval(timer);
            const i = Atomics.load(state, 0);
            crashes.push({ reader: job.reader, index: i, stage: 'read', file: '?', ops: [], message: `worker died: ${e.message}` });
            resolve({ next: i + 1 });
          });
        });
        const c = new Float64Array(shared, 64, COUNTS.length);
        COUNTS.forEach((k, i) => (total[i] = k === 'slowestMs' ? Math.max(total[i], c[i]) : total[i] + c[i]));
        from = ended.next;
      }
      onJob(job, total, crashes, hangs);
    }
  };
  await Promise.all(Array.from({ length: workers }, slot));
}

export const suite: BenchSuite = {
  name: 'fuzz',
  description: 'every reader of untrusted files against 100k mutants each, in-process: crashes and hangs must be 0',
  async run({ quick }) {
    const env = process.env;
    const per = Number(env.LLMC_FUZZ_PER) || (quick ? 2_000 : 100_000);
    const workers = Number(env.LLMC_FUZZ_WORKERS) || os.availableParallelism();
    const limitMs = Number(env.LLMC_FUZZ_LIMIT_MS) || 20_000;
    const useCap = Number(env.LLMC_FUZZ_USE) || (quick ? 20 : 300);
    const only = env.LLMC_FUZZ_ONLY?.split(',');
    const readers = READERS.filter((r) => !only || only.includes(r));
    // Every mutant of a reader that takes a path is written (one file per thread): on a tmpfs, not the disk.
    if (!env.TMPDIR && existsSync('/dev/shm')) env.TMPDIR = '/dev/shm';
    const load = [os.loadavg()[0]];
    const tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-fuzz-bench-'));
    try {
      const art = await artifacts(tmp);
      const stories = path.join(REPO_ROOT, 'fixtures/models/stories260K');
      if (env.LLMC_FUZZ_RECORD) {
        const targets = await targetsFor({ stories, art });
        const recorded = [];
        for (const one of env.LLMC_FUZZ_RECORD.split(',')) {
          const [, reader, index, use] = /^(.+?):(\d+)(:use)?$/.exec(one) ?? [];
          const t = targets.find((x) => x.name === reader);
          if (!t) throw new Error(`LLMC_FUZZ_RECORD: no reader ${reader} (reader:index[:use])`);
          recorded.push(await recordRegression(t, Number(index), use ? 'use' : 'read', env.LLMC_FUZZ_FOUND ?? 'found by bench/fuzz'));
        }
        targets[0].close();
        return { recorded };
      }
      // Jobs of up to LLMC_FUZZ_JOB mutants (a thread starts per job) over indices [from, per): interleaved across
      // readers, or reader after reader in LLMC_FUZZ_ONLY's order (a run cut short then has whole readers done).
      const from = Number(env.LLMC_FUZZ_FROM) || 0;
      const size = Math.min(Number(env.LLMC_FUZZ_JOB) || 10_000, Math.ceil((per - from) / workers));
      const nJobs = Math.ceil((per - from) / size);
      const job = (reader: string, j: number) => ({ stories, art, reader, from: from + j * size, to: Math.min(per, from + (j + 1) * size), useCap: Math.ceil(useCap / nJobs), seed: FUZZ_SEED });
      const jobs: Omit<WorkerJob, 'shared'>[] = only
        ? only.filter((r) => readers.includes(r)).flatMap((reader) => Array.from({ length: nJobs }, (_, j) => job(reader, j)))
        : Array.from({ length: nJobs }, (_, j) => readers.map((reader) => job(reader, j))).flat();
      const results: Record<string, ReaderResult> = {};
      const started: Record<string, number> = {};
      const t0 = performance.now();
      let left = jobs.length;
      await runJobs(jobs, workers, limitMs, (job, c, crashes, hangs) => {
        started[job.reader] ??= t0;
        const at = (k: (typeof COUNTS)[number]) => c[COUNTS.indexOf(k)];
        const r = (results[job.reader] ??= { mutants: 0, clean: 0, accepted: 0, crash: 0, hang: 0, perMutantMs: 0, slowestMs: 0, wallS: 0, crashes: [], hangs: [] });
        r.mutants += at('tried') + hangs.length + crashes.filter((x) => x.message.startsWith('worker died')).length;
        r.clean += at('rejected');
        r.accepted += at('accepted');
        r.crash += at('crashes') + crashes.filter((x) => x.message.startsWith('worker died')).length;
        r.hang += hangs.length;
        r.perMutantMs = round((r.perMutantMs * (r.mutants - at('tried')) + at('totalMs')) / Math.max(1, r.mutants), 3);
        r.slowestMs = round(Math.max(r.slowestMs, at('slowestMs')), 1);
        r.wallS = round((performance.now() - t0) / 1000, 1);
        if (at('used') > 0 || r.used) {
          r.used ??= { runs: 0, clean: 0, accepted: 0, crash: 0 };
          r.used.runs += at('used');
          r.used.clean += at('usedRejected');
          r.used.accepted += at('usedAccepted');
          r.used.crash += at('usedCrashes');
        }
        r.crashes.push(...crashes.slice(0, Math.max(0, 20 - r.crashes.length)));
        r.hangs.push(...hangs.map((index) => ({ index })));
        // Each reader's counts so far, as its jobs finish: a long run that is stopped keeps what it measured.
        const { crashes: _c, hangs: _h, ...counts } = r;
        process.stderr.write(`${JSON.stringify({ [job.reader]: { ...counts, firstCrash: r.crashes[0]?.message ?? null } })}\n`);
        if (--left % 4 === 0) process.stderr.write(`fuzz: ${jobs.length - left}/${jobs.length} jobs, ${round((performance.now() - t0) / 1000, 0)} s\n`);
      });
      load.push(os.loadavg()[0]);
      const table = ['| reader (command) | mutants | clean | accepted | crash | hang | costly path run (clean / accepted / crash) | ms per mutant | mutants/s per thread |', '|---|---|---|---|---|---|---|---|---|'];
      for (const name of readers) {
        const r = results[name];
        if (!r) continue;
        const u = r.used ? `${r.used.runs} (${r.used.clean} / ${r.used.accepted} / ${r.used.crash})` : '—';
        table.push(`| ${name} | ${r.mutants} | ${r.clean} | ${r.accepted} | ${r.crash} | ${r.hang} | ${u} | ${r.perMutantMs} | ${round(1000 / Math.max(r.perMutantMs, 1e-3), 0)} |`);
        for (const c of r.crashes) process.stderr.write(`crash: ${name} #${c.index} (${c.stage}): ${c.message.slice(0, 200)}; record: LLMC_FUZZ_RECORD='${name}:${c.index}${c.stage === 'use' ? ':use' : ''}'\n`);
      }
      process.stderr.write(`${table.join('\n')}\n`);
      return { seed: FUZZ_SEED, indices: [from, per], perReader: per - from, workers, limitMs, loadAverage: { start: round(load[0], 1), end: round(load[1], 1) }, wallS: round((performance.now() - t0) / 1000, 1), cpus: os.cpus()[0]?.model, readers: results, table };
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  },
};

runIfMain(import.meta.url, suite);
