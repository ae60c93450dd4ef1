/**
 * The autodiff lowering (tfjs) behind Taylor importance, checked against an independent engine:
 * for a neuron j, Σ_k W_down[k,j]·∂L/∂W_down[k,j] equals ∂L/∂s_j where s_j scales the neuron's
 * down_proj column; the latter is a central finite difference of the loss computed by the
 * onnxruntime engine on scaled weights. Also: reordering options reject bad input.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TfModel } from '../src/exec/autodiff/lower.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { transformSource } from '../src/core/checkpoint/source.js';
import { Engine } from '../src/exec/engine/index.js';
import { UsageError } from '../src/core/errors.js';
import { Rng } from '../src/core/util/rng.js';
import { parseReorderOptions } from '../passes/reorder/options.js';
import { findTarget } from '../src/app/compile/plan.js';
import { argmax } from '../src/core/sampling.js';
import { relErr } from './numeric.js';

const MODEL = path.resolve(__dirname, '../fixtures/models/stories260K');
let ckpt: Checkpoint;
beforeAll(async () => {
  ckpt = await openCheckpoint(MODEL);
});
afterAll(async () => ckpt?.close());

describe('tfjs lowering', () => {
  it('gives the reference greedy ids and the engine\'s logits (same IR, another lowering)', async () => {
    const fs = await import('node:fs/promises');
    const ref = JSON.parse(await fs.readFile(path.join(MODEL, 'reference.json'), 'utf8')).greedy_ids as number[];
    const tf = await TfModel.load(ckpt);
    const e = await Engine.open(ckpt);
    try {
      // Teacher-forced over [BOS, ref...]: greedy reproduces ref iff every position's argmax is the next ref id.
      const ids = [1, ...ref];
      const V = ckpt.spec.vocabSize;
      const all = await tf.allLogits(ids.slice(0, -1));
      const argmaxes = ref.map((_, t) => argmax(all.subarray(t * V, (t + 1) * V)));
      expect(argmaxes).toEqual(ref);
      const a = await tf.allLogits(ids.slice(0, 20));
      const b = await e.logits(ids.slice(0, 20));
      expect(relErr(a, b)).toBeLessThan(1e-5);
    } finally {
      tf.dispose();
      await e.close();
    }
  });
});

describe('taylor gradients', () => {
  it('W·∇W summed over a neuron equals the finite-difference derivative of the engine loss', async () => {
    const rng = new Rng(3);
    const seqs = Array.from({ length: 4 }, () => [1, ...Array.from({ length: 31 }, () => 3 + rng.int(500))]);
    const name = 'model.layers.2.mlp.down_proj.weight';
    const I = ckpt.spec.intermediateSize;
    const tf = await TfModel.load(ckpt);
    let analytic: Float64Array;
    try {
      const { grads } = await tf.gradients(seqs, [name]);
      const w = await ckpt.readF32(name);
      const g = grads.get(name)!;
      analytic = new Float64Array(I);
      for (let i = 0; i < w.length; i++) analytic[i % I] += w[i] * g[i];
    } finally {
      tf.dispose();
    }
    // The 3 neurons with the largest |derivative| (well above f32 noise).
    const js = Array.from({ length: I }, (_, j) => j).sort((a, b) => Math.abs(analytic[b]) - Math.abs(analytic[a])).slice(0, 3);
    const eps = 0.05;
    const lossAt = async (j: number, s: number) => {
      const scaled = transformSource(ckpt, {
        label: `scale ${j} ${s}`,
        paramsHash: `${j}:${s}`,
        rewrite: (n, d) => {
          if (n === name) for (let r = 0; r < d.length / I; r++) d[r * I + j] *= s;
          return d;
        },
      });
      const e = await Engine.open(scaled);
      try {
        return Math.log(await e.perplexity(seqs));
      } finally {
        await e.close();
      }
    };
    for (const j of js) {
      const fd = ((await lossAt(j, 1 + eps)) - (await lossAt(j, 1 - eps))) / (2 * eps);
      expect(Math.abs(fd - analytic[j])).toBeLessThan(0.02 * Math.abs(analytic[j]) + 1e-5);
    }
  });
});

describe('options', () => {
  it('rejects bad values with usage errors', () => {
    expect(() => parseReorderOptions({ importance: 'psychic' })).toThrow(UsageError);
    expect(() => parseReorderOptions({ levels: '0,0.5' })).toThrow(UsageError);
    expect(() => parseReorderOptions({ levels: '1.5' })).toThrow(UsageError);
    expect(() => parseReorderOptions({ bogus: '1' })).toThrow(/unknown reorder option/);
    expect(() => parseReorderOptions({ calib: '-3' })).toThrow(UsageError);
    expect(parseReorderOptions({ levels: '0.75,0.5,0.5' }).levels).toEqual([0.5, 0.75]);
    expect(parseReorderOptions({ levels: '4' }).levels).toEqual({ count: 4 });
    expect(parseReorderOptions({ anchors: '0,3' }).anchors).toEqual([0, 3]);
    expect(parseReorderOptions({}).importance).toBe('activation');
  });
  it('aligns to the quantization block of the target format', () => {
    const quantBlockFor = (target: string, quant: string | undefined) => findTarget(target).quantBlock({ quant, tensorTypes: [] });
    expect(quantBlockFor('gguf', 'Q8_0')).toBe(32);
    expect(quantBlockFor('gguf', 'Q4_K_M')).toBe(256);
    expect(quantBlockFor('ts', 'F32')).toBe(1);
    expect(quantBlockFor('hf', undefined)).toBe(1);
  });
});
