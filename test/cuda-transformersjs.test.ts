/**
 * transformers.js (@huggingface/transformers, on onnxruntime-node) loads `--target cuda` directories
 * from disk as a user would (env.localModelPath, local_files_only, no network) and its greedy
 * generate equals `llmc run` on the same directory, for fp32, fp16, external data and int4 MatMulNBits
 * with a padded last block (stories260K's FFN of 172); int8 and int4 DequantizeLinear equal it with
 * onnxruntime's DequantizeLinear→MatMulNBits fusion at accuracy level 0 (llmc's setting), and differ by
 * the bound docs/cuda.md gives under transformers.js' default (level 4: int8 activations).
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
    ['int4-padded', 'int4', {}],
    ['int4-b64-padded', 'int4-b64', { 'cuda.zeroPoints': 'true' }],
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

/** exp-free comparison of two logits tensors: relative RMS difference and greedy (argmax) agreement per position. */
function compare(a: Float32Array, b: Float32Array, V: number): { relErr: number; argmaxAgree: number } {
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i] - b[i]) ** 2;
    den += b[i] ** 2;
  }
  let agree = 0;
  const T = a.length / V;
  for (let t = 0; t < T; t++) {
    const x = Array.from(a.subarray(t * V, (t + 1) * V));
    const y = Array.from(b.subarray(t * V, (t + 1) * V));
    if (x.indexOf(Math.max(...x)) === y.indexOf(Math.max(...y))) agree++;
  }
  return { relErr: Math.sqrt(num / den), argmaxAgree: agree / T };
}

describe('int8 and int4 DequantizeLinear: transformers.js against llmc run, and why they differ', () => {
  const LEVEL0 = { extra: { session: { qdq_matmulnbits_accuracy_level: '0' } } };
  for (const [name, quant, opts, bound] of [
    ['int8', 'int8', {}, 0.1],
    ['int4-dq', 'int4', { 'cuda.int4': 'dequantizelinear' }, 0.2],
  ] as const) {
    it(`${name}: identical logits at accuracy level 0; within ${bound} (relative RMS) under transformers.js' default`, async () => {
      const dir = path.join(tmp, name);
      await compile({ source: src, target: 'cuda', outDir: dir, passes: [], quant, opts, progress: silentProgress, note: () => {} });
      const ref = JSON.parse(await fsp.readFile(path.join(MODEL, 'reference.json'), 'utf8')).greedy_ids as number[];
      const seq = [1, ...ref];
      const { OnnxDecoder } = await import('../src/exec/engine/decoder-dir.js');
      const d = await OnnxDecoder.open(path.join(dir, 'onnx/model.onnx'));
      const ours = await d.logits(seq);
      await d.close();
      const figures: Record<string, unknown> = {};
      for (const [label, session_options] of [['level 0', LEVEL0], ['default', undefined]] as const) {
        const model = await AutoModelForCausalLM.from_pretrained(name, { local_files_only: true, device: 'cpu', ...(session_options ? { session_options } : {}) });
        try {
          const ids = new Tensor('int64', BigInt64Array.from(seq, BigInt), [1, seq.length]);
          const mask = new Tensor('int64', new BigInt64Array(seq.length).fill(1n), [1, seq.length]);
          const out = (await model({ input_ids: ids, attention_mask: mask })) as { logits: Tensor };
          const theirs = out.logits.data as Float32Array;
          const c = compare(theirs, ours, 512);
          figures[label] = c;
          if (label === 'level 0') expect(c.relErr).toBe(0);
          else expect(c.relErr).toBeLessThan(bound);
        } finally {
          await model.dispose();
        }
      }
      console.log(`${name} stories260K, transformers.js vs llmc run (teacher-forced, ${seq.length} positions):`, JSON.stringify(figures));
    });
  }
});
