/**
 * Every fixture architecture (and rope_scaling / sliding-window / routing variants) on the
 * onnxruntime engine against the independent float64 reference: logits, KV-cache decode, taps.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { generateFixture, type FixtureArch } from '../fixtures/generate.js';
import { normalizeConfig, openCheckpoint, transformSource } from '../src/core/checkpoint/index.js';
import { Engine } from '../src/exec/engine/index.js';
import { Llama64, newTrace, type Trace } from './reference/llama64.js';
import { maxRelError, relErr } from './numeric.js';
import type { ArchSpec } from '../src/core/arch/spec.js';

let root: string;
beforeAll(async () => {
  root = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-engine-'));
});
afterAll(async () => {
  await fsp.rm(root, { recursive: true, force: true });
});

/** A fixture checkpoint, with config.json patched for the variant under test. */
async function fixture(name: string, arch: FixtureArch, patch: Record<string, unknown> = {}, opts: { dtype?: 'F32' | 'BF16'; tie?: boolean } = {}) {
  const dir = path.join(root, name);
  await generateFixture(dir, { arch, seed: 7, dtype: opts.dtype ?? 'F32', tokenizer: 'none', tieEmbeddings: opts.tie });
  const file = path.join(dir, 'config.json');
  const cfg = JSON.parse(await fsp.readFile(file, 'utf8'));
  if (Object.keys(patch).length) await fsp.writeFile(file, JSON.stringify({ ...cfg, ...patch }));
  return { ck: await openCheckpoint(dir), unpatchedSpec: normalizeConfig(cfg, file) };
}

const SEQ = [1, 17, 300, 42, 9, 255, 100, 3, 77, 480, 61, 12];

/** What each patched variant must read as (mapped by hand from the Hugging Face keys, not by normalizeConfig). */
const EXPECTED_SPEC: Record<string, Partial<ArchSpec>> = {
  'mistral-sliding-window-4': { slidingWindow: 4 },
  'qwen2_moe-norm-topk': { moe: expect.objectContaining({ routing: 'softmax-topk-renorm' }) },
  qwen2_moe: { moe: expect.objectContaining({ routing: 'softmax-topk' }) },
  mixtral: { moe: expect.objectContaining({ routing: 'softmax-topk-renorm' }) },
  'llama-rope-linear': { ropeScaling: { type: 'linear', factor: 4 } },
  'llama-rope-llama3': {
    ropeTheta: 500000,
    ropeScaling: { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 64 },
  },
  'llama-rope-dynamic': { maxPositions: 8, ropeScaling: expect.objectContaining({ type: 'dynamic', factor: 2 }) },
  'llama-rope-yarn': { ropeScaling: expect.objectContaining({ type: 'yarn', factor: 4, originalMaxPositions: 32 }) },
  'llama-rope-yarn-attention': { ropeScaling: expect.objectContaining({ type: 'yarn', factor: 4, attentionFactor: 1.5, betaFast: 8, truncate: false }) },
  'llama-rope-longrope': { ropeScaling: expect.objectContaining({ type: 'longrope', originalMaxPositions: 8, attentionFactor: 1.2 }) },
  'qwen2-sliding-layers': { slidingWindow: 3, slidingLayers: [1] },
};

const variants: { name: string; arch: FixtureArch; patch?: Record<string, unknown>; opts?: { dtype?: 'F32' | 'BF16'; tie?: boolean } }[] = [
  { name: 'llama', arch: 'llama' },
  { name: 'llama-tied-bf16', arch: 'llama', opts: { dtype: 'BF16', tie: true } },
  { name: 'mistral', arch: 'mistral' },
  { name: 'mistral-sliding-window-4', arch: 'mistral', patch: { sliding_window: 4 } },
  { name: 'qwen2 (q/k/v biases)', arch: 'qwen2' },
  { name: 'mixtral', arch: 'mixtral' },
  { name: 'qwen2_moe', arch: 'qwen2_moe' },
  { name: 'qwen2_moe-norm-topk', arch: 'qwen2_moe', patch: { norm_topk_prob: true } },
  { name: 'llama-rope-linear', arch: 'llama', patch: { rope_scaling: { type: 'linear', factor: 4 } } },
  {
    name: 'llama-rope-llama3',
    arch: 'llama',
    patch: { rope_theta: 500000, rope_scaling: { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 64 } },
  },
  { name: 'llama-rope-dynamic', arch: 'llama', patch: { max_position_embeddings: 8, rope_scaling: { type: 'dynamic', factor: 2 } } },
  { name: 'llama-rope-yarn', arch: 'llama', patch: { rope_scaling: { type: 'yarn', factor: 4, original_max_position_embeddings: 32 } } },
  {
    name: 'llama-rope-yarn-attention',
    arch: 'llama',
    patch: { rope_parameters: { rope_type: 'yarn', rope_theta: 10000, factor: 4, original_max_position_embeddings: 32, attention_factor: 1.5, beta_fast: 8, truncate: false } },
  },
  {
    name: 'llama-rope-longrope',
    arch: 'llama',
    patch: {
      max_position_embeddings: 64,
      rope_parameters: { rope_type: 'longrope', rope_theta: 10000, original_max_position_embeddings: 8, attention_factor: 1.2, short_factor: [1, 1, 1.5, 2, 2, 3, 4, 4], long_factor: [1, 2, 3, 5, 8, 13, 21, 34] },
    },
  },
  { name: 'qwen2-sliding-layers', arch: 'qwen2', patch: { use_sliding_window: true, sliding_window: 3, max_window_layers: 1 } },
];

describe.each(variants)('$name', ({ name, arch, patch, opts }) => {
  let engine: Engine;
  let ref: Llama64;
  let unpatched: Llama64;
  let close: () => Promise<void>;
  beforeAll(async () => {
    const { ck, unpatchedSpec } = await fixture(name.replace(/[^a-z0-9-]/gi, '_'), arch, patch, opts);
    engine = await Engine.open(ck, { threads: 1 });
    ref = await Llama64.load(ck);
    unpatched = await Llama64.load(transformSource(ck, { label: 'unpatched', paramsHash: '', spec: unpatchedSpec, rewrite: (_n, d) => d }));
    close = async () => {
      await engine.close();
      await ck.close();
    };
  });
  afterAll(() => close());

  test.runIf(EXPECTED_SPEC[name])('config.json is read as the variant means it', () => {
    expect(engine.spec).toMatchObject(EXPECTED_SPEC[name]);
  });

  test('logits match the float64 reference', async () => {
    const err = maxRelError(await engine.logits(SEQ), ref.forward(SEQ));
    expect(err).toBeLessThan(1e-5);
  });

  test.runIf(patch)('the config variant changes the logits (so the match above is not vacuous)', () => {
    const a = ref.forward(SEQ);
    const b = unpatched.forward(SEQ);
    let diff = 0;
    a.forEach((row, t) => row.forEach((v, i) => (diff = Math.max(diff, Math.abs(v - b[t][i])))));
    expect(diff).toBeGreaterThan(1e-3);
  });

  // dynamic and longrope change their frequencies with the sequence length (as transformers does per call), so steps differ from one long call.
  test.skipIf(name === 'llama-rope-dynamic' || name === 'llama-rope-longrope')('KV-cache decode equals full recompute', async () => {
    const V = engine.spec.vocabSize;
    const full = await engine.logits(SEQ);
    const s = engine.session();
    const rows = [await s.prefill(SEQ.slice(0, 3))];
    for (const id of SEQ.slice(3)) rows.push(await s.decode(id));
    rows.forEach((row, i) => {
      const want = full.subarray((2 + i) * V, (3 + i) * V);
      expect(relErr(row, want)).toBeLessThan(1e-5);
    });
  });
});

/** Tap statistics recomputed from the reference's per-token trace. */
function expectStatsClose(got: ArrayLike<number>, want: ArrayLike<number>, rel = 1e-4): void {
  expect(got.length).toBe(want.length);
  let scale = 0;
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]));
  for (let i = 0; i < want.length; i++) expect(Math.abs(got[i] - want[i])).toBeLessThanOrEqual(rel * scale + 1e-12);
}

describe.each(['qwen2_moe', 'mixtral', 'qwen2'] as FixtureArch[])('taps on %s agree with the reference', (arch) => {
  const seqs = [SEQ.slice(0, 8), SEQ.slice(4, 12), SEQ.slice(0, 5)];
  let engine: Engine;
  let trace: Trace;
  let close: () => Promise<void>;
  beforeAll(async () => {
    const { ck } = await fixture(`taps-${arch}`, arch);
    engine = await Engine.open(ck, { threads: 1 });
    const ref = await Llama64.load(ck);
    trace = newTrace();
    for (const s of seqs) ref.forward(s, trace);
    close = async () => {
      await engine.close();
      await ck.close();
    };
  });
  afterAll(() => close());

  test('linear inputs, head outputs, router logits and MLP activations', async () => {
    const r = await engine.tap(seqs, [{ kind: 'linear-input' }, { kind: 'head-output' }, { kind: 'router-logits' }, { kind: 'mlp-act' }]);
    const tokens = seqs.reduce((a, s) => a + s.length, 0);
    expect(r.tokens).toBe(tokens);

    // Every linear except lm_head (tapped only at the positions that produce logits).
    let checked = 0;
    for (const [key, xs] of trace.linearInputs) {
      if (key === 'lm_head.weight' || key === 'model.embed_tokens.weight') continue;
      const s = r.linearInputs.get(key);
      expect(s, key).toBeDefined();
      expect(s!.tokens, key).toBe(xs.length);
      const C = xs[0].length;
      const absMax = new Float64Array(C);
      const sumSq = new Float64Array(C);
      for (const x of xs) for (let i = 0; i < C; i++) {
        absMax[i] = Math.max(absMax[i], Math.abs(x[i]));
        sumSq[i] += x[i] * x[i];
      }
      expectStatsClose(s!.absMax, absMax);
      expectStatsClose(s!.sumSq, sumSq);
      checked++;
    }
    expect(checked).toBeGreaterThan(10);
    // Experts the router never picked are tapped with zero tokens, and nothing else is.
    for (const [key, s] of r.linearInputs) if (!trace.linearInputs.has(key) && key !== 'lm_head.weight') expect(s.tokens, key).toBe(0);

    const H = engine.spec.numHeads;
    const hd = engine.spec.headDim;
    for (const [key, xs] of trace.headOutputs) {
      const want = new Float64Array(H);
      for (const x of xs) for (let i = 0; i < x.length; i++) want[Math.floor(i / hd)] += x[i] * x[i];
      expectStatsClose(r.headOutputs.get(key)!.sumSq, want);
    }

    for (const [key, xs] of trace.mlpActs) {
      const s = r.mlpActs.get(key);
      expect(s, key).toBeDefined();
      expect(s!.tokens, `${key} token count`).toBe(xs.length);
      const want = new Float64Array(xs[0].length);
      for (const x of xs) for (let i = 0; i < x.length; i++) want[i] += Math.abs(x[i]);
      expectStatsClose(s!.absSum, want);
    }

    if (engine.spec.moe) {
      expect(trace.routerLogits.size).toBeGreaterThan(0);
      for (const [key, xs] of trace.routerLogits) {
        const got = r.routerLogits.get(key)!;
        // Sequences run grouped by length (8, 8, then 5), as r.batches says.
        expect(r.batches).toEqual([
          { sequences: [0, 1], length: 8 },
          { sequences: [2], length: 5 },
        ]);
        const flat = Float32Array.from(got.logits.flatMap((b) => [...b]));
        const want = xs.flatMap((x) => [...x]);
        expectStatsClose(flat, want);
      }
    } else expect(r.routerLogits.size).toBe(0);
  });
});
