/**
 * `reorder.budget=latency`: a level's decode-step time priced from the TS runtime's own matvec
 * kernel (WebAssembly SIMD, streaming weights beyond the caches), timed on this host at compile time (no bench). The kernel's cost is fit as
 *   t(rows, cols) = a + b · rows · cols           (a: per call, b: per multiply-add)
 * by least squares over the model's own shapes (a head's rows, the hidden size, the FFN width), each
 * the fastest of REPS runs. A level's step is then Σ over layers of its seven projections at their
 * widths (a call dropped with its width at 0) plus attention over `context` cached tokens, priced as
 * 2 · heads · context · headDim multiply-adds at b, plus the LM head. Cached as a profile keyed by the
 * host, so compiles on one machine plan the same levels.
 */
import os from 'node:os';
import type { ArchSpec } from '../../src/core/arch/spec.js';
import { cachedProfile } from '../../src/measure/store.js';
import type { ProfileCacheRef } from '../../src/core/pipeline/pass.js';
import { matmul, Weight } from '../../src/exec/runtime/kernels.js';
import { WasmArena } from '../../src/exec/runtime/wasm.js';
import type { Level } from '../../src/core/records/elastic.js';

/** The fitted kernel cost (seconds) and the context attention is priced at. */
export interface KernelCost {
  perCall: number;
  perMac: number;
  context: number;
  host: string;
}

const REPS = 7;

const host = () => `${os.cpus()[0]?.model ?? 'cpu'} ×${os.cpus().length}`;

/** Bytes of weights a probe streams through: beyond the caches, as a decode step streams the model's. */
const PROBE_BYTES = 64 * 1024 * 1024;

/**
 * The fastest of REPS timings of y = W·x for a [rows, cols] F32 weight on the runtime's own kernel (its
 * WebAssembly SIMD matvec, as `llmc run` decodes; the scalar fallback where WebAssembly is missing),
 * cycling through copies that together exceed the caches: a decode step is bound by reading weights.
 */
function timeMatvec(rows: number, cols: number): number {
  const bytes = rows * cols * 4;
  const copies = Math.max(1, Math.ceil(PROBE_BYTES / bytes));
  const arena = WasmArena.create(copies * bytes, Math.max(rows, cols));
  const region = arena ? arena.weights(copies * bytes) : new Uint8Array(copies * bytes);
  const f = new Float32Array(region.buffer, region.byteOffset, copies * rows * cols);
  for (let i = 0; i < f.length; i++) f[i] = ((i * 2654435761) % 1000) / 1000 - 0.5;
  const ws = Array.from({ length: copies }, (_, k) => new Weight('probe', 'F32', rows, cols, region.subarray(k * bytes, (k + 1) * bytes), arena));
  const x = new Float32Array(cols).fill(0.01);
  const y = new Float32Array(rows);
  const calls = Math.max(copies, Math.ceil(2e6 / (rows * cols)));
  let best = Infinity;
  for (let r = 0; r < REPS + 1; r++) {
    const t0 = performance.now();
    for (let c = 0; c < calls; c++) matmul(ws[c % copies], x, 1, cols, y, rows);
    const t = (performance.now() - t0) / 1e3 / calls;
    if (r > 0) best = Math.min(best, t); // the first run warms the JIT and the pages
  }
  return best;
}

/** Least-squares a + b·m over (m, t) points, a and b kept ≥ 0. */
export function fitCost(points: readonly { macs: number; t: number }[]): { perCall: number; perMac: number } {
  const n = points.length;
  const mx = points.reduce((s, p) => s + p.macs, 0) / n;
  const my = points.reduce((s, p) => s + p.t, 0) / n;
  let sxy = 0;
  let sxx = 0;
  for (const p of points) {
    sxy += (p.macs - mx) * (p.t - my);
    sxx += (p.macs - mx) ** 2;
  }
  const b = sxx > 0 ? Math.max(0, sxy / sxx) : 0;
  return { perCall: Math.max(0, my - b * mx), perMac: b };
}

/** The kernel cost of `spec`'s shapes on this host (cached per host and shapes). */
export async function kernelCost(spec: ArchSpec, context: number, cacheDir?: ProfileCacheRef): Promise<KernelCost> {
  const H = spec.hiddenSize;
  const I = spec.moe ? spec.moe.expertIntermediateSize : spec.intermediateSize;
  const shapes: [number, number][] = [
    [spec.headDim, H],
    [spec.headDim * spec.numKvHeads, H],
    [spec.headDim * spec.numHeads, H],
    [H, spec.headDim * spec.numHeads],
    [I, H],
    [H, I],
  ];
  const h = host();
  const prof = await cachedProfile(cacheDir, 'kernel-cost', { host: h, shapes, probe: 'wasm-streamed' }, async () => {
    const t = shapes.map(([r, c]) => timeMatvec(r, c));
    return { meta: { host: h }, arrays: { t: Float64Array.from(t) } };
  });
  const fit = fitCost(shapes.map(([r, c], i) => ({ macs: r * c, t: prof.arrays.t[i] })));
  return { ...fit, context, host: h };
}

/** Seconds of one decode step of `lv` under `k` (see the file's comment). */
export function stepSeconds(spec: ArchSpec, lv: Level, k: KernelCost): number {
  const H = spec.hiddenSize;
  const hd = spec.headDim;
  const mv = (rows: number, cols: number) => (rows > 0 && cols > 0 ? k.perCall + k.perMac * rows * cols : 0);
  let t = mv(spec.vocabSize, H);
  for (const w of lv.layers) {
    const q = w.heads * hd;
    const kv = w.kvGroups * hd;
    t += mv(q, H) + 2 * mv(kv, H) + mv(H, q) + k.perMac * 2 * w.heads * k.context * hd;
    t += (spec.moe?.topK ?? 1) * (2 * mv(w.ffn, H) + mv(H, w.ffn)); // MoE: the experts a token runs
  }
  return t;
}
