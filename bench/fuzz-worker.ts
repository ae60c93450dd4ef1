/**
 * One fuzz worker (bench/fuzz.bench.ts): mutants [from, to) of one reader, in-process. The index of
 * the mutant in hand and the counts are in shared memory, so the parent sees a hang (the index stuck
 * past the limit) and kills this thread without losing what it counted.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parentPort, workerData } from 'node:worker_threads';
import { BadMessage, fuzzTargets, type FuzzTarget } from './fuzz-targets.js';
import { mutant } from './fuzz-mutate.js';

export interface WorkerJob {
  stories: string;
  art: { ts: string; gguf: string; onnx: string; qnn: string; cuda: string };
  reader: string;
  from: number;
  to: number;
  /** How many accepted inputs this job runs on the costly path (`use`). */
  useCap: number;
  seed: number;
  /** Int32: [index in hand, busy, mutants started]; Float64 at byte 64: counts (see COUNTS). */
  shared: SharedArrayBuffer;
}

/** The counts in shared memory, in order. */
export const COUNTS = ['tried', 'rejected', 'accepted', 'crashes', 'used', 'usedRejected', 'usedAccepted', 'usedCrashes', 'slowestMs', 'totalMs'] as const;
export type Count = (typeof COUNTS)[number];

/** A crash report: the reader, the mutant's index and operators, what was thrown. */
export interface CrashReport {
  reader: string;
  index: number;
  stage: 'read' | 'use';
  file: string;
  ops: string[];
  message: string;
  stack?: string;
}

export async function targetsFor(job: Pick<WorkerJob, 'stories' | 'art'>): Promise<FuzzTarget[]> {
  const bytes = (f: string) => new Uint8Array(readFileSync(f));
  return fuzzTargets(job.stories, {
    ts: { manifest: readFileSync(path.join(job.art.ts, 'llmc-manifest.json'), 'utf8'), weights: bytes(path.join(job.art.ts, 'weights.bin')) },
    gguf: bytes(job.art.gguf),
    onnx: bytes(job.art.onnx),
    dirs: { qnn: job.art.qnn, cuda: job.art.cuda },
  });
}

/** Mutants from..to of job.reader; returns when done (counts in shared memory, crashes posted). */
export async function work(job: WorkerJob, post: (c: CrashReport) => void): Promise<void> {
  const targets = await targetsFor(job);
  const t = targets.find((x) => x.name === job.reader);
  if (!t) throw new Error(`no reader ${job.reader}`);
  const state = new Int32Array(job.shared, 0, 3);
  const c = new Float64Array(job.shared, 64, COUNTS.length);
  const at = Object.fromEntries(COUNTS.map((k, i) => [k, i])) as Record<Count, number>;
  const crash = (index: number, stage: 'read' | 'use', file: string, ops: string[], e: unknown) => {
    const err = e as Error;
    post({ reader: t.name, index, stage, file, ops, message: e instanceof BadMessage ? `bad message: ${err.message}` : String(err?.message ?? e).slice(0, 500), stack: err?.stack?.split('\n').slice(0, 6).join('\n') });
  };
  try {
    for (let i = job.from; i < job.to; i++) {
      Atomics.store(state, 0, i);
      Atomics.store(state, 1, 1);
      Atomics.add(state, 2, 1);
      const s = performance.now(); // the mutant's making counts too
      const m = mutant(t.files, job.seed, i);
      let accepted = false;
      try {
        accepted = await t.read(m.files);
        c[at[accepted ? 'accepted' : 'rejected']]++;
      } catch (e) {
        c[at.crashes]++;
        crash(i, 'read', m.file, m.ops, e);
      }
      if (accepted && t.use && c[at.used] < job.useCap) {
        c[at.used]++;
        try {
          c[at[(await t.use(m.files)) ? 'usedAccepted' : 'usedRejected']]++;
        } catch (e) {
          c[at.usedCrashes]++;
          crash(i, 'use', m.file, m.ops, e);
        }
      }
      const ms = performance.now() - s;
      c[at.slowestMs] = Math.max(c[at.slowestMs], ms);
      c[at.totalMs] += ms;
      c[at.tried]++;
    }
  } finally {
    Atomics.store(state, 1, 0);
    t.close();
  }
}

if (parentPort && workerData?.reader) {
  const port = parentPort;
  // What the readers print (onnxruntime's warnings) stays in this thread.
  process.stdout.write = () => true;
  process.stderr.write = () => true;
  work(workerData as WorkerJob, (c) => port.postMessage({ crash: c }))
    .then(() => port.postMessage({ done: true }))
    .catch((e: Error) => port.postMessage({ failed: String(e?.stack ?? e) }));
}
