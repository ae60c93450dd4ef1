/**
 * Decode speed against C (issue 16): the TS runtime (warm, one thread, F32) and llama2.c's `run.c`
 * (gcc -O2, and -O3 -march=native) greedy-decoding stories260K from BOS for 512 positions, rounds
 * interleaved (C, then TS, per round) so a loaded machine slows both alike; per position the fastest
 * forward over the rounds. Tokens/s up to each context length (64, 128, 256, 512) and in a window
 * just before it, with ratios TS / run.c -O2. Both must produce the same ids (checked).
 * Cold start: `llmc run <artifact> --prompt-ids 1 --max-tokens 256` as a user runs it (a fresh
 * node process), wall time and start-up (time to the first id, from llmc's own --json timing where
 * given, else the process start), against the warm decode of the same 256 tokens in this process.
 *
 * The C baseline is built from source: `git clone https://github.com/karpathy/llama2.c` and set
 * LLAMA2C_RUN_C=$PWD/llama2.c/run.c (gcc required); without it the C rows are skipped with the reason.
 * Standalone: `npx tsc -p tsconfig.bench.json && LLAMA2C_RUN_C=... node dist/bench/decode.bench.js [--quick]`.
 */
import { execFile } from 'node:child_process';
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { loadDir } from '../src/exec/runtime/node.js';
import type { Model } from '../src/exec/runtime/model.js';
import { argmax } from '../src/core/sampling.js';
import { REPO_ROOT, round, runIfMain, type BenchSuite } from './harness.js';
import { compilePlain } from './compile-plain.js';
import { buildLlama2c, runLlama2c, writeLlama2c, type CDecode } from './llama2c.js';

const STORIES = path.join(REPO_ROOT, 'fixtures/models/stories260K');
const WORK = path.join(os.tmpdir(), 'llmc-bench-decode');
const STEPS = 512;
const CONTEXTS = [64, 128, 256, 512];
const WINDOW = 32;

/** One greedy decode from BOS through the runtime's KV cache: ids and per-position forward time (ns). */
function decodeTs(model: Model, steps: number): CDecode {
  const cache = model.newCache();
  const ids: number[] = [];
  const ns: number[] = [];
  let token = 1;
  for (let p = 0; p < steps; p++) {
    const t0 = process.hrtime.bigint();
    const logits = model.forward([token], cache, { lastOnly: true });
    ns.push(Number(process.hrtime.bigint() - t0));
    const next = argmax(logits);
    ids.push(next);
    token = next;
  }
  return { ids, ns };
}

const fastest = (a: number[] | undefined, b: number[]) => (a ? a.map((x, i) => Math.min(x, b[i])) : b);
const tokPerSec = (ns: number[], from: number, to: number) => (to - from) / (ns.slice(from, to).reduce((s, x) => s + x, 0) / 1e9);

/** Tokens/s from position 0 up to each context length, and in the WINDOW positions before it. */
function profile(ns: number[]) {
  return Object.fromEntries(
    CONTEXTS.filter((c) => c <= ns.length).map((c) => [c, { upTo: round(tokPerSec(ns, 0, c), 1), window: round(tokPerSec(ns, c - WINDOW, c), 1) }]),
  );
}

const exec = promisify(execFile);

/** `llmc run` starts from its one-file bundle, which a `tsc` leaves stale: bundle once before timing it. */
let runBundle: Promise<unknown> | null = null;

/** `llmc run` in a fresh process: wall ms of the whole command. */
async function coldRun(artifact: string, tokens: number): Promise<{ wallMs: number; ids: number[] }> {
  await (runBundle ??= exec(process.execPath, [path.join(REPO_ROOT, 'scripts/bundle-run.mjs')]));
  const t0 = performance.now();
  const { stdout } = await exec(process.execPath, [path.join(REPO_ROOT, 'bin/llmc.js'), 'run', artifact, '--prompt-ids', '1', '--max-tokens', String(tokens), '--json'], {
    maxBuffer: 1 << 24,
  });
  const wallMs = performance.now() - t0;
  return { wallMs, ids: (JSON.parse(stdout) as { generated_ids: number[] }).generated_ids };
}

/** A fresh node process that does nothing: what every command pays before llmc's own code. */
async function nodeStartMs(): Promise<number> {
  const t0 = performance.now();
  await exec(process.execPath, ['-e', '0']);
  return performance.now() - t0;
}

export const suite: BenchSuite = {
  name: 'decode',
  description: 'TS runtime decode vs llama2.c run.c (-O2, -O3 -march=native) on stories260K up to 512 tokens of context, and `llmc run` cold vs warm',
  async run(opts) {
    const quick = Boolean(opts?.quick);
    const rounds = quick ? 3 : 9;
    await fsp.mkdir(WORK, { recursive: true });
    const artifact = path.join(WORK, 'stories260K-ts');
    await compilePlain(STORIES, artifact, 'F32');
    const model = await loadDir(artifact);
    const bin = path.join(WORK, 'stories260K.bin');
    await writeLlama2c(STORIES, bin);
    const builds: Record<string, string | { exe: string }> = {
      'run.c -O2': await buildLlama2c(WORK, ['-O2']),
      'run.c -O3 -march=native': await buildLlama2c(WORK, ['-O3', '-march=native']),
    };
    const skipped = Object.fromEntries(Object.entries(builds).filter(([, b]) => typeof b === 'string')) as Record<string, string>;

    decodeTs(model, STEPS); // warm-up (JIT, kernels)
    const best: Record<string, number[]> = {};
    const ids: Record<string, number[]> = {};
    for (let r = 0; r < rounds; r++) {
      for (const [name, b] of Object.entries(builds)) {
        if (typeof b === 'string') continue;
        const c = await runLlama2c(b.exe, bin, STEPS, 1);
        best[name] = fastest(best[name], c.ns);
        ids[name] ??= c.ids;
      }
      const t = decodeTs(model, STEPS);
      best.ts = fastest(best.ts, t.ns);
      ids.ts ??= t.ids;
    }
    const speeds = Object.fromEntries(Object.entries(best).map(([k, ns]) => [k, profile(ns)]));
    const ratios: Record<string, number> = {};
    const base = best['run.c -O2'];
    if (base) {
      for (const c of CONTEXTS) {
        ratios[`ts / run.c -O2, up to ${c}`] = round(tokPerSec(best.ts, 0, c) / tokPerSec(base, 0, c));
        ratios[`ts / run.c -O2, window before ${c}`] = round(tokPerSec(best.ts, c - WINDOW, c) / tokPerSec(base, c - WINDOW, c));
      }
    }
    const sameIds = Object.fromEntries(Object.entries(ids).map(([k, v]) => [k, JSON.stringify(v) === JSON.stringify(ids.ts)]));

    // Cold start: `llmc run` as a user runs it vs the warm runtime over the same 256 tokens.
    const coldTokens = 256;
    const warmMs = best.ts.slice(0, coldTokens).reduce((s, x) => s + x, 0) / 1e6;
    await coldRun(artifact, coldTokens); // fills the kernel store, the page cache
    const colds: number[] = [];
    const nodes: number[] = [];
    let coldIds: number[] = [];
    for (let r = 0; r < (quick ? 3 : 7); r++) {
      const c = await coldRun(artifact, coldTokens);
      colds.push(c.wallMs);
      coldIds = c.ids;
      nodes.push(await nodeStartMs());
    }
    const median = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
    const coldMs = median(colds);
    const nodeMs = median(nodes);
    return {
      model: 'stories260K F32, greedy from BOS, one thread',
      positions: STEPS,
      rounds,
      skipped,
      tokPerSec: speeds,
      ratios,
      sameIdsAsTs: sameIds,
      cold: {
        command: `llmc run <ts artifact> --prompt-ids 1 --max-tokens ${coldTokens} --json`,
        wallMsMedian: round(coldMs, 1),
        nodeStartMsMedian: round(nodeMs, 1),
        warmDecodeMs: round(warmMs, 1),
        'tokens/s cold (wall)': round(coldTokens / (coldMs / 1000), 1),
        'tokens/s warm': round(coldTokens / (warmMs / 1000), 1),
        'cold / warm': round(warmMs / coldMs),
        'start-up ms (cold wall - warm decode)': round(coldMs - warmMs, 1),
        'start-up ms beyond a bare node process': round(coldMs - warmMs - nodeMs, 1),
        idsMatchWarm: JSON.stringify(coldIds) === JSON.stringify(ids.ts.slice(0, coldTokens)),
      },
      targets: {
        'ts >= 1.0x run.c -O2 at every context up to 512': base ? CONTEXTS.every((c) => ratios[`ts / run.c -O2, up to ${c}`] >= 1) : 'skipped',
        'llmc run cold >= 0.7x warm (256 tokens)': warmMs / coldMs >= 0.7,
      },
    };
  },
};

runIfMain(import.meta.url, suite);
