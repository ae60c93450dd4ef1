/**
 * The budgeted blockwise recovery (passes/reorder/budget.ts), the default where LoRA cannot run:
 * the steps per block and level follow the documented rule, with each block's multiply-adds counted
 * independently from the sliced checkpoint's linear weights; with streaming forced (as above 200M
 * parameters) an unset reorder.recover runs it, the narrowed level gets adapters, and the full
 * model's weights ship byte for byte as an unrecovered run's.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import type { LevelLayer } from '../src/core/records/elastic.js';
import { sliceSource } from '../src/core/pipeline/elastic.js';
import { useStreamSettings } from '../src/exec/stream/spill.js';
import { generateFixture } from '../fixtures/generate.js';
import { budgetPlan, BUDGET_DEFAULTS } from '../passes/reorder/budget.js';
import { parseReorderOptions } from '../passes/reorder/options.js';
import { analyzeReorder } from '../passes/reorder/analyze.js';
import { findTarget } from '../src/app/compile/plan.js';

let tmp: string;
let src: Checkpoint;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-recover-budget-'));
  await generateFixture(path.join(tmp, 'm'), { arch: 'llama', seed: 7 });
  src = await openCheckpoint(path.join(tmp, 'm'));
});
afterAll(async () => {
  useStreamSettings({ aboveBytes: undefined });
  await src?.close();
  if (tmp) await fsp.rm(tmp, { recursive: true, force: true });
});

const level = (frac: number): LevelLayer[] => {
  const s = src.spec;
  const g = s.numHeads / s.numKvHeads;
  const kv = Math.max(1, Math.round(s.numKvHeads * frac));
  return Array.from({ length: s.numLayers }, (_, layer) => ({ layer, anchor: false, kvGroups: kv, qHeadsPerGroup: g, ffn: Math.round(s.intermediateSize * frac), heads: kv * g, params: 0 }));
};

/** Multiply-adds per token of every decoder block's linears: the elements of its *_proj weights in the sliced checkpoint. */
const linearMacs = (layers: LevelLayer[]) =>
  sliceSource(src, layers, 'x')
    .tensors.filter((t) => /^model\.layers\.\d+\.(self_attn|mlp)\.\w+_proj\.weight$/.test(t.name))
    .reduce((n, t) => n + t.shape.reduce((a, b) => a * b, 1), 0);

describe('recovery under a compute budget', () => {
  it('picks the steps per block and level by the documented rule (clamped to 1..64)', () => {
    const levels = [level(0.25), level(0.5)];
    const F = linearMacs(level(1));
    const P = linearMacs(levels[0]) + linearMacs(levels[1]);
    const T = 16;
    const data = 17; // 2 of them validation rows
    const batch = 2;
    const fixed = T * (data * (F + P) + 9 * 2 * P);
    const step = 3 * batch * T * P;
    const params = 1e6;
    for (const macsPerParam of [1, 500, 2000, 1e6]) {
      const want = Math.min(64, Math.max(1, Math.floor((macsPerParam * params - fixed) / step)));
      const plan = budgetPlan(src.spec, { params, macsPerParam, levels, tokens: T, data, batch });
      expect(plan.steps).toBe(want);
      expect(plan.fixed).toBe(fixed);
      expect(plan.perStep).toBe(step);
    }
    // The top-k lens: k rows of the head for the target and the output per level and block, and each block's teacher states through the whole head.
    const k = 4;
    const D = src.spec.hiddenSize;
    const H = 2 * src.spec.numLayers * 2 * k * D;
    const lensPlan = budgetPlan(src.spec, { params, macsPerParam: 2000, levels, tokens: T, data, batch, lensRows: k });
    expect(lensPlan.fixed).toBe(T * (data * (F + P) + (data - 2) * src.spec.numLayers * src.spec.vocabSize * D + 9 * 2 * (P + H)));
    expect(lensPlan.perStep).toBe(3 * batch * T * (P + H));
    expect(budgetPlan(src.spec, { params, macsPerParam: 1, levels, tokens: T, data, batch }).steps).toBe(1);
    expect(budgetPlan(src.spec, { params, macsPerParam: 1e6, levels, tokens: T, data, batch }).steps).toBe(64);
  });

  it('reorder.recoverBudget: the default of an unset recover where LoRA cannot run; explicit with blockwise; refused with lora', () => {
    expect(parseReorderOptions({}).recover!.large).toMatchObject({ method: 'blockwise', loss: 'norm', endToEnd: 0, budget: BUDGET_DEFAULTS.macsPerParam, data: BUDGET_DEFAULTS.data, batch: BUDGET_DEFAULTS.batch });
    expect(parseReorderOptions({ recoverBudget: '2000' }).recover!.large!.budget).toBe(2000);
    expect(parseReorderOptions({ recover: 'blockwise', recoverBudget: '3e4' }).recover!.budget).toBe(30000);
    expect(parseReorderOptions({ recover: 'blockwise' }).recover!.budget).toBeUndefined();
    expect(() => parseReorderOptions({ recover: 'lora', recoverBudget: '2000' })).toThrow(/recoverBudget applies to reorder.recover=blockwise only/);
    expect(() => parseReorderOptions({ recover: 'blockwise', recoverBudget: 'lots' })).toThrow(/recoverBudget must be a number/);
  });

  it('runs where the model streams (recover unset), adapters on the narrowed level only, the full weights byte for byte', async () => {
    const ctx = { note: () => {}, cacheDir: path.join(tmp, 'cache'), target: findTarget('ts') };
    const base = { levels: '0.5,1', importance: 'activation', calib: '4', calibLength: '16', heldOut: '2', evaluate: 'false' };
    const none = await analyzeReorder(src, parseReorderOptions({ ...base, recover: 'none' }), ctx);
    useStreamSettings({ aboveBytes: 0 });
    const r = await analyzeReorder(src, parseReorderOptions({ ...base, recoverBudget: '40000' }), ctx);
    useStreamSettings({ aboveBytes: undefined });
    const rec = r.metadata.recovery!;
    expect(rec.method).toBe('lora');
    if (rec.method !== 'lora') return;
    expect(rec.blockwise).toMatchObject({ loss: 'norm', endToEnd: 0, budget: { macsPerParam: 40000 } });
    const narrowed = r.metadata.levels.filter((l) => l.paramFrac < 1);
    const plan = budgetPlan(src.spec, { params: r.metadata.levels.find((l) => l.paramFrac === 1)!.params, macsPerParam: 40000, levels: narrowed.map((l) => l.layers), tokens: 16, data: rec.data.count, batch: rec.batch });
    expect(rec.steps).toBe(plan.steps);
    expect(rec.blockwise!.budget!.macs).toBe(plan.budget);
    const fullId = r.metadata.levels.find((l) => l.paramFrac === 1)!.id;
    expect(r.adapters.size).toBeGreaterThan(0);
    for (const [, ann] of r.adapters) expect(ann.adapters?.[fullId]).toBeUndefined();
    for (const lv of r.metadata.levels) expect(lv.heldOutPpl).toBeUndefined();
    expect(r.source.tensors.map((t) => t.name)).toEqual(none.source.tensors.map((t) => t.name));
    for (const t of none.source.tensors) expect(Buffer.from((await r.source.readF32(t.name)).buffer).equals(Buffer.from((await none.source.readF32(t.name)).buffer))).toBe(true);
  });
});
