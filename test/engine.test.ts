/**
 * The onnxruntime engine against independent references: stories260K's greedy ids (reference.json)
 * and a float64 implementation written for the tests (test/reference/llama64.ts).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { Engine } from '../src/exec/engine/index.js';
import { buildModel } from '../src/core/ir/build.js';
import type { Op } from '../src/core/ir/ir.js';
import { buildOnnxModel } from '../src/exec/onnx/lower.js';
import { onnx } from '../src/exec/onnx/proto.js';
import { argmax64, Llama64, newTrace } from './reference/llama64.js';
import { maxRelError, relErr } from './numeric.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
const reference = JSON.parse(readFileSync(path.join(STORIES, 'reference.json'), 'utf8')) as { prompt_ids: number[]; greedy_ids: number[] };

describe('stories260K on onnxruntime', () => {
  let ck: Checkpoint;
  let engine: Engine;
  let ref: Llama64;
  beforeAll(async () => {
    ck = await openCheckpoint(STORIES);
    engine = await Engine.open(ck, { threads: 1 });
    ref = await Llama64.load(ck);
  });
  afterAll(async () => {
    await engine.close();
    await ck.close();
  });

  test('greedy generation from the reference prompt reproduces greedy_ids exactly (float32)', async () => {
    const ids = await engine.generate(reference.prompt_ids, { maxTokens: reference.greedy_ids.length });
    expect(ids).toEqual(reference.greedy_ids);
  });

  test('the float64 reference itself reproduces greedy_ids (the reference is trustworthy)', () => {
    const seq = [...reference.prompt_ids];
    for (let i = 0; i < 8; i++) seq.push(argmax64(ref.forward(seq).at(-1)!));
    expect(seq.slice(reference.prompt_ids.length)).toEqual(reference.greedy_ids.slice(0, 8));
  });

  test('logits at every position match the float64 reference (relative error < 1e-5)', async () => {
    const seq = [...reference.prompt_ids, ...reference.greedy_ids.slice(0, 23)];
    const got = await engine.logits(seq);
    const want = ref.forward(seq);
    expect(got.length).toBe(seq.length * ck.spec.vocabSize);
    const err = maxRelError(got, want);
    expect(err).toBeLessThan(1e-5);
  });

  test('KV-cache prefill + decode equals full recompute', async () => {
    const seq = [1, 400, 20, 301, 77, 5, 260, 99, 412, 3, 45, 200];
    const V = ck.spec.vocabSize;
    const full = await engine.logits(seq);
    const s = engine.session();
    const steps: Float32Array[] = [await s.prefill(seq.slice(0, 5))];
    for (const id of seq.slice(5)) steps.push(await s.decode(id));
    expect(s.length).toBe(seq.length);
    steps.forEach((row, i) => {
      const t = 4 + i;
      const want = full.subarray(t * V, (t + 1) * V);
      expect(relErr(row, want)).toBeLessThan(1e-5);
    });
  });

  test('perplexity equals exp(mean NLL) from the float64 reference', async () => {
    const seqs = [
      [1, 461, 461, 401, 401, 401],
      [1, 30, 40, 50],
    ];
    let nll = 0;
    let n = 0;
    for (const s of seqs) {
      const logits = ref.forward(s);
      for (let t = 0; t + 1 < s.length; t++) {
        const row = logits[t];
        const mx = Math.max(...row);
        const lse = mx + Math.log(row.reduce((a, v) => a + Math.exp(v - mx), 0));
        nll += lse - row[s[t + 1]];
        n++;
      }
    }
    const got = await engine.perplexity(seqs);
    expect(Math.abs(got - Math.exp(nll / n)) / Math.exp(nll / n)).toBeLessThan(1e-5);
  });

  test('a batch of rows advances like each row alone', async () => {
    const rows = [
      [1, 461, 401],
      [1, 30, 40],
    ];
    const s = engine.session(2);
    const [a, b] = await s.step(rows);
    const V = ck.spec.vocabSize;
    const la = (await engine.logits(rows[0])).subarray(2 * V);
    const lb = (await engine.logits(rows[1])).subarray(2 * V);
    for (let i = 0; i < V; i += 37) {
      expect(a[i]).toBeCloseTo(la[i], 4);
      expect(b[i]).toBeCloseTo(lb[i], 4);
    }
  });

  test('alternating tap sets (one tap session cached at a time) give the same statistics', async () => {
    const seqs = [[1, 461, 461, 401]];
    const a = await engine.tap(seqs, { kind: 'head-output' });
    const b = await engine.tap(seqs, { kind: 'mlp-act', layers: [0] });
    const a2 = await engine.tap(seqs, { kind: 'head-output' });
    expect([...b.mlpActs.keys()]).toEqual(['model.layers.0.mlp']);
    expect(a2.headOutputs.get('model.layers.3.self_attn')!.sumSq).toEqual(a.headOutputs.get('model.layers.3.self_attn')!.sumSq);
    // And generation still runs on the plain session.
    expect(await engine.generate([1], { maxTokens: 3 })).toEqual(reference.greedy_ids.slice(0, 3));
  });

  test('token ids outside the vocabulary are rejected with a usage error', async () => {
    await expect(engine.logits([1, 512])).rejects.toThrow(/outside the vocabulary/);
  });
});

describe('the IR and its ONNX lowering', () => {
  const OPS = ['embed', 'rmsnorm', 'linear', 'rope', 'attention', 'silu', 'sigmoid', 'mul', 'add', 'router', 'column', 'gatherPositions'];

  test('the IR is topologically ordered over the documented op vocabulary, each value written once', async () => {
    const ck = await openCheckpoint(STORIES);
    const g = buildModel(ck.spec);
    await ck.close();
    const defined = new Set(g.inputs.map((i) => i.name));
    const outs = (op: Op) => (op.op === 'attention' ? [op.out, op.presentK, op.presentV] : op.op === 'router' ? [op.weights, op.mask] : [op.out]);
    const ins = (op: Op): string[] =>
      Object.entries(op)
        .filter(([k]) => ['x', 'a', 'b', 'q', 'k', 'v', 'ids', 'cos', 'sin', 'pastK', 'pastV', 'logits', 'positions'].includes(k))
        .map(([, v]) => v as string);
    for (const op of g.ops) {
      expect(OPS).toContain(op.op);
      for (const i of ins(op)) expect(defined.has(i), `${op.op} reads ${i} before it is written`).toBe(true);
      for (const o of outs(op)) {
        expect(defined.has(o), `${o} written twice`).toBe(false);
        defined.add(o);
      }
    }
    for (const o of g.outputs) expect(defined.has(o)).toBe(true);
    for (const t of g.taps) expect(defined.has(t.value)).toBe(true);
  });

  test('buildOnnxModel: deterministic bytes, opset 17 standard-domain ops, one float initializer per weight', async () => {
    const ck = await openCheckpoint(STORIES);
    const a = await buildOnnxModel(ck);
    const b = await buildOnnxModel(ck);
    await ck.close();
    expect(Buffer.compare(Buffer.from(a), Buffer.from(b))).toBe(0);
    const m = onnx.ModelProto.decode(a);
    expect(m.opsetImport.map((o) => [o.domain, Number(o.version)])).toEqual([['', 17]]);
    for (const n of m.graph!.node!) expect(n.domain ?? '').toBe('');
    const weights = m.graph!.initializer!.filter((t) => /^(model\.|lm_head)/.test(t.name!));
    // stories260K: embed (tied) + final norm + 5 layers × (2 norms + 7 linears).
    expect(weights.length).toBe(2 + 5 * 9);
    // A transposed linear holds W[out, in] as [in, out]: check one value against the checkpoint.
    const ck2 = await openCheckpoint(STORIES);
    const w = await ck2.readF32('model.layers.0.self_attn.q_proj.weight');
    await ck2.close();
    const t = weights.find((x) => x.name === 'model.layers.0.self_attn.q_proj.weight^T')!;
    expect(t.dims!.map(Number)).toEqual([64, 64]);
    const raw = new Float32Array(Uint8Array.from(t.rawData!).buffer);
    expect(raw[3 * 64 + 5]).toBe(w[5 * 64 + 3]);
  });

  test('a full linear-input tap returns the activations themselves (float64 reference values)', async () => {
    const ck = await openCheckpoint(STORIES);
    const engine = await Engine.open(ck, { threads: 1 });
    const ref = await Llama64.load(ck);
    const seq = [1, 461, 461, 401, 77];
    const trace = newTrace();
    ref.forward(seq, trace);
    const r = await engine.tap([seq], { kind: 'linear-input', layers: [2], full: true });
    await engine.close();
    await ck.close();
    expect([...r.linearInputs.keys()].every((k) => k.startsWith('model.layers.2.'))).toBe(true);
    const key = 'model.layers.2.mlp.down_proj.weight';
    const full = r.linearInputs.get(key)!.full!;
    expect(full).toHaveLength(1);
    const want = trace.linearInputs.get(key)!;
    const C = want[0].length;
    let err = 0;
    let scale = 0;
    want.forEach((x, t) => x.forEach((v, i) => ((err = Math.max(err, Math.abs(full[0][t * C + i] - v))), (scale = Math.max(scale, Math.abs(v))))));
    expect(err / scale).toBeLessThan(1e-5);
  });
});
