/**
 * transformers.js (@huggingface/transformers, on onnxruntime-node) loads `--target cuda` directories
 * from disk as a user would (env.localModelPath, local_files_only, no network) and its greedy
 * generate equals `llmc run` on the same directory, for fp32, fp16 and external data.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { AutoModelForCausalLM, env, Tensor } from '@huggingface/transformers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { llmcInProcess } from './cli.js';

const MODEL = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
let src: Checkpoint;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-cuda-tjs-'));
  src = await openCheckpoint(MODEL);
  env.allowRemoteModels = false;
  env.localModelPath = tmp;
});
afterAll(async () => {
  await src?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

describe('transformers.js reads the cuda directory', () => {
  for (const [name, quant, opts] of [
    ['fp32', 'fp32', {}],
    ['fp16', 'fp16', {}],
    ['fp16-external', 'fp16', { 'cuda.externalData': 'true' }],
  ] as const) {
    it(`${name}: AutoModelForCausalLM greedy generate equals llmc run`, async () => {
      const dir = path.join(tmp, name);
      await compile({ source: src, target: 'cuda', outDir: dir, passes: [], quant, opts, progress: silentProgress, note: () => {} });
      const prompt = [1, 461, 401];
      const n = 24;
      const run = await llmcInProcess('run', dir, '--prompt-ids', prompt.join(','), '-n', String(n), '--json');
      expect(run.code).toBe(0);
      const expected = JSON.parse(run.stdout).generated_ids as number[];
      expect(expected).toHaveLength(n);

      const model = await AutoModelForCausalLM.from_pretrained(name, { local_files_only: true, device: 'cpu' });
      try {
        const ids = new Tensor('int64', BigInt64Array.from(prompt, BigInt), [1, prompt.length]);
        const mask = new Tensor('int64', new BigInt64Array(prompt.length).fill(1n), [1, prompt.length]);
        const out = (await model.generate({ input_ids: ids, attention_mask: mask, max_new_tokens: n, min_new_tokens: n, do_sample: false })) as Tensor;
        expect(Array.from(out.data as BigInt64Array, Number)).toEqual([...prompt, ...expected]);
      } finally {
        await model.dispose();
      }
    });
  }
});
