/**
 * Quantizer throughput: MB/s of f32 input per type, on one thread (quantize) and on all cores
 * (quantizeParallel), next to a plain copy of the same bytes measured in the same run (baseline).
 * Target (issue 3): Q4_K >= 60 MB/s per core. The K-quants also report their JS fallback (no wasm
 * kernels) on one thread, on a quarter of the input.
 * Against ggml (issue 16): ggml's own reference quantizers (quantize_row_*_ref, one thread) timed on
 * the same input in the same run, built from source by gcc: set GGML_SRC to a ggml checkout
 * (`git clone https://github.com/ggml-org/ggml`, or llama.cpp's ggml/); skipped with the reason otherwise.
 *
 * Standalone: `npx tsc -p tsconfig.bench.json && node dist/bench/quant.bench.js [--quick] [--types Q4_K,Q8_0]`.
 */
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { closeQuantWorkers, defaultQuantThreads, quantize, quantizeInto, quantizeParallel, QUANT_TYPES, rowBytes, type QuantType } from '../src/core/quant/index.js';
import { useWasmKernels } from '../src/core/quant/kquants.js';
import { Rng } from '../src/core/util/rng.js';
import { ggmlQuantizeSeconds } from './ggml-quant.js';

/** bench/harness.ts's BenchSuite shape (structural, so this file stands alone too). */
interface Suite {
  name: string;
  run: (opts?: { quick?: boolean; types?: QuantType[] }) => Promise<Record<string, unknown>>;
}

const ROW = 4096;

/** Best-of timing: repeat for about `budgetMs`, at least `minReps` times; returns the best seconds per call. */
async function best(fn: () => unknown, budgetMs: number, minReps = 2): Promise<number> {
  let bestMs = Infinity;
  const t0 = performance.now();
  for (let r = 0; r < minReps || performance.now() - t0 < budgetMs; r++) {
    const a = performance.now();
    await fn();
    bestMs = Math.min(bestMs, performance.now() - a);
  }
  return bestMs / 1000;
}

export const suite: Suite = {
  name: 'quant',
  run: async (opts = {}) => {
    const quick = !!opts.quick;
    const threads = os.availableParallelism();
    const mb = quick ? 2 : 8;
    const n = Math.floor((mb * 2 ** 20) / 4 / ROW) * ROW;
    const rng = new Rng(42);
    const x = new Float32Array(n);
    for (let i = 0; i < n; i++) x[i] = rng.normal() * 0.02 * (1 + ((i >> 12) % 5)); // weight-like rows
    const bytesIn = n * 4;
    const budget = quick ? 300 : 1500;

    // Baseline: copying the same f32 bytes once (what any converter does at least).
    const copyDst = new Float32Array(n);
    const copySec = await best(() => copyDst.set(x), budget, 5);
    const copyMBs = bytesIn / 1e6 / copySec;

    const results: Record<string, unknown> = {
      input_mb: +(bytesIn / 1e6).toFixed(2),
      row_length: ROW,
      threads,
      baseline_copy_mb_per_s: +copyMBs.toFixed(0),
      types: {} as Record<string, unknown>,
    };
    const types = opts.types ?? (Object.keys(QUANT_TYPES) as QuantType[]);
    const ggml = await ggmlQuantizeSeconds(x, ROW, budget, types.filter((t) => t !== 'F32'));
    if (typeof ggml === 'string') results.ggml_reference = ggml;
    for (const t of types) {
      quantize(t, x.subarray(0, ROW * 16), ROW); // warm up the JIT
      const single = bytesIn / 1e6 / (await best(() => quantize(t, x, ROW), budget));
      // Into a buffer allocated once, as ggml's harness writes (a fresh output per call costs page faults and GC).
      const into = new Uint8Array((n / ROW) * rowBytes(t, ROW));
      const singleInto = bytesIn / 1e6 / (await best(() => quantizeInto(t, x, ROW, into, 0), budget));
      const parallel = bytesIn / 1e6 / (await best(() => quantizeParallel(t, x, ROW, { threads }), budget));
      // What the gguf target runs: quantizeParallel's own choice of threads (one for the GB/s types).
      const byDefault = bytesIn / 1e6 / (await best(() => quantizeParallel(t, x, ROW), budget));
      let jsSingle: number | undefined;
      if (t.endsWith('_K')) {
        useWasmKernels(false);
        const xs = x.subarray(0, Math.max(ROW, Math.floor(n / 4 / ROW) * ROW));
        try {
          quantize(t, xs.subarray(0, ROW * 4), ROW);
          jsSingle = (xs.length * 4) / 1e6 / (await best(() => quantize(t, xs, ROW), budget / 2));
        } finally {
          useWasmKernels(true);
        }
      }
      (results.types as Record<string, unknown>)[t] = {
        single_thread_mb_per_s: +single.toFixed(1),
        ...(jsSingle !== undefined && {
          js_fallback_single_thread_mb_per_s: +jsSingle.toFixed(1),
          wasm_vs_js_speedup: +(single / jsSingle).toFixed(1),
        }),
        parallel_mb_per_s: +parallel.toFixed(1),
        parallel_speedup: +(parallel / single).toFixed(2),
        default_threads: defaultQuantThreads(t),
        default_threads_mb_per_s: +byDefault.toFixed(1),
        default_threads_speedup: +(byDefault / single).toFixed(2),
        single_thread_into_mb_per_s: +singleInto.toFixed(1),
        ...Object.fromEntries(
          Object.entries(typeof ggml === 'object' ? ggml : {}).filter(([, secs]) => secs[t] !== undefined).flatMap(([build, secs]) => [
            [`ggml_ref ${build} mb_per_s`, +(bytesIn / 1e6 / secs[t]).toFixed(1)],
            [`into_vs_ggml_ref ${build}`, +(singleInto / (bytesIn / 1e6 / secs[t])).toFixed(3)],
          ]),
        ),
        single_vs_copy_ratio: +(single / copyMBs).toFixed(4),
        parallel_vs_copy_ratio: +(parallel / copyMBs).toFixed(4),
      };
    }
    const q4k = (results.types as Record<string, { single_thread_mb_per_s: number }>).Q4_K;
    if (q4k) results.q4_k_target_60_mb_per_s_per_core_met = q4k.single_thread_mb_per_s >= 60;
    if (typeof ggml === 'object') {
      for (const build of Object.keys(ggml)) {
        const ratio = (r: Record<string, number>) => r[`into_vs_ggml_ref ${build}`];
        const slower = Object.entries(results.types as Record<string, Record<string, number>>).filter(([, r]) => ratio(r) !== undefined && ratio(r) < 1);
        results[`slower_than_ggml_ref ${build}`] = slower.map(([t, r]) => `${t} ${ratio(r)}`);
      }
    }
    await closeQuantWorkers();
    return results;
  },
};

const isMain = process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url);
if (isMain) {
  const i = process.argv.indexOf('--types');
  const types = i > 0 ? (process.argv[i + 1].split(',') as QuantType[]) : undefined;
  suite
    .run({ quick: process.argv.includes('--quick'), types })
    .then((r) => process.stdout.write(JSON.stringify(r, null, 2) + '\n'))
    .catch((e) => {
      process.stderr.write(`${(e as Error).stack}\n`);
      process.exit(1);
    });
}
