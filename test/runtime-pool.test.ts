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
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

const prompt = [1, 5, 9, 2, 77, 13, 200, 41, 8];

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

  for (const [name, dir] of [['stories260K F32', 'stories'], ['llama fixture F32', 'fx-f32'], ['llama fixture Q8_0', 'fx-q8']]) {
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
