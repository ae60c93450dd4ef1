/**
 * TS runtime speed: prefill and decode tokens/s on stories260K and a generated ~30M llama
 * (FIXTURE_PRESETS['llama-30M']), F32, Q8_0 and Q4_0 artifacts, next to the onnxruntime engine on the same
 * checkpoint in the same run (1 intra-op thread, and onnxruntime's default), with ratios.
 * Targets (issue 4): stories260K decode ≥ 1× onnxruntime; 30M decode ≥ 0.5× onnxruntime single-thread.
 *
 * Standalone: `npx tsc -p tsconfig.bench.json && node dist/bench/runtime.bench.js [--quick]`.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { Engine } from '../src/exec/engine/engine.js';
import { quantize } from '../src/core/quant/quantize.js';
import { matmul, Weight } from '../src/exec/runtime/kernels.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { WasmArena } from '../src/exec/runtime/wasm.js';
import { cachedFixture, REPO_ROOT, runIfMain, type BenchSuite } from './harness.js';
import { compilePlain } from './compile-plain.js';

const STORIES = path.resolve(REPO_ROOT, 'fixtures/models/stories260K');
const WORK = path.join(os.tmpdir(), 'llmc-bench-runtime');

interface Speed {
  prefillTokPerSec: number;
  decodeTokPerSec: number;
}

type Runner = () => { prefill(ids: number[]): Promise<unknown> | unknown; step(id: number): Promise<unknown> | unknown };

/** One run: prefill `prompt`, then `decode` single-token steps; tokens/s of each phase. */
async function once(prompt: number[], decode: number, run: Runner): Promise<Speed> {
  const s = run();
  const t0 = performance.now();
  await s.prefill(prompt);
  const t1 = performance.now();
  for (let i = 0; i < decode; i++) await s.step(((prompt[i % prompt.length] + i) % 200) + 3);
  const t2 = performance.now();
  return { prefillTokPerSec: prompt.length / ((t1 - t0) / 1000), decodeTokPerSec: decode / ((t2 - t1) / 1000) };
}

/**
 * Best of `reps` runs per contender after one warm-up each (JIT, onnxruntime allocations); the
 * contenders take turns within each repetition so a busy machine slows them alike.
 */
async function race(reps: number, prompt: number[], decode: number, runners: Record<string, Runner>): Promise<Record<string, Speed>> {
  const best: Record<string, Speed> = {};
  for (const [name, run] of Object.entries(runners)) {
    await once(prompt, decode, run);
    best[name] = { prefillTokPerSec: 0, decodeTokPerSec: 0 };
  }
  for (let r = 0; r < reps; r++) {
    for (const [name, run] of Object.entries(runners)) {
      const s = await once(prompt, decode, run);
      best[name] = {
        prefillTokPerSec: Math.max(best[name].prefillTokPerSec, s.prefillTokPerSec),
        decodeTokPerSec: Math.max(best[name].decodeTokPerSec, s.decodeTokPerSec),
      };
    }
  }
  return best;
}

async function benchModel(label: string, modelDir: string, promptLen: number, decode: number, reps: number) {
  const prompt = Array.from({ length: promptLen }, (_, i) => (i * 37 + 1) % 250 + 3);
  const ck = await openCheckpoint(modelDir);
  const engines: Engine[] = [];
  let results: Record<string, Speed>;
  try {
    const runners: Record<string, Runner> = {};
    for (const [name, threads] of [['ort-1thread', 1], ['ort-default', undefined]] as const) {
      const engine = await Engine.open(ck, { threads });
      engines.push(engine);
      runners[name] = () => {
        const s = engine.session();
        return { prefill: (ids) => s.prefill(ids), step: (id) => s.decode(id) };
      };
    }
    for (const quant of ['F32', 'Q8_0', 'Q4_0']) {
      const out = path.join(WORK, `${label}-${quant}`);
      await compilePlain(modelDir, out, quant); // always recompiled (a few seconds): a cached artifact from an older build would measure old code
      const model = await loadDir(out);
      runners[`ts-${quant}`] = () => {
        const cache = model.newCache();
        return { prefill: (ids) => model.forward(ids, cache, { lastOnly: true }), step: (id) => model.forward([id], cache, { lastOnly: true }) };
      };
    }
    results = await race(reps, prompt, decode, runners);
  } finally {
    for (const e of engines) await e.close();
    await ck.close();
  }
  const ratio = (a: number, b: number) => Number((a / b).toFixed(3));
  const ratios: Record<string, number> = {};
  for (const q of ['F32', 'Q8_0', 'Q4_0']) {
    const ts = results[`ts-${q}`];
    ratios[`decode ts-${q} / ort-1thread`] = ratio(ts.decodeTokPerSec, results['ort-1thread'].decodeTokPerSec);
    ratios[`decode ts-${q} / ort-default`] = ratio(ts.decodeTokPerSec, results['ort-default'].decodeTokPerSec);
    ratios[`prefill ts-${q} / ort-1thread`] = ratio(ts.prefillTokPerSec, results['ort-1thread'].prefillTokPerSec);
  }
  const round = (s: Speed) => ({ prefillTokPerSec: Number(s.prefillTokPerSec.toFixed(1)), decodeTokPerSec: Number(s.decodeTokPerSec.toFixed(1)) });
  return { promptTokens: promptLen, decodeTokens: decode, speeds: Object.fromEntries(Object.entries(results).map(([k, v]) => [k, round(v)])), ratios };
}

/**
 * The kernel optimizations, before and after, in the same run: GFLOP/s of one [1376 × 512] matmul (the
 * 30M model's gate_proj) for plain JS (the first version), wasm SIMD one token per weight pass, and
 * wasm SIMD with T = 16 in one call (prefill: F32 and Q8_0 run the register-tiled kernels of gemm.ts, Q4_0 / Q4_K one token per pass).
 */
function kernelSteps(reps: number): Record<string, Record<string, number>> {
  const R = 1376;
  const C = 512;
  const T = 16;
  const f = Float32Array.from({ length: R * C }, (_, i) => Math.sin(i * 0.7) * 0.1);
  const x = Float32Array.from({ length: T * C }, (_, i) => Math.cos(i * 0.3));
  const y = new Float32Array(T * R);
  const out: Record<string, Record<string, number>> = {};
  for (const format of ['F32', 'Q8_0', 'Q4_0', 'Q4_K'] as const) {
    const bytes = format === 'F32' ? new Uint8Array(f.buffer.slice(0)) : quantize(format, f, C);
    const arena = WasmArena.create(bytes.length, C * T)!;
    const mem = arena.weights(bytes.length);
    mem.set(bytes);
    const js = new Weight('js', format, R, C, bytes);
    const wasm = new Weight('wasm', format, R, C, mem, arena);
    const gflops = (fn: () => void, tokens: number) => {
      for (let i = 0; i < 3; i++) fn();
      let best = Infinity;
      for (let i = 0; i < reps; i++) {
        const t0 = performance.now();
        fn();
        best = Math.min(best, performance.now() - t0);
      }
      return Number(((2 * R * C * tokens) / (best / 1000) / 1e9).toFixed(2));
    };
    out[format] = {
      'js decode (T=1) GFLOP/s': gflops(() => matmul(js, x, 1, C, y, R), 1),
      'wasm decode (T=1) GFLOP/s': gflops(() => matmul(wasm, x, 1, C, y, R), 1),
      'js prefill (T=16) GFLOP/s': gflops(() => matmul(js, x, T, C, y, R), T),
      'wasm prefill, 1 token per pass (16 calls) GFLOP/s': gflops(() => {
        for (let t = 0; t < T; t++) matmul(wasm, x.subarray(t * C), 1, C, y.subarray(t * R), R);
      }, T),
      'wasm prefill, one call (T=16; F32 / Q8_0 tiled) GFLOP/s': gflops(() => matmul(wasm, x, T, C, y, R), T),
    };
  }
  return out;
}

export const suite: BenchSuite = {
  name: 'runtime',
  description: 'TS runtime prefill/decode tokens/s vs onnxruntime (1 thread, default) on stories260K and llama-30M; kernel GFLOP/s before/after',
  async run(opts) {
    const quick = Boolean(opts?.quick);
    await fsp.mkdir(WORK, { recursive: true });
    const { dir: fx } = await cachedFixture('llama-30M', { arch: 'llama', seed: 1, tokenizer: 'none' });
    const kernels = kernelSteps(quick ? 5 : 20);
    const stories = await benchModel('stories260K', STORIES, 32, quick ? 32 : 128, quick ? 2 : 5);
    const m30 = await benchModel('llama-30M', fx, 64, quick ? 8 : 32, quick ? 2 : 3);
    return {
      kernels,
      'stories260K': stories,
      'llama-30M': m30,
      targets: {
        'stories260K decode ts-F32 >= 1x ort-1thread': stories.ratios['decode ts-F32 / ort-1thread'] >= 1,
        'stories260K decode ts-F32 >= 1x ort-default': stories.ratios['decode ts-F32 / ort-default'] >= 1,
        'llama-30M decode ts-F32 >= 0.5x ort-1thread': m30.ratios['decode ts-F32 / ort-1thread'] >= 0.5,
        'llama-30M decode ts-Q8_0 >= 0.5x ort-1thread': m30.ratios['decode ts-Q8_0 / ort-1thread'] >= 0.5,
      },
    };
  },
};

runIfMain(import.meta.url, suite);
