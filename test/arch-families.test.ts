/**
 * The families of issue 29 read by llmc (qwen3, qwen3_moe, olmoe, olmo2, granite, smollm3): each
 * transformers-5.17-written checkpoint under ../shared/models/archs reproduces transformers' own
 * float32 logits on onnxruntime and the TS runtime at every position, greedy ids agree where the
 * reference's top-2 margin allows, and tfjs gradients match finite differences.
 */
import { existsSync, promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { normalizeConfig, openCheckpoint } from '../src/core/checkpoint/index.js';
import { Engine } from '../src/exec/engine/index.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { compileTs } from './ts-artifact.js';
import { TfModel } from '../src/exec/autodiff/lower.js';
import { tf } from '../src/exec/autodiff/tf.js';
import { Rng } from '../src/core/util/rng.js';

type Json = Record<string, unknown>;
const ARCHS = path.resolve(__dirname, '../../shared/models/archs');
const HAVE = existsSync(ARCHS);
if (!HAVE) console.log(`arch-families: ${ARCHS} is absent; the tests on transformers-written checkpoints are skipped`);
const FAMILIES = ['qwen3', 'qwen3_moe', 'olmoe', 'olmo2', 'granite', 'smollm3', 'gemma2', 'gemma3_text', 'phi3'];

let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-arch-families-'));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

const readJson = (f: string) => JSON.parse(readFileSync(f, 'utf8')) as Json;

/** reference_logits.safetensors: one float32 tensor [positions, vocab]. */
export function referenceLogits(file: string): { data: Float32Array; shape: number[] } {
  const buf = readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  const [name] = Object.keys(header).filter((k) => k !== '__metadata__');
  const t = header[name];
  const bytes = buf.subarray(8 + n + t.data_offsets[0], 8 + n + t.data_offsets[1]);
  return { data: new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength)), shape: t.shape };
}

/** The worst position's max |a − b| / max |b| (each position's row on its own scale). */
export function worstRowError(a: Float32Array, b: Float32Array, V: number): number {
  let worst = 0;
  for (let r = 0; r * V < b.length; r++) {
    let e = 0;
    let m = 0;
    for (let i = r * V; i < (r + 1) * V; i++) {
      e = Math.max(e, Math.abs(a[i] - b[i]));
      m = Math.max(m, Math.abs(b[i]));
    }
    worst = Math.max(worst, e / m);
  }
  return worst;
}

/** Positions where a's argmax differs from b's although b's top-2 margin exceeds `margin`. */
function argmaxDisagreements(a: Float32Array, b: Float32Array, V: number, margin: number): number[] {
  const bad: number[] = [];
  for (let r = 0; r * V < b.length; r++) {
    const row = (x: Float32Array) => x.subarray(r * V, (r + 1) * V);
    const arg = (x: Float32Array) => x.reduce((best, v, i) => (v > x[best] ? i : best), 0);
    const rb = row(b);
    const top = arg(rb);
    const second = Math.max(...Array.from(rb).filter((_, i) => i !== top));
    if (rb[top] - second > margin && arg(row(a)) !== top) bad.push(r);
  }
  return bad;
}

describe.skipIf(!HAVE).each(FAMILIES)("%s reproduces transformers' reference logits", (name) => {
  const dir = path.join(ARCHS, name);
  let ids: number[];
  let ref: { data: Float32Array; shape: number[] };
  beforeAll(() => {
    ids = (readJson(path.join(dir, 'reference.json')).prompt_ids as number[]).slice();
    ref = referenceLogits(path.join(dir, 'reference_logits.safetensors'));
    expect(ref.shape[0]).toBe(ids.length);
  });

  it('config.json normalizes', () => {
    const file = path.join(dir, 'config.json');
    expect(normalizeConfig(readJson(file), file).modelType).toBe(name);
  });

  it('onnxruntime, every position within 1e-4 relative; argmax equal where the margin allows', async () => {
    const ck = await openCheckpoint(dir);
    const engine = await Engine.open(ck, { threads: 1 });
    try {
      const got = await engine.logits(ids);
      const err = worstRowError(got, ref.data, ref.shape[1]);
      console.log(`${name} onnxruntime worst row error ${err.toExponential(2)}`);
      expect(err).toBeLessThan(1e-4);
      expect(argmaxDisagreements(got, ref.data, ref.shape[1], 1e-3)).toEqual([]);
    } finally {
      await engine.close();
      await ck.close();
    }
  });

  it('tfjs, every position within 1e-4 relative', async () => {
    const ck = await openCheckpoint(dir);
    const model = await TfModel.load(ck);
    try {
      const err = worstRowError(await model.allLogits(ids), ref.data, ref.shape[1]);
      console.log(`${name} tfjs worst row error ${err.toExponential(2)}`);
      expect(err).toBeLessThan(1e-4);
    } finally {
      model.dispose();
      await ck.close();
    }
  });

  it('the TS runtime (F32 artifact), every position within 1e-4 relative', async () => {
    const out = path.join(tmp, `ts-${name}`);
    await compileTs(dir, out);
    const model = await loadDir(out);
    const got = model.forward(ids);
    const err = worstRowError(got, ref.data, ref.shape[1]);
    console.log(`${name} ts runtime worst row error ${err.toExponential(2)}`);
    expect(err).toBeLessThan(1e-4);
    expect(argmaxDisagreements(got, ref.data, ref.shape[1], 1e-3)).toEqual([]);
  });
});

describe.skipIf(!HAVE).each(['olmo2', 'qwen3', 'granite', 'gemma2', 'gemma3_text', 'phi3'])('%s: tfjs gradients equal finite differences', (name) => {
  // olmo2: a whole-projection q norm and post-norms; qwen3: per-head q/k norms; granite: the multipliers;
  // gemma2: sandwich (1 + w) norms, GELU-tanh, final soft-capping; gemma3: per-head (1 + w) q/k norms; phi3: split qkv / gate_up.
  it('the directional derivative of the loss along a random direction of q_proj and down_proj', async () => {
    const ck = await openCheckpoint(path.join(ARCHS, name));
    const model = await TfModel.load(ck);
    try {
      const seq = [(readJson(path.join(ARCHS, name, 'reference.json')).prompt_ids as number[]).slice(0, 10)];
      const names = ['model.layers.1.self_attn.q_proj.weight', 'model.layers.2.mlp.down_proj.weight'];
      const { grads } = await model.gradients(seq, names);
      const rng = new Rng(5);
      const base = await Promise.all(names.map(async (n) => ({ n, shape: ck.meta(n)!.shape, w: await ck.readF32(n) })));
      const dirs = base.map((b) => Float32Array.from(b.w, () => rng.normal()));
      let analytic = 0;
      base.forEach((b, i) => grads.get(b.n)!.forEach((g, k) => (analytic += g * dirs[i][k])));
      const at = (eps: number) =>
        tf.tidy(() => {
          // The lowering holds linear weights transposed ([in, out]) under `name#T`.
          const over = new Map(base.map((b, i) => [`${b.n}#T`, tf.transpose(tf.tensor2d(Float32Array.from(b.w, (v, k) => v + eps * dirs[i][k]), b.shape as [number, number]))]));
          return model.loss(seq, {}, over).dataSync()[0];
        });
      const central = (h: number) => (at(h) - at(-h)) / (2 * h);
      const numeric = (4 * central(1e-3) - central(2e-3)) / 3;
      expect(Math.abs(analytic)).toBeGreaterThan(1e-3);
      expect(Math.abs(analytic - numeric) / Math.abs(numeric)).toBeLessThan(5e-3);
    } finally {
      model.dispose();
      await ck.close();
    }
  });
});
