/**
 * The runtime's worker pool (src/exec/runtime/pool.ts): with 2 and 3 threads every matmul is split
 * across worker_threads (minWork 0: even stories260K's small matmuls), and the outputs must equal one
 * thread's bit for bit — the reference ids of stories260K, and the logits of a prompt on stories260K
 * and on a llama fixture in F32 and Q8_0 (row counts that do not divide by the thread count).
 */
import { promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadDir } from '../src/exec/runtime/node.js';
import { generateFixture } from '../fixtures/generate.js';
import type { Model } from '../src/exec/runtime/model.js';
import { compileTs } from './ts-artifact.js';
import type { WeightTable } from '../src/exec/runtime/interpreter.js';
import { nodeWorker } from '../src/exec/runtime/node.js';
import { NORM_R_SLOT, WasmArena } from '../src/exec/runtime/wasm.js';
import { MatmulPool } from '../src/exec/runtime/pool.js';
import { matmul, matmulGroup, matmulGroupNormed, matmulResidual, matmulSiluMul, Weight } from '../src/exec/runtime/kernels.js';
import { SiluMul } from '../src/exec/runtime/activation.js';
import { quantize } from '../src/core/quant/quantize.js';
import type { WeightFormat } from '../src/exec/runtime/format.js';
import { Rng } from '../src/core/util/rng.js';

/** The pool's counts, through a weight's arena (the Model keeps its weight table private). */
const poolStats = (m: Model) => (m as unknown as { table: WeightTable }).table.weight('model.embed_tokens.weight').arena!.poolStats();

const ROOT = path.resolve(__dirname, '..');
const STORIES = path.join(ROOT, 'fixtures/models/stories260K');
const ref = JSON.parse(readFileSync(path.join(STORIES, 'reference.json'), 'utf8')) as { prompt_ids: number[]; greedy_ids: number[] };

let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-pool-'));
  await compileTs(STORIES, path.join(tmp, 'stories'), 'F32');
  const fx = await generateFixture(path.join(tmp, 'fixture'), { arch: 'llama', seed: 7, tokenizer: 'none', dims: { hiddenSize: 96, intermediateSize: 200, vocabSize: 301 } });
  await compileTs(fx.dir, path.join(tmp, 'fx-f32'), 'F32');
  await compileTs(fx.dir, path.join(tmp, 'fx-q8'), 'Q8_0');
  // head size 32 (a q8_0 KV cache's block), two KV heads
  const fx32 = await generateFixture(path.join(tmp, 'fixture-hd32'), { arch: 'llama', seed: 9, tokenizer: 'none', dims: { hiddenSize: 128, numHeads: 4, numKvHeads: 2, intermediateSize: 160, vocabSize: 301 } });
  await compileTs(fx32.dir, path.join(tmp, 'fx-hd32'), 'Q8_0');
  await compileTs(fx.dir, path.join(tmp, 'fx-q4_0'), 'Q4_0');
  // hidden and intermediate whole K-quant blocks (256)
  const fx256 = await generateFixture(path.join(tmp, 'fixture-256'), { arch: 'llama', seed: 11, tokenizer: 'none', dims: { hiddenSize: 256, numHeads: 4, numKvHeads: 2, intermediateSize: 512, numLayers: 2, vocabSize: 301 } });
  await compileTs(fx256.dir, path.join(tmp, 'fx-q4_k'), 'Q4_K');
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

const prompt = [1, 5, 9, 2, 77, 13, 200, 41, 8];

/** The interpreter's rmsNorm, written out: Σx² in float64 in order, its mean rounded to float32, then w · fround(x · r). */
function norm(x: Float32Array, w: Float32Array, eps: number): Float32Array {
  let ss = 0;
  for (const v of x) ss += v * v;
  const r = 1 / Math.sqrt(Math.fround(ss / x.length) + eps);
  return x.map((v, i) => w[i] * Math.fround(v * r));
}

/** A shared arena holding `blobs` (`format` weights of rows[i] × cols) 64 bytes apart, with a pool of `threads` (every call split). */
async function arenaOf(format: WeightFormat, cols: number, rows: number[], blobs: Uint8Array[], threads: number): Promise<{ arena: WasmArena; ws: Weight[] }> {
  const bytes = blobs.reduce((n, b) => n + b.length + 64, 64);
  const arena = WasmArena.create(bytes, cols, true)!;
  await arena.startPool(threads, { spawn: nodeWorker, minWork: 0 });
  const mem = arena.weights(bytes);
  let at = 64;
  const ws = blobs.map((b, i) => {
    mem.set(b, at);
    const w = new Weight(`w${i}`, format, rows[i], cols, mem.subarray(at, at + b.length), arena);
    at += b.length + 64;
    return w;
  });
  return { arena, ws };
}

/**
 * Decode steps of a pooled llama fixture whose fused path (`method` of WasmArena, counted where
 * `counts` says a call takes it) runs `want(layers)` times a step, with the logits of a rowwise
 * frame (which keeps every step).
 */
async function expectFusedDecode<K extends 'matmulResidual' | 'matmulSiluMul' | 'matmulGroupNormed'>(
  fixtures: [artifact: string, source: string][],
  methods: K[],
  counts: (method: K, args: unknown[]) => boolean,
  want: (layers: number) => number,
): Promise<void> {
  for (const [artifact, source] of fixtures) {
    const model = await loadDir(path.join(tmp, artifact), { threads: 2, pool: { minWork: 0 } });
    const proto = WasmArena.prototype as unknown as Record<K, (...a: unknown[]) => unknown>;
    const saved = methods.map((m) => proto[m]);
    let calls = 0;
    methods.forEach((m, i) => {
      proto[m] = function (this: unknown, ...a: unknown[]) {
        if (counts(m, a)) calls++;
        return saved[i].apply(this, a);
      };
    });
    try {
      const layers = (JSON.parse(readFileSync(path.join(tmp, source, 'config.json'), 'utf8')) as { num_hidden_layers: number }).num_hidden_layers;
      const [a, b] = [model.newCache(), model.newCache()];
      model.forward(prompt, a);
      model.forward(prompt, b);
      expect(calls).toBe(0); // prefill runs the steps
      for (let s = 0; s < 3; s++) {
        calls = 0;
        const fused = model.forward([3 + s], a);
        expect(calls, artifact).toBe(want(layers));
        calls = 0;
        const plain = model.forward([3 + s], b, { rowwise: true });
        expect(calls).toBe(0);
        expect(Buffer.from(fused.buffer).equals(Buffer.from(plain.buffer)), `${artifact} step ${s}`).toBe(true);
      }
    } finally {
      methods.forEach((m, i) => (proto[m] = saved[i]));
      await model.close();
    }
  }
}

describe('worker pool', () => {
  it('stories260K with 2 threads generates the reference ids', async () => {
    const model = await loadDir(path.join(tmp, 'stories'), { threads: 2, pool: { minWork: 0 } });
    try {
      const out: number[] = [];
      for await (const id of model.generate(ref.prompt_ids, { maxTokens: ref.greedy_ids.length, stopTokens: [] })) out.push(id);
      expect(out).toEqual(ref.greedy_ids);
      // The calling thread claims chunks too: the workers must have run some of them.
      const stats = poolStats(model)!;
      expect(stats.splitCalls).toBeGreaterThan(100);
      expect(stats.workerChunks).toBeGreaterThan(0);
    } finally {
      await model.close();
    }
  });

  for (const [name, dir] of [['stories260K F32', 'stories'], ['llama fixture F32', 'fx-f32'], ['llama fixture Q8_0', 'fx-q8'], ['llama fixture Q4_0', 'fx-q4_0'], ['llama fixture Q4_K', 'fx-q4_k']]) {
    it(`${name}: prefill and decode logits with 2 and 3 threads equal one thread's bit for bit`, async () => {
      const one = await loadDir(path.join(tmp, dir));
      const run = (m: typeof one) => {
        const cache = m.newCache();
        const pre = m.forward(prompt, cache);
        const step = m.forward([3], cache);
        return [pre, step];
      };
      const expected = run(one);
      for (const threads of [2, 3]) {
        const pooled = await loadDir(path.join(tmp, dir), { threads, pool: { minWork: 0 } });
        try {
          expect(pooled.threads).toBe(threads); // a pool really runs (else the comparison is with itself)
          const got = run(pooled);
          for (let i = 0; i < 2; i++) expect(Buffer.from(got[i].buffer, got[i].byteOffset, got[i].byteLength).equals(Buffer.from(expected[i].buffer, expected[i].byteOffset, expected[i].byteLength))).toBe(true);
        } finally {
          await pooled.close();
        }
      }
    });
  }
});

describe('F32 prefill tiles on the pool', () => {
  it('the tile kernel runs across the threads, cut between tiles, with one thread\'s logits', async () => {
    const long = Array.from({ length: 24 }, (_, i) => (i * 29 + 3) % 301);
    const one = await loadDir(path.join(tmp, 'fx-f32'));
    const want = one.forward(long, one.newCache());
    const split = MatmulPool.prototype.callAttachedRows;
    let calls = 0;
    MatmulPool.prototype.callAttachedRows = function (...a: Parameters<MatmulPool['callAttachedRows']>) {
      calls++;
      expect(a[2][6] % a[3]).toBe(0);
      return split.apply(this, a);
    };
    const pooled = await loadDir(path.join(tmp, 'fx-f32'), { threads: 2, pool: { minWork: 0 } });
    try {
      const before = poolStats(pooled)!;
      // the calling thread may claim every chunk while the worker waits for a core (a loaded machine): a few tries
      for (let i = 0; i < 20 && poolStats(pooled)!.workerChunks === before.workerChunks; i++) {
        const got = pooled.forward(long, pooled.newCache());
        expect(Buffer.from(got.buffer, got.byteOffset, got.byteLength).equals(Buffer.from(want.buffer, want.byteOffset, want.byteLength))).toBe(true);
      }
      expect(calls).toBeGreaterThan(0);
      expect(poolStats(pooled)!.splitCalls).toBeGreaterThan(before.splitCalls);
      expect(poolStats(pooled)!.workerChunks).toBeGreaterThan(before.workerChunks);
    } finally {
      MatmulPool.prototype.callAttachedRows = split;
      await pooled.close();
    }
  });
});

describe('attention on the pool (split by KV head)', () => {
  // 20 prompt tokens: two staged passes of query rows (16 a pass); then decode steps over a growing cache.
  const long = Array.from({ length: 20 }, (_, i) => (i * 37 + 5) % 301);
  for (const type of ['f32', 'f16', 'q8_0'] as const) {
    it(`a ${type} KV cache: prefill and decode logits with 2 and 3 threads equal one thread's bit for bit`, async () => {
      const one = await loadDir(path.join(tmp, 'fx-hd32'));
      const run = (m: typeof one) => {
        const cache = m.newCache(type);
        const out = [m.forward(long, cache)];
        for (const id of [3, 250, 17]) out.push(m.forward([id], cache));
        return out;
      };
      const expected = run(one);
      await one.close();
      for (const threads of [2, 3]) {
        const pooled = await loadDir(path.join(tmp, 'fx-hd32'), { threads, pool: { minWork: 0 } });
        try {
          const before = poolStats(pooled)!.splitCalls;
          const got = run(pooled);
          const bytes = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
          got.forEach((g, i) => expect(bytes(g).equals(bytes(expected[i])), `${threads} threads, call ${i}`).toBe(true));
          expect(poolStats(pooled)!.splitCalls).toBeGreaterThan(before);
        } finally {
          await pooled.close();
        }
      }
    });
  }
});

describe('grouped matmuls (q, k, v; gate, up as one pool job)', () => {
  // Three weights of 13, 5 and 7 rows over the same x: chunks cut inside and across them.
  const shapes: [WeightFormat, number][] = [['F32', 96], ['Q8_0', 288], ['Q4_K', 512], ['F16', 64]];
  for (const [format, cols] of shapes) {
    it(`${format}: matmulGroup equals one matmul per weight bit for bit, on one thread and with a pool of 2 and 3`, async () => {
      const rng = new Rng(21);
      const rows = [13, 5, 7];
      const blobs = rows.map((r) => (format === 'F32' ? new Uint8Array(Float32Array.from({ length: r * cols }, () => rng.normal()).buffer) : quantize(format, Float32Array.from({ length: r * cols }, () => rng.normal()), cols)));
      const size = blobs.reduce((n, b) => n + b.length + 64, 64);
      for (const threads of [1, 2, 3]) {
        const arena = WasmArena.create(size, cols, true)!;
        await arena.startPool(threads, { spawn: nodeWorker, minWork: 0 });
        try {
          expect(arena.threads).toBe(threads);
          const mem = arena.weights(size);
          let at = 64;
          const ws = blobs.map((b, i) => {
            mem.set(b, at);
            const w = new Weight(`w${i}`, format, rows[i], cols, mem.subarray(at, at + b.length), arena);
            at += Math.ceil((b.length + 64) / 64) * 64;
            return w;
          });
          const bias = Float32Array.from({ length: rows[1] }, () => rng.normal());
          for (const T of [1, 3, 6]) {
            const x = Float32Array.from({ length: T * cols }, () => rng.normal());
            const want = ws.map((w, i) => {
              const y = new Float32Array(T * rows[i]);
              matmul(w, x, T, cols, y, rows[i], { bias: i === 1 ? bias : null });
              return y;
            });
            const got = ws.map((_, i) => new Float32Array(T * rows[i]).fill(NaN));
            const before = arena.poolStats()?.splitCalls ?? 0;
            matmulGroup(ws, x, T, cols, got.map((y, i) => ({ y, yStride: rows[i], bias: i === 1 ? bias : null })), cols);
            for (let i = 0; i < 3; i++) expect(Buffer.from(got[i].buffer).equals(Buffer.from(want[i].buffer))).toBe(true);
            // one pool job for all three where the group path applies (F32 / F16 over several tokens take matmul's own kernels)
            if (threads > 1 && (T === 1 || (format !== 'F32' && format !== 'F16'))) expect(arena.poolStats()!.splitCalls - before).toBe(1);
          }
        } finally {
          arena.closePool();
        }
      }
    });
  }

  it('a call staged op by op has each grouped linear output, as one matmul computes it, when its own op ends', async () => {
    // The first linear of a group computes them all and the others' steps skip: cut after every op,
    // each output must already be there (chunked prefill reads k, v right after their ranges).
    const model = await loadDir(path.join(tmp, 'fx-q8'), { threads: 1 });
    try {
      const table = (model as unknown as { table: WeightTable }).table;
      const interp = model.newInterpreter();
      const ops = interp.graph.ops;
      const positions = [0, prompt.length - 1];
      const staged = interp.stage(prompt, interp.newCache(), positions);
      let checked = 0;
      for (let i = 0; i < ops.length; i++) {
        const fused = ops[i].op === 'silu' && ops[i + 1]?.op === 'mul'; // one step: not cut between
        staged.runOps(i, i + (fused ? 2 : 1));
        if (fused) i++;
        const op = ops[i];
        if (op.op !== 'linear') continue;
        const [x, got] = [staged.value(op.x), staged.value(op.out)];
        const n = got.length / op.outFeatures;
        if (x.length !== n * op.inFeatures) continue; // its x rows gathered at the logit positions
        const want = new Float32Array(got.length);
        matmul(table.weight(op.weight), x, n, op.inFeatures, want, op.outFeatures, { bias: op.bias && table.has(op.bias) ? table.vector(op.bias) : null });
        expect(Buffer.from(got.slice().buffer).equals(Buffer.from(want.buffer)), op.out).toBe(true);
        checked++;
      }
      expect(checked).toBeGreaterThan(7);
      expect(Buffer.from(staged.logits().buffer).equals(Buffer.from(model.forward(prompt, model.newCache(), { logitRows: positions }).buffer))).toBe(true);
    } finally {
      await model.close();
    }
  });

  it('a llama decode step wakes the pool once for q, k, v and once for gate, up in each layer', async () => {
    const model = await loadDir(path.join(tmp, 'fx-q8'), { threads: 2, pool: { minWork: 0 } });
    try {
      const layers = (JSON.parse(readFileSync(path.join(tmp, 'fixture', 'config.json'), 'utf8')) as { num_hidden_layers: number }).num_hidden_layers;
      const cache = model.newCache();
      model.forward(prompt, cache);
      const before = poolStats(model)!.splitCalls;
      model.forward([3], cache);
      // per layer q·k·v, attention (split by KV head), o, gate·up, down (the last layer's q, the logit
      // position's row, with its k and v: one token); lm_head — 7 per layer before
      expect(poolStats(model)!.splitCalls - before).toBe(5 * layers + 1);
    } finally {
      await model.close();
    }
  });

  it("the down projection over silu(g)·u in one job (silu·mul and x's quantization split over the threads) equals SiluMul then matmul bit for bit", async () => {
    const rng = new Rng(22);
    const silu = SiluMul.create()!;
    for (const [format, cols] of [['Q8_0', 288], ['Q4_K', 512]] as [WeightFormat, number][]) {
      const rows = 11;
      const blob = quantize(format, Float32Array.from({ length: rows * cols }, () => rng.normal()), cols);
      const bias = Float32Array.from({ length: rows }, () => rng.normal());
      for (const threads of [1, 2, 3]) {
        const arena = WasmArena.create(blob.length + 128, cols, true)!;
        await arena.startPool(threads, { spawn: nodeWorker, minWork: 0 });
        try {
          const mem = arena.weights(blob.length + 128);
          mem.set(blob, 64);
          const w = new Weight('down', format, rows, cols, mem.subarray(64, 64 + blob.length), arena);
          for (const T of [1, 3, 6]) {
            // gate values spread wide: exp's range, both signs
            const g = Float32Array.from({ length: T * cols }, () => 8 * rng.normal());
            const u = Float32Array.from({ length: T * cols }, () => rng.normal());
            const act = new Float32Array(T * cols);
            silu.run(g, u, act, T * cols);
            const want = new Float32Array(T * rows);
            matmul(w, act, T, cols, want, rows, { bias });
            const got = new Float32Array(T * rows).fill(NaN);
            const before = arena.poolStats()?.splitCalls ?? 0;
            expect(matmulSiluMul(w, g, u, T, cols, got, rows, bias)).toBe(true);
            expect(Buffer.from(got.buffer).equals(Buffer.from(want.buffer)), `${format} T=${T} threads=${threads}`).toBe(true);
            if (threads > 1) expect(arena.poolStats()!.splitCalls - before).toBe(1);
          }
        } finally {
          arena.closePool();
        }
      }
    }
  });

  it('a llama decode step runs silu·mul inside every down projection with the logits of the two steps it replaces', async () => {
    const model = await loadDir(path.join(tmp, 'fx-hd32'), { threads: 2, pool: { minWork: 0 } }); // intermediate 160: whole q8_0 blocks
    const run = SiluMul.prototype.run;
    let calls = 0;
    SiluMul.prototype.run = function (...a: Parameters<SiluMul['run']>) {
      calls++;
      return run.apply(this, a);
    };
    try {
      const layers = (JSON.parse(readFileSync(path.join(tmp, 'fixture-hd32', 'config.json'), 'utf8')) as { num_hidden_layers: number }).num_hidden_layers;
      const [a, b] = [model.newCache(), model.newCache()];
      model.forward(prompt, a);
      model.forward(prompt, b);
      calls = 0;
      const fused = model.forward([3], a);
      expect(calls).toBe(0); // the last layer's MLP too: its g and u already hold the logit positions' rows alone
      calls = 0;
      // rowwise frames keep the two steps (same kernels for quantized weights at one token)
      const plain = model.forward([3], b, { rowwise: true });
      expect(calls).toBe(layers);
      expect(Buffer.from(fused.buffer).equals(Buffer.from(plain.buffer))).toBe(true);
    } finally {
      SiluMul.prototype.run = run;
      await model.close();
    }
  });

  it("q·k·v over RMSNorm(x) in one job (the norm's scaling and x's quantization split over the threads) equals the norm then matmulGroup bit for bit", async () => {
    const rng = new Rng(23);
    // The pool's piece kernel alone (quantizing x hides most one-ulp slips): x scaled in place, as the formula rounds it.
    {
      const n = 4096;
      const arena = WasmArena.create(8 * n, 64)!;
      const f32 = new Float32Array(arena.memory.buffer);
      const [xAt, wAt] = [arena.weightsBase, arena.weightsBase + 4 * n];
      const x = Float32Array.from({ length: n }, () => 10 ** (4 * rng.next() - 2) * rng.normal());
      const w = Float32Array.from({ length: n }, () => 1 + rng.normal());
      const r = 1 / Math.sqrt(Math.fround(x.reduce((s, v) => s + v * v, 0) / n) + 1e-5);
      f32.set(x, xAt / 4);
      f32.set(w, wAt / 4);
      new Float64Array(arena.memory.buffer, NORM_R_SLOT, 1)[0] = r;
      (arena as unknown as { exports: Record<string, (...a: number[]) => void> }).exports.rms_scale(xAt + 64, wAt + 64, 4 * n - 64);
      const want = Float32Array.from(x, (v, i) => (i < 16 ? v : w[i] * Math.fround(v * r)));
      expect(Buffer.from(f32.slice(xAt / 4, xAt / 4 + n).buffer).equals(Buffer.from(want.buffer))).toBe(true);
    }
    for (const [format, cols] of [['Q8_0', 288], ['Q4_0', 96], ['Q4_K', 512]] as [WeightFormat, number][]) {
      const rows = [11, 5, 5];
      const blobs = rows.map((r) => quantize(format, Float32Array.from({ length: r * cols }, () => rng.normal()), cols));
      const bias = rows.map((r) => Float32Array.from({ length: r }, () => rng.normal()));
      for (const threads of [1, 2, 3]) {
        const { arena, ws } = await arenaOf(format, cols, rows, blobs, threads);
        try {
          for (const [scale, eps] of [[1, 1e-5], [1e3, 1e-6], [1e-3, 1e-5]]) {
            const x = Float32Array.from({ length: cols }, () => scale * rng.normal());
            const g = Float32Array.from({ length: cols }, () => 1 + 0.3 * rng.normal());
            const want = rows.map((r) => new Float32Array(r));
            matmulGroup(ws, norm(x, g, eps), 1, cols, want.map((y, i) => ({ y, yStride: rows[i], bias: bias[i] })), cols);
            const got = rows.map((r) => new Float32Array(r).fill(NaN));
            const before = arena.poolStats()?.splitCalls ?? 0;
            expect(matmulGroupNormed(ws, x, cols, g, eps, got.map((y, i) => ({ y, yStride: rows[i], bias: bias[i] })))).toBe(true);
            for (let i = 0; i < rows.length; i++) expect(Buffer.from(got[i].buffer).equals(Buffer.from(want[i].buffer)), `${format} ×${scale} threads=${threads} matrix ${i}`).toBe(true);
            if (threads > 1) expect(arena.poolStats()!.splitCalls - before).toBe(1);
          }
        } finally {
          arena.closePool();
        }
      }
    }
  });

  it('a llama decode step runs the norms before q·k·v, gate·up and lm_head inside their jobs with the logits of the steps they replace', async () => {
    const model = await loadDir(path.join(tmp, 'fx-hd32'), { threads: 2, pool: { minWork: 0 } });
    const fusedCall = WasmArena.prototype.matmulGroupNormed;
    let calls = 0;
    WasmArena.prototype.matmulGroupNormed = function (...a: Parameters<WasmArena['matmulGroupNormed']>) {
      calls++;
      return fusedCall.apply(this, a);
    };
    try {
      const layers = (JSON.parse(readFileSync(path.join(tmp, 'fixture-hd32', 'config.json'), 'utf8')) as { num_hidden_layers: number }).num_hidden_layers;
      const [a, b] = [model.newCache(), model.newCache()];
      model.forward(prompt, a);
      model.forward(prompt, b);
      expect(calls).toBe(0); // prefill: the norms run as steps
      const fused = model.forward([3], a);
      // the last layer's too (its queries, the logit position's row, with its keys and values: one token), and the final norm in lm_head's job
      expect(calls).toBe(2 * layers + 1);
      calls = 0;
      const plain = model.forward([3], b, { rowwise: true });
      expect(calls).toBe(0);
      expect(Buffer.from(fused.buffer).equals(Buffer.from(plain.buffer))).toBe(true);
    } finally {
      WasmArena.prototype.matmulGroupNormed = fusedCall;
      await model.close();
    }
  });

  it("the residual add in o_proj's and down_proj's jobs (each thread adds it to its rows) equals matmul then the interpreter's add bit for bit", async () => {
    const rng = new Rng(24);
    const bits = new Uint32Array(1);
    const anyFloat = () => {
      bits[0] = Math.floor(rng.next() * 2 ** 32);
      return new Float32Array(bits.buffer)[0];
    };
    // NaN's payload is the platform's (WebAssembly leaves it open): any NaN matches any NaN, all else bit for bit
    const canon = (a: Float32Array) => Buffer.from(Float32Array.from(a, (v) => (Number.isNaN(v) ? NaN : v)).buffer);
    // The epilogue's kernel alone, over lengths that leave a tail after its four-at-a-time loop:
    // the add's JS formula (a double sum stored to float32) on wide-ranging values, ±0, ±Inf, NaN, random bits.
    {
      const n = 1027;
      const arena = WasmArena.create(8 * n + 64, 64)!;
      const f32 = new Float32Array(arena.memory.buffer);
      const [yAt, rAt] = [arena.weightsBase, arena.weightsBase + 4 * n + 32];
      const pick = (i: number) => (i % 7 === 0 ? anyFloat() : i % 11 === 0 ? [0, -0, Infinity, -Infinity, NaN, 3.4e38, -3.4e38, 1e-45][i % 8] : 10 ** (8 * rng.next() - 4) * rng.normal());
      const y = Float32Array.from({ length: n }, (_, i) => pick(i));
      const r = Float32Array.from({ length: n }, (_, i) => pick(i + 3));
      for (const len of [n, 1, 3, 4, 5, 16, 17, 768]) {
        f32.set(y, yAt / 4);
        f32.set(r, rAt / 4);
        (arena as unknown as { exports: Record<string, (...a: number[]) => void> }).exports.add_f32(yAt, rAt, 4 * len);
        const want = Float32Array.from(y, (v, i) => (i < len ? r[i] + v : v));
        expect(canon(f32.slice(yAt / 4, yAt / 4 + n)).equals(canon(want)), `length ${len}`).toBe(true);
      }
    }
    const silu = SiluMul.create()!;
    for (const [format, cols] of [['Q8_0', 288], ['Q4_0', 96], ['Q4_K', 512]] as [WeightFormat, number][]) {
      const rows = 37;
      const blob = quantize(format, Float32Array.from({ length: rows * cols }, () => rng.normal()), cols);
      for (const threads of [1, 2, 3]) {
        const { arena, ws: [w] } = await arenaOf(format, cols, [rows], [blob], threads);
        try {
          for (const scale of [1, 1e4, 1e-4]) {
            const x = Float32Array.from({ length: cols }, () => rng.normal());
            const res = Float32Array.from({ length: rows }, () => scale * rng.normal());
            const y = new Float32Array(rows);
            matmul(w, x, 1, cols, y, rows);
            const want = Float32Array.from(y, (v, i) => res[i] + v);
            const got = new Float32Array(rows).fill(NaN);
            const before = arena.poolStats()?.splitCalls ?? 0;
            expect(matmulResidual(w, x, res, got)).toBe(true);
            if (threads > 1) expect(arena.poolStats()!.splitCalls - before).toBe(1);
            expect(Buffer.from(got.buffer).equals(Buffer.from(want.buffer)), `${format} o ×${scale} threads=${threads}`).toBe(true);
            // the down projection: silu(g)·u, the matmul and the add in one job
            const g = Float32Array.from({ length: cols }, () => 8 * rng.normal());
            const u = Float32Array.from({ length: cols }, () => rng.normal());
            const act = new Float32Array(cols);
            silu.run(g, u, act, cols);
            matmul(w, act, 1, cols, y, rows);
            const wantDown = Float32Array.from(y, (v, i) => v + res[i]);
            const gotDown = new Float32Array(rows).fill(NaN);
            const beforeDown = arena.poolStats()?.splitCalls ?? 0;
            expect(matmulSiluMul(w, g, u, 1, cols, gotDown, rows, null, res)).toBe(true);
            expect(Buffer.from(gotDown.buffer).equals(Buffer.from(wantDown.buffer)), `${format} down ×${scale} threads=${threads}`).toBe(true);
            if (threads > 1) expect(arena.poolStats()!.splitCalls - beforeDown).toBe(1);
          }
        } finally {
          arena.closePool();
        }
      }
    }
  });

  it('a llama decode step adds the residual inside o_proj and down_proj with the logits of the steps it replaces', async () => {
    await expectFusedDecode([['fx-hd32', 'fixture-hd32'], ['fx-q4_k', 'fixture-256']], ['matmulResidual', 'matmulSiluMul'], (m, a) => m === 'matmulResidual' || Boolean(a[11]), (layers) => 2 * layers);
  });

  it("RoPE on q's and k's heads in the q·k·v job (the job cut at heads, each thread rotating its own) equals the group then the interpreter's rope bit for bit", async () => {
    const rng = new Rng(25);
    // The interpreter's rope, written out: x_i·c − x_{i+h}·s and x_{i+h}·c + x_i·s in float64, stored to float32.
    const rope = (v: Float32Array, hd: number, cos: Float32Array, sin: Float32Array, row: number) => {
      const h = hd / 2;
      for (let o = 0; o < v.length; o += hd) {
        for (let i = 0; i < h; i++) {
          const [a, b, c, s] = [v[o + i], v[o + i + h], cos[row * h + i], sin[row * h + i]];
          v[o + i] = a * c - b * s;
          v[o + i + h] = b * c + a * s;
        }
      }
    };
    // The epilogue's kernel alone: values over 8 decades, angles anywhere
    {
      const [hd, heads, rows] = [64, 5, 4];
      const n = hd * heads;
      const arena = WasmArena.create(8 * n + 64, 64)!;
      const f32 = new Float32Array(arena.memory.buffer);
      const [yAt, rAt] = [arena.weightsBase, arena.weightsBase + 4 * n];
      const angle = Float32Array.from({ length: rows * hd / 2 }, () => 100 * rng.normal());
      const cos = angle.map(Math.cos);
      const sin = angle.map(Math.sin);
      const y = Float32Array.from({ length: n }, () => 10 ** (8 * rng.next() - 4) * rng.normal());
      for (let h = 0; h < heads; h++) (f32.set(cos.subarray(3 * 32, 4 * 32), rAt / 4 + h * hd), f32.set(sin.subarray(3 * 32, 4 * 32), rAt / 4 + h * hd + 32));
      f32.set(y, yAt / 4);
      new Int32Array(arena.memory.buffer)[(NORM_R_SLOT + 8) / 4] = hd / 2; // half a head, after the norm's float64
      (arena as unknown as { exports: Record<string, (...a: number[]) => void> }).exports.rope_f32(yAt + 4 * hd, rAt + 4 * hd, 4 * hd * (heads - 2));
      const want = y.slice();
      rope(want.subarray(hd, hd * (heads - 1)), hd, cos, sin, 3);
      expect(Buffer.from(f32.slice(yAt / 4, yAt / 4 + n).buffer).equals(Buffer.from(want.buffer))).toBe(true);
    }
    for (const [format, cols, hd] of [['Q8_0', 288, 32], ['Q4_K', 512, 64]] as [WeightFormat, number, number][]) {
      const rows = [4 * hd, 2 * hd, 2 * hd]; // q, k, v
      const blobs = rows.map((r) => quantize(format, Float32Array.from({ length: r * cols }, () => rng.normal()), cols));
      const angle = Float32Array.from({ length: 9 * hd / 2 }, (_, i) => (i >> 4) * 0.7 + rng.normal());
      const [cos, sin] = [angle.map(Math.cos), angle.map(Math.sin)];
      for (const threads of [1, 2, 3]) {
        const { arena, ws } = await arenaOf(format, cols, rows, blobs, threads);
        try {
          for (const row of [0, 5, 8]) {
            const x = Float32Array.from({ length: cols }, () => rng.normal());
            const g = Float32Array.from({ length: cols }, () => 1 + 0.3 * rng.normal());
            const want = rows.map((r) => new Float32Array(r));
            matmulGroup(ws, norm(x, g, 1e-5), 1, cols, want.map((y, i) => ({ y, yStride: rows[i], bias: null })), cols);
            rope(want[0], hd, cos, sin, row);
            rope(want[1], hd, cos, sin, row);
            const got = rows.map((r) => new Float32Array(r).fill(NaN));
            const before = arena.poolStats()?.splitCalls ?? 0;
            expect(matmulGroupNormed(ws, x, cols, g, 1e-5, got.map((y, i) => ({ y, yStride: rows[i], bias: null })), { matrices: 2, half: hd / 2, cos, sin, row })).toBe(true);
            for (let i = 0; i < rows.length; i++) expect(Buffer.from(got[i].buffer).equals(Buffer.from(want[i].buffer)), `${format} row ${row} threads=${threads} matrix ${i}`).toBe(true);
            if (threads > 1) expect(arena.poolStats()!.splitCalls - before).toBe(1);
          }
        } finally {
          arena.closePool();
        }
      }
    }
  });

  it('a llama decode step runs the ropes of q and k inside the q·k·v jobs with the logits of the steps they replace', async () => {
    await expectFusedDecode([['fx-hd32', 'fixture-hd32'], ['fx-q4_k', 'fixture-256']], ['matmulGroupNormed'], (_, a) => Boolean(a[7]), (layers) => layers);
  });
});
