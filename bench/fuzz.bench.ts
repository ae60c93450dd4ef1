/**
 * The long fuzz run of every reader of untrusted files (bench/fuzz-targets.ts): inputs tried, rejected
 * cleanly (one LlmcError), accepted, crashes (any other exception) and hangs (an input over 1 s), per
 * reader. 100k inputs each (--quick: 2k); LLMC_FUZZ_ONLY=name,… runs only those readers (TMPDIR on a tmpfs
 * spares the disk: every input is a whole file). Standalone: `npx tsc -p tsconfig.bench.json && node dist/bench/fuzz.bench.js [--quick]`.
 */
import fc from 'fast-check';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { fuzzTargets } from './fuzz-targets.js';
import { REPO_ROOT, round, runIfMain, type BenchSuite } from './harness.js';

const HANG_MS = 1000;

/** An input, short, for the report (Uint8Arrays and bigints as JSON cannot say them). */
const describe = (input: unknown) =>
  JSON.stringify(input, (_k, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v instanceof Uint8Array ? `<${v.length} bytes>` : v)).slice(0, 300);

export const suite: BenchSuite = {
  name: 'fuzz',
  description: 'every reader of untrusted files against mutated inputs: crashes and hangs must be 0',
  async run({ quick }) {
    const stories = path.join(REPO_ROOT, 'fixtures/models/stories260K');
    const tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-fuzz-bench-'));
    try {
      const art = path.join(tmp, 'art');
      const src = await openCheckpoint(stories);
      const gguf = path.join(tmp, 'gguf');
      await compile({ source: src, target: 'ts', quant: 'Q8_0', outDir: art, passes: [], progress: silentProgress, note: () => {} });
      const cuda = path.join(tmp, 'cuda');
      await compile({ source: src, target: 'gguf', quant: 'Q8_0', outDir: gguf, passes: [], progress: silentProgress, note: () => {} });
      await compile({ source: src, target: 'cuda', quant: 'fp32', outDir: cuda, passes: [], progress: silentProgress, note: () => {} });
      const qnn = path.join(tmp, 'qnn');
      await compile({ source: src, target: 'qnn', outDir: qnn, passes: ['outliers'], progress: silentProgress, note: () => {} });
      await src.close();
      const targets = await fuzzTargets(stories, {
        ts: { manifest: readFileSync(path.join(art, 'llmc-manifest.json'), 'utf8'), weights: new Uint8Array(readFileSync(path.join(art, 'weights.bin'))) },
        gguf: new Uint8Array(readFileSync(path.join(gguf, 'model.gguf'))),
        onnx: new Uint8Array(readFileSync(path.join(cuda, 'onnx/model.onnx'))),
        dirs: { qnn, cuda },
      });
      // LLMC_FUZZ_PER=n: n inputs per reader (a bounded run; the qnn simulation takes ~0.3 s an input).
      const per = Number(process.env.LLMC_FUZZ_PER) || (quick ? 2_000 : 100_000);
      const results: Record<string, unknown> = {};
      // LLMC_FUZZ_ONLY=name,name: those readers only (a long run split over processes).
      const only = process.env.LLMC_FUZZ_ONLY?.split(',');
      for (const t of targets.filter((x) => !only || only.includes(x.name))) {
        const r = { tried: 0, rejected: 0, accepted: 0, crashes: 0, hangs: 0, slowestMs: 0, firstCrash: null as string | null };
        const t0 = performance.now();
        for (let batch = 0; r.tried < per; batch++) {
          for (const input of fc.sample(t.input, { numRuns: Math.min(1000, per - r.tried), seed: 7919 * (batch + 1) })) {
            const s = performance.now();
            try {
              if (await t.run(input)) r.accepted++;
              else r.rejected++;
            } catch (e) {
              r.crashes++;
              r.firstCrash ??= `${(e as Error).message} ← ${describe(input)}`;
            }
            const ms = performance.now() - s;
            if (ms > HANG_MS) r.hangs++;
            r.slowestMs = Math.max(r.slowestMs, ms);
            r.tried++;
          }
        }
        results[t.name] = { ...r, slowestMs: round(r.slowestMs, 1), perInputMs: round((performance.now() - t0) / r.tried, 3) };
        // Each reader's line as it finishes: a long run that is stopped keeps what it measured.
        process.stderr.write(`${JSON.stringify({ [t.name]: results[t.name] })}\n`);
      }
      targets[0]?.close();
      return results;
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  },
};

runIfMain(import.meta.url, suite);
