/**
 * onnxruntime engine speed on a generated ~100M-parameter llama (FIXTURE_PRESETS['llama-100M']):
 * prefill tokens/s at 512 tokens and decode tokens/s, with the achieved GFLOP/s of prefill set
 * against a plain onnxruntime MatMul of the model's own shape measured in the same run (baseline).
 *
 * Standalone: `npx tsc -p tsconfig.bench.json && node dist/bench/engine.bench.js [--quick]`.
 */
import '../src/exec/engine/ort-env.js'; // before onnxruntime-node loads
import * as ort from 'onnxruntime-node';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { Engine } from '../src/exec/engine/engine.js';
import { onnx, DT_FLOAT } from '../src/exec/onnx/proto.js';

import { cachedFixture, runIfMain, type BenchSuite } from './harness.js';

/** GFLOP/s of one onnxruntime MatMul [M,K]·[K,N] with a constant weight: what prefill is made of. */
async function matmulBaseline(M: number, K: number, N: number, threads: number | undefined, reps: number): Promise<number> {
  const w = new Float32Array(K * N).map((_, i) => ((i * 2654435761) % 1000) / 1000 - 0.5);
  const model = onnx.ModelProto.encode({
    irVersion: 8,
    opsetImport: [{ domain: '', version: 17 }],
    graph: {
      name: 'mm',
      node: [{ opType: 'MatMul', input: ['x', 'w'], output: ['y'], attribute: [] }],
      initializer: [{ name: 'w', dims: [K, N], dataType: DT_FLOAT, rawData: new Uint8Array(w.buffer) }],
      input: [{ name: 'x', type: { tensorType: { elemType: DT_FLOAT, shape: { dim: [{ dimValue: M }, { dimValue: K }] } } } }],
      output: [{ name: 'y', type: { tensorType: { elemType: DT_FLOAT } } }],
    },
  }).finish();
  // The engine's session options (no spinning), so the ratio compares like with like.
  const session = await ort.InferenceSession.create(model, { ...(threads ? { intraOpNumThreads: threads } : {}), extra: { session: { intra_op: { allow_spinning: '0' } } } });
  const x = new ort.Tensor('float32', new Float32Array(M * K).fill(0.01), [M, K]);
  await session.run({ x });
  let best = Infinity;
  for (let r = 0; r < reps; r++) {
    const t = performance.now();
    await session.run({ x });
    best = Math.min(best, performance.now() - t);
  }
  await session.release();
  return (2 * M * K * N) / (best / 1000) / 1e9;
}

export const suite: BenchSuite = {
  name: 'engine',
  description: 'onnxruntime engine on a generated ~100M llama: prefill tokens/s at 512 tokens, decode tokens/s, prefill GFLOP/s vs a plain MatMul',
  run: async (opts) => {
    const quick = Boolean(opts.quick);
    const prefillLen = quick ? 128 : 512;
    const decodeSteps = quick ? 8 : 32;
    const reps = quick ? 1 : 2;
    const { dir } = await cachedFixture('llama-100M', { arch: 'llama', seed: 1, tokenizer: 'none' });
    const ck = await openCheckpoint(dir);
    const spec = ck.spec;
    const params = ck.tensors.reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1), 0);
    const embed = spec.vocabSize * spec.hiddenSize;
    // Per-token FLOPs: 2 × every matmul weight (the embedding lookup is free) + attention.
    const flopsPerToken = (ctx: number) => 2 * (params - embed) + 4 * spec.numLayers * spec.numHeads * spec.headDim * ctx;
    const results: Record<string, unknown> = {
      model: 'fixtures llama-100M (F32)',
      parameters: params,
      prefill_tokens: prefillLen,
      decode_steps: decodeSteps,
      runs: {} as Record<string, unknown>,
    };
    const prompt = Array.from({ length: prefillLen }, (_, i) => (i * 7919 + 3) % spec.vocabSize);
    for (const threads of [undefined, 1]) {
      const label = threads ? `threads_${threads}` : 'threads_default';
      const t0 = performance.now();
      const engine = await Engine.open(ck, { threads });
      const openSeconds = (performance.now() - t0) / 1000;
      let prefillBest = Infinity;
      let decodeBest = Infinity;
      for (let r = 0; r <= reps; r++) {
        const s = engine.session();
        const a = performance.now();
        await s.prefill(prompt);
        const b = performance.now();
        for (let i = 0; i < decodeSteps; i++) await s.decode((i * 31 + 5) % spec.vocabSize);
        const c = performance.now();
        if (r === 0) continue; // warm-up
        prefillBest = Math.min(prefillBest, b - a);
        decodeBest = Math.min(decodeBest, c - b);
      }
      await engine.close();
      const prefillTps = prefillLen / (prefillBest / 1000);
      const prefillGflops = (prefillTps * flopsPerToken(prefillLen / 2)) / 1e9;
      const baseline = await matmulBaseline(prefillLen, spec.hiddenSize, spec.intermediateSize, threads, reps + 1);
      (results.runs as Record<string, unknown>)[label] = {
        open_seconds: +openSeconds.toFixed(2),
        prefill_tokens_per_second: +prefillTps.toFixed(1),
        decode_tokens_per_second: +(decodeSteps / (decodeBest / 1000)).toFixed(2),
        prefill_gflops: +prefillGflops.toFixed(1),
        baseline_matmul_gflops: +baseline.toFixed(1),
        prefill_vs_matmul_ratio: +(prefillGflops / baseline).toFixed(3),
      };
    }
    await ck.close();
    return results;
  },
};

runIfMain(import.meta.url, suite);
