/**
 * The register-tiled T > 1 kernels (src/exec/runtime/gemm.ts): against a float64 reference on small
 * random cases whose shapes leave rows and tokens outside whole tiles, row ranges cut on tile
 * boundaries equal to the bit (the worker pool splits rows so), and stories260K's reference ids
 * through one batched prefill.
 */
import { readFileSync } from 'node:fs';
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { Rng } from '../src/core/util/rng.js';
import { gemmUsesFma } from '../src/exec/runtime/gemm.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { compileTs } from './ts-artifact.js';
import { arenaWeight, tiledKernelChecks } from './gemm-checks.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');

describe('tiled T > 1 F32 kernel (WebAssembly SIMD)', () => {
  // Quantized weights take integer activations, prefill included (test/runtime-qdot.test.ts), not the tiles.
  it('uses plain multiply-adds by default (relaxed SIMD is opt-in: test/runtime-gemm-fma.test.ts)', () => {
    arenaWeight(4, 8, new Rng(1));
    expect(gemmUsesFma()).toBe(false);
  });
  tiledKernelChecks();
});

describe('stories260K through a batched prefill', () => {
  it("one forward over the reference sequence predicts reference.json's greedy ids at every position", async () => {
    const ref = JSON.parse(readFileSync(path.join(STORIES, 'reference.json'), 'utf8')) as { prompt_ids: number[]; greedy_ids: number[] };
    const tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-gemm-'));
    try {
      await compileTs(STORIES, tmp);
      const model = await loadDir(tmp);
      const seq = [...ref.prompt_ids, ...ref.greedy_ids.slice(0, -1)];
      const logits = model.forward(seq);
      const V = model.spec.vocabSize;
      const ids = seq.map((_, t) => {
        let best = 0;
        for (let i = 1; i < V; i++) if (logits[t * V + i] > logits[t * V + best]) best = i;
        return best;
      });
      expect(ids).toEqual(ref.greedy_ids);
    } finally {
      await fsp.rm(tmp, { recursive: true, force: true });
    }
  });
});
