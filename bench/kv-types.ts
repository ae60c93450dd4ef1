/**
 * The cost of keeping the TS runtime's KV cache as f16 or q8_0 (`llmc run --kv-type`), the suite
 * `kv-types` (bench/out/kv-types.json when run standalone):
 *  - speed: per model (dense-28M from ../shared, the llama-100M fixture at Q8_0) one process decodes
 *    the same 512 token ids through a cache of each type, the types interleaved round by round (a
 *    loaded machine slows each alike); per type ms per token over the whole run and over its last 64
 *    positions (context 448–512), and per round the ratio to f32 (median over rounds);
 *  - quality: perplexity of the held-out text (windows of 256 tokens, teacher-forced through the
 *    cache) per type, and the paired per-window difference of mean NLL against f32 with its 95%
 *    interval (t ≈ 1.96 · sd / √n over windows);
 *  - memory: per type a child process decodes `decode tokens` greedily after BOS and reports its
 *    VmHWM, beside weights + KV cache + 64 MB (issue 34 item 5's bound).
 * Standalone: `node dist/bench/kv-types.js [--quick]` (dense-28M compiled into $LLMC_BENCH_POOL_DIR,
 * or pass `<ts artifact> <held-out text> [windows] [decode tokens]`); the memory child is
 * bench/kv-child.ts. Without ../shared the dense-28M rows are skipped with the reason.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadTokenizer } from '../src/core/tokenizer/index.js';
import type { KvType } from '../src/core/pipeline/target.js';
import { loadDir } from '../src/exec/runtime/node.js';
import type { Model } from '../src/exec/runtime/model.js';
import { REPO_ROOT, round, type BenchSuite } from './harness.js';
import { compilePlain } from './compile-plain.js';
import { artifact100M } from './pool.bench.js';

const TYPES: KvType[] = ['f32', 'f16', 'q8_0'];
const SELF = fileURLToPath(import.meta.url);
const CHILD = path.join(path.dirname(SELF), 'kv-child.js');
const SHARED = path.resolve(REPO_ROOT, '../shared/models/trained');
const WORK = process.env.LLMC_BENCH_POOL_DIR ?? (existsSync('/dev/shm') ? '/dev/shm/llmc-bench-pool' : path.join(os.tmpdir(), 'llmc-bench-pool'));

const median = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

/** Decode `ids` one token at a time through a fresh cache of each type, interleaved per round: ms per token (all, last 64) and ratios to f32. */
function speed(model: Model, ids: number[], rounds: number): Record<string, unknown> {
  const V = model.spec.vocabSize;
  const into = new Float32Array(V);
  const caches = Object.fromEntries(TYPES.map((t) => [t, model.newCache(t)]));
  const all: Record<string, number[]> = Object.fromEntries(TYPES.map((t) => [t, []]));
  const tail: Record<string, number[]> = Object.fromEntries(TYPES.map((t) => [t, []]));
  const cpu: Record<string, number[]> = Object.fromEntries(TYPES.map((t) => [t, []]));
  const last = Math.min(64, ids.length);
  for (let r = -1; r < rounds; r++) {
    for (const type of r % 2 ? TYPES : [...TYPES].reverse()) {
      const cache = caches[type];
      cache.length = 0;
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      let t1 = t0;
      for (let i = 0; i < ids.length; i++) {
        if (i === ids.length - last) t1 = performance.now();
        model.forward([ids[i]], cache, { lastOnly: true, into });
      }
      const t2 = performance.now();
      const c = process.cpuUsage(c0);
      if (r < 0) continue; // warm-up: JIT, kernels, the caches' memory
      cpu[type].push((c.user + c.system) / 1000 / ids.length);
      all[type].push((t2 - t0) / ids.length);
      tail[type].push((t2 - t1) / last);
    }
  }
  const ratio = (m: Record<string, number[]>, t: KvType) => round(median(m[t].map((x, i) => m.f32[i] / x)), 3);
  return {
    positions: ids.length,
    rounds,
    msPerToken: Object.fromEntries(TYPES.map((t) => [t, round(median(all[t]), 3)])),
    [`msPerToken, last ${last} positions`]: Object.fromEntries(TYPES.map((t) => [t, round(median(tail[t]), 3)])),
    'speed vs f32 (median of per-round ratios)': Object.fromEntries(TYPES.map((t) => [t, ratio(all, t)])),
    [`speed vs f32, last ${last} positions`]: Object.fromEntries(TYPES.map((t) => [t, ratio(tail, t)])),
    // One thread: CPU time per token is what the decode costs when another process takes the core at times.
    cpuMsPerToken: Object.fromEntries(TYPES.map((t) => [t, round(median(cpu[t]), 3)])),
    'speed vs f32 by CPU time (median of per-round ratios)': Object.fromEntries(TYPES.map((t) => [t, ratio(cpu, t)])),
    loadAverage: os.loadavg().map((x) => round(x, 2)),
  };
}

/** Held-out perplexity per type over `windows` windows of 256 tokens, paired against f32. */
function quality(model: Model, ids: number[], windows: number): Record<string, unknown> {
  const W = 256;
  const nWin = Math.min(windows, Math.floor(ids.length / W));
  const V = model.spec.vocabSize;
  const nll: Record<string, number[]> = {};
  for (const type of TYPES) {
    nll[type] = [];
    for (let w = 0; w < nWin; w++) {
      const x = ids.slice(w * W, (w + 1) * W);
      const logits = model.forward(x, model.newCache(type));
      let s = 0;
      for (let t = 0; t + 1 < W; t++) {
        const row = logits.subarray(t * V, (t + 1) * V);
        let m = -Infinity;
        for (let i = 0; i < V; i++) m = Math.max(m, row[i]);
        let z = 0;
        for (let i = 0; i < V; i++) z += Math.exp(row[i] - m);
        s += m + Math.log(z) - row[x[t + 1]];
      }
      nll[type].push(s / (W - 1));
    }
  }
  const mean = (a: number[]) => a.reduce((x, y) => x + y, 0) / a.length;
  return {
    windows: nWin,
    windowTokens: W,
    ...Object.fromEntries(
      TYPES.map((type) => {
        const d = nll[type].map((x, i) => x - nll.f32[i]);
        const md = mean(d);
        const sd = Math.sqrt(d.reduce((s, x) => s + (x - md) ** 2, 0) / Math.max(1, d.length - 1));
        return [type, { perplexity: Math.exp(mean(nll[type])), deltaNll: md, deltaNll95: (1.96 * sd) / Math.sqrt(d.length), perplexityRatio: Math.exp(md) }];
      }),
    ),
  };
}

/**
 * Per type a child's VmHWM decoding `n` tokens, against weights + KV cache + 64 MB: started as `llmc
 * run` starts (V8's young generation held at its initial size, holdYoungGeneration), and with
 * node's default sizing for comparison (V8 grows each semi-space as tokens leave garbage: ~5 MB of
 * peak at llama-100M, what was over the bound).
 */
function memory(dir: string, n: number): Record<string, unknown> {
  const weightsBytes = statSync(path.join(dir, 'weights.bin')).size;
  const one = (type: KvType, extra: string[]) => {
    const r = JSON.parse(execFileSync(process.execPath, [CHILD, dir, type, String(n), ...extra], { encoding: 'utf8', maxBuffer: 1 << 20 })) as { vmHwmKiB: number; kvBytes: number; tokPerSec: number };
    const boundKiB = (weightsBytes + r.kvBytes + 64 * 2 ** 20) / 1024;
    return { ...r, weightsBytes, boundKiB: Math.round(boundKiB), overBoundKiB: Math.round(r.vmHwmKiB - boundKiB), withinBound: r.vmHwmKiB <= boundKiB };
  };
  return {
    decodeTokens: n,
    ...Object.fromEntries(TYPES.map((type) => [type, one(type, [])])),
    "node's default young generation": Object.fromEntries(TYPES.map((type) => [type, one(type, ['node-default'])])),
  };
}

/** Token ids of the held-out text (dense-28M's tokenizer). */
function heldOut(dir: string, textFile: string): number[] {
  const tok = loadTokenizer(readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  return tok.encode(readFileSync(textFile, 'utf8'));
}

async function dense28M(): Promise<string | null> {
  const src = path.join(SHARED, 'dense-28M');
  if (!existsSync(path.join(src, 'config.json'))) return null;
  const out = path.join(WORK, 'dense-28M-ts-F32');
  if (!existsSync(path.join(out, 'llmc-manifest.json'))) await compilePlain(src, out, 'F32');
  return out;
}

export const suite: BenchSuite = {
  name: 'kv-types',
  description: 'KV cache kept as f16 / q8_0 against f32: decode speed (interleaved), held-out perplexity, peak memory while decoding',
  async run({ quick }) {
    const rounds = quick ? 2 : 5;
    const positions = quick ? 256 : 512;
    const out: Record<string, unknown> = {};
    const dense = await dense28M();
    const text = path.join(SHARED, 'text/heldout.txt');
    if (!dense || !existsSync(text)) out['dense-28M'] = `skipped: ${SHARED}/dense-28M or text/heldout.txt absent`;
    else {
      const model = await loadDir(dense);
      const ids = heldOut(dense, text);
      out['dense-28M F32'] = {
        speed: speed(model, ids.slice(0, positions), rounds),
        quality: quality(model, ids, quick ? 4 : 24),
        memory: memory(dense, quick ? 256 : 1000),
      };
      await model.close();
    }
    const big = await artifact100M('Q8_0');
    const model = await loadDir(big);
    const ids = Array.from({ length: positions }, (_, i) => 1 + ((i * 7919) % (model.spec.vocabSize - 1)));
    out['llama-100M Q8_0'] = { speed: speed(model, ids, rounds), memory: memory(big, quick ? 256 : 1000) };
    return out;
  },
};

const args = process.argv.slice(2);
if (process.argv[1] && path.resolve(process.argv[1]) === SELF) {
  let result: Record<string, unknown>;
  if (args[0] && !args[0].startsWith('--')) {
    const [dir, textFile, windowsArg = '24', decodeArg = '1000'] = args;
    const model = await loadDir(dir);
    const ids = heldOut(dir, textFile);
    result = { artifact: dir, text: textFile, speed: speed(model, ids.slice(0, 512), 5), quality: quality(model, ids, Number(windowsArg)), decodeTokens: Number(decodeArg), memory: memory(dir, Number(decodeArg)) };
  } else result = await suite.run({ quick: args.includes('--quick') });
  mkdirSync('bench/out', { recursive: true });
  writeFileSync('bench/out/kv-types.json', JSON.stringify(result, null, 2) + '\n');
  process.stdout.write(JSON.stringify(result, null, 2) + '\n');
}
