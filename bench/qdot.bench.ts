/**
 * The one-token integer-activation kernels (src/exec/runtime/qdot.ts) with and without relaxed SIMD's
 * exact integer dots, interleaved in one process over the same weights and quantized x: GFLOP/s
 * (2 · rows · cols per call) per format and shape, timed in CPU time (`process.cpuUsage`: wall time on
 * a loaded machine swings more than the kernels differ), median over rounds of the per-round ratio.
 * `node dist/bench/qdot.bench.js [--quick]`.
 */
import v8 from 'node:v8';
import { quantize } from '../src/core/quant/quantize.js';
import { rowBytes } from '../src/core/quant/types.js';
import { Rng } from '../src/core/util/rng.js';
import type { QdotFormat } from '../src/exec/runtime/qdot.js';
import { round, type BenchSuite } from './harness.js';
import { QdotVariants } from './qdot-kernels.js';

v8.setFlagsFromString('--experimental-wasm-relaxed-simd');

// Q8_0 has no relaxed variant: its two runs are the same kernel, the noise of the measurement
const FORMATS: QdotFormat[] = ['Q8_0', 'Q4_0', 'Q5_0', 'Q2_K', 'Q3_K', 'Q4_K', 'Q6_K'];
const SHAPES: [number, number][] = [[768, 768], [2048, 768], [768, 2048]];
const median = (v: number[]) => [...v].sort((a, b) => a - b)[v.length >> 1];

/** CPU milliseconds of `reps` calls. */
function cpuMs(reps: number, fn: () => void): number {
  const t = process.cpuUsage();
  for (let i = 0; i < reps; i++) fn();
  const d = process.cpuUsage(t);
  return (d.user + d.system) / 1000;
}

export const suite: BenchSuite = {
  name: 'qdot',
  description: 'one-token integer kernels (qdot.ts) with vs without relaxed SIMD integer dots, GFLOP/s, interleaved',
  async run({ quick }) {
    const rounds = quick ? 5 : 9;
    const rng = new Rng(1);
    const out: Record<string, unknown> = {};
    const maxRows = Math.max(...SHAPES.map(([r]) => r));
    const maxCols = Math.max(...SHAPES.map(([, c]) => c));
    const kernels = new QdotVariants(maxCols, maxRows, 1, maxRows * rowBytes('Q6_K', maxCols) + 64);
    for (const format of FORMATS) {
      for (const [rows, cols] of SHAPES) {
        const w = quantize(format, Float32Array.from({ length: rows * cols }, () => rng.normal() * 0.3), cols);
        const rb = rowBytes(format, cols);
        kernels.setWeights(w);
        kernels.setX(format, Float32Array.from({ length: cols }, () => rng.normal()), cols, 1);
        const call = (relaxed: boolean) => () => kernels.call(relaxed, format, rb, 0, rows, cols, 1);
        // ~20 ms a timing at ~30 GFLOP/s
        const reps = Math.max(20, Math.round(3e8 / (rows * cols)));
        cpuMs(reps, call(false));
        cpuMs(reps, call(true));
        const plain: number[] = [];
        const relaxed: number[] = [];
        for (let r = 0; r < rounds; r++) {
          // the order alternates between rounds
          if (r & 1) relaxed.push(cpuMs(reps, call(true)));
          plain.push(cpuMs(reps, call(false)));
          if (!(r & 1)) relaxed.push(cpuMs(reps, call(true)));
        }
        const gflops = (ms: number) => round((2 * rows * cols * reps) / (ms * 1e6), 1);
        out[`${format} ${rows}x${cols}`] = {
          plainGflops: gflops(median(plain)),
          relaxedGflops: gflops(median(relaxed)),
          ratio: round(median(plain.map((p, i) => p / relaxed[i])), 3),
        };
        console.log(`${format} ${rows}×${cols}: ${JSON.stringify(out[`${format} ${rows}x${cols}`])}`);
      }
    }
    return out;
  },
};

if (import.meta.url === `file://${process.argv[1]}`) {
  suite.run({ quick: process.argv.includes('--quick') }).then((r) => console.log(JSON.stringify(r, null, 2)));
}
