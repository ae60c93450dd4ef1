/**
 * The TS runtime's worker pool (issue 16, goal "2 threads ≥ 1.6× one thread on the 100M fixture
 * decode"): the llama-100M fixture compiled to ts F32 and Q8_0, loaded once with one thread and once
 * with a pool of N threads, greedy decode of the same tokens in interleaved rounds (one thread, then
 * the pool, per round) so a loaded machine slows both alike. Two summaries: `median` (per round the
 * median ms per token; tokens/s from the median round, speed-up = the median of the rounds' ratios)
 * and `fastest` (per token position the fastest of the rounds, as bench/decode.bench.ts: what each
 * runs at when the machine lets it; on a loaded machine the fairer estimate of what a second core gives). Both must produce the
 * same ids (checked). The load average is reported beside: on a shared 2-core machine a second
 * thread only helps when a core is idle.
 *
 * Browser: the stories260K ts artifact decoded (256 tokens from BOS) in headless Chromium through
 * the bundled runtime (bench/browser-runtime.ts), one thread and the pool, beside the same loop in
 * Node; skipped with the reason where Chromium is absent.
 *
 * The fixture and artifacts are kept in $LLMC_BENCH_POOL_DIR (default /dev/shm/llmc-bench-pool, else
 * the temp dir). LLMC_BENCH_THREADS (default 2) sets the pool's size.
 * Standalone: `npx tsc -p tsconfig.bench.json && node dist/bench/pool.bench.js [--quick]`.
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadDir } from '../src/exec/runtime/node.js';
import type { Model } from '../src/exec/runtime/model.js';
import type { WeightTable } from '../src/exec/runtime/interpreter.js';
import { argmax } from '../src/exec/runtime/sampling.js';
import { FIXTURE_PRESETS, generateFixture } from '../fixtures/generate.js';
import { REPO_ROOT, round, runIfMain, type BenchSuite } from './harness.js';
import { compilePlain } from './compile-plain.js';
import { browserUnavailable, decodeTokensPerSecond, withChromium } from './browser-runtime.js';
import type { DecodeLoop } from './decode-round.js';

const WORK = process.env.LLMC_BENCH_POOL_DIR ?? (existsSync('/dev/shm') ? '/dev/shm/llmc-bench-pool' : path.join(os.tmpdir(), 'llmc-bench-pool'));

/** The llama-100M fixture (BF16 source, halving its size) and its ts artifact of `quant`, built once. */
export async function artifact100M(quant: string): Promise<string> {
  const src = path.join(WORK, 'llama-100M');
  if (!existsSync(path.join(src, 'fixture-truth.json'))) {
    await generateFixture(src, { arch: 'llama', dtype: 'BF16', tokenizer: 'none', planted: false, dims: FIXTURE_PRESETS['llama-100M'] });
  }
  const out = path.join(WORK, `ts-${quant}`);
  if (!existsSync(path.join(out, 'llmc-manifest.json'))) await compilePlain(src, out, quant);
  return out;
}

/** Greedy decode of `steps` tokens after `prompt`; ms per decoded token and the ids. */
function decode(model: Model, prompt: number[], steps: number): { ms: number[]; ids: number[] } {
  const cache = model.newCache();
  let logits = model.forward(prompt, cache, { lastOnly: true });
  const ids: number[] = [];
  const ms: number[] = [];
  for (let s = 0; s < steps; s++) {
    const next = argmax(logits);
    ids.push(next);
    const t0 = performance.now();
    logits = model.forward([next], cache, { lastOnly: true });
    ms.push(performance.now() - t0);
  }
  return { ms, ids };
}

const poolStats = (m: Model) => (m as unknown as { table: WeightTable }).table.weight('model.embed_tokens.weight').arena?.poolStats() ?? null;

/** Kernel calls split over the pool for one decoded token (each one wake-up of the workers). */
function poolCallsPerToken(model: Model, prompt: number[]): number {
  const cache = model.newCache();
  const logits = model.forward(prompt, cache, { lastOnly: true });
  const before = poolStats(model)?.splitCalls ?? 0;
  model.forward([argmax(logits)], cache, { lastOnly: true });
  return (poolStats(model)?.splitCalls ?? 0) - before;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function measure(quant: string, threads: number, rounds: number, steps: number): Promise<Record<string, unknown>> {
  const dir = await artifact100M(quant);
  const one = await loadDir(dir);
  const pooled = await loadDir(dir, { threads });
  try {
    const prompt = [1, 17, 300, 42];
    const per: { one: number; pool: number }[] = [];
    const fastOne = new Array<number>(steps).fill(Infinity);
    const fastPool = new Array<number>(steps).fill(Infinity);
    for (let r = 0; r < rounds; r++) {
      const a = decode(one, prompt, steps);
      const b = decode(pooled, prompt, steps);
      if (a.ids.join() !== b.ids.join()) throw new Error(`${quant}: the pool's ids differ from one thread's`);
      per.push({ one: median(a.ms), pool: median(b.ms) });
      for (let s = 0; s < steps; s++) {
        fastOne[s] = Math.min(fastOne[s], a.ms[s]);
        fastPool[s] = Math.min(fastPool[s], b.ms[s]);
      }
    }
    const oneMs = median(per.map((p) => p.one));
    const poolMs = median(per.map((p) => p.pool));
    const sum = (xs: number[]) => xs.reduce((x, y) => x + y, 0);
    return {
      median: {
        tokens_per_s_1_thread: round(1000 / oneMs, 2),
        [`tokens_per_s_${threads}_threads`]: round(1000 / poolMs, 2),
        speedup: round(median(per.map((p) => p.one / p.pool)), 3),
        speedup_per_round: per.map((p) => round(p.one / p.pool, 3)),
      },
      fastest: {
        tokens_per_s_1_thread: round((1000 * steps) / sum(fastOne), 2),
        [`tokens_per_s_${threads}_threads`]: round((1000 * steps) / sum(fastPool), 2),
        speedup: round(sum(fastOne) / sum(fastPool), 3),
      },
      pool_worker_chunks: poolStats(pooled)?.workerChunks ?? 0,
      pool_calls_per_decode_token: poolCallsPerToken(pooled, prompt),
      same_ids: true,
    };
  } finally {
    await one.close();
    await pooled.close();
  }
}

/**
 * stories260K decode tokens/s in headless Chromium and in Node, one thread and `threads`: per
 * configuration a Node model and a page model, `warmup` untimed rounds each, then `rounds` timed
 * rounds alternating between the two (which goes first alternates too), so a loaded machine slows
 * both alike; the ratio is the median of the rounds' page/Node ratios.
 */
export async function browserVsNode(threads: number, rounds: number, steps: number, warmup: number): Promise<Record<string, unknown>> {
  const why = browserUnavailable();
  if (why) return { skipped: why };
  const dir = path.join(WORK, 'stories260K-F32');
  if (!existsSync(path.join(dir, 'llmc-manifest.json'))) await compilePlain(path.join(REPO_ROOT, 'fixtures/models/stories260K'), dir, 'F32');
  // 'reuse': the loop allocates nothing per round; 'fresh' (the loop before branch `chromium`): a new
  // KV cache per round and new logits per token, which on this VM mostly times page faults
  // (bench/decode-round.ts). Both sides run `warmup` untimed rounds first: Chromium page-faults
  // (~20-100 µs each here) for its first few thousand tokens.
  const out: Record<string, unknown> = { model: 'stories260K F32', steps, warmup_rounds: warmup };
  const configs: [number, DecodeLoop, string][] = [[1, 'reuse', '1_thread'], [threads, 'reuse', `${threads}_threads`], [1, 'fresh', '1_thread_fresh']];
  const ids: string[] = [];
  let isolated = true;
  await withChromium(dir, async (open) => {
    for (const [t, loop, key] of configs) {
      const model = await loadDir(dir, { threads: t });
      const page = await open({ threads: t, prompt: [1], maxTokens: steps });
      try {
        ids.push(page.ids.join());
        isolated &&= page.crossOriginIsolated;
        decodeTokensPerSecond(model, steps, loop); // as the page's generate
        for (let r = 0; r < warmup; r++) {
          decodeTokensPerSecond(model, steps, loop);
          await page.round(steps, loop);
        }
        const node: number[] = [];
        const browser: number[] = [];
        for (let r = 0; r < rounds; r++) {
          if (r % 2 === 0) node.push(decodeTokensPerSecond(model, steps, loop));
          browser.push(await page.round(steps, loop));
          if (r % 2 === 1) node.push(decodeTokensPerSecond(model, steps, loop));
        }
        out[`node_tokens_per_s_${key}`] = round(median(node), 1);
        out[`browser_tokens_per_s_${key}`] = round(median(browser), 1);
        out[`browser_over_node_${key}`] = round(median(browser.map((b, i) => b / node[i])), 3);
      } finally {
        await page.close();
        await model.close();
      }
    }
  });
  out.browser_cross_origin_isolated = isolated;
  out.browser_same_ids = ids.every((x) => x === ids[0]);
  return out;
}

export const suite: BenchSuite = {
  name: 'pool',
  description: 'TS runtime worker pool: llama-100M decode (F32, Q8_0), N threads vs one, interleaved rounds',
  async run({ quick }) {
    const threads = Number(process.env.LLMC_BENCH_THREADS ?? 2);
    const rounds = quick ? 3 : 7;
    const steps = quick ? 8 : 24;
    const out: Record<string, unknown> = { cores: os.cpus().length, threads, rounds, tokens_per_round: steps, loadAverageBefore: os.loadavg().map((x) => round(x, 2)) };
    for (const quant of ['F32', 'Q8_0']) out[quant] = await measure(quant, threads, rounds, steps);
    out.browser = await browserVsNode(threads, rounds, quick ? 64 : 256, quick ? 4 : 16);
    out.loadAverageAfter = os.loadavg().map((x) => round(x, 2));
    return out;
  },
};

runIfMain(import.meta.url, suite);
