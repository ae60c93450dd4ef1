/**
 * Pass expert-bits end to end: profiling (mixtral, qwen2_moe with its shared expert, a dead expert
 * force-routed), the plan against its own recorded table (re-solved exactly), planted sensitive
 * experts getting more bits on real up-cycled weights, the ts artifact holding each expert in its
 * own format and running it (logits against onnxruntime on the same quantized weights), determinism,
 * and bad input (one line, nothing written).
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { upcycleToMixtral, type UpcycleTruth } from '../fixtures/upcycle.js';
import { openCheckpoint, transformSource, type ModelSource } from '../src/core/checkpoint/index.js';
import { compile } from '../src/app/compile/compile.js';
import { silentProgress } from '../src/core/util/progress.js';
import { EXPERT_TABLE, findRecord, type ExpertTable } from '../src/core/records/index.js';
import { ts } from '../backends/ts/index.js';
import { analyzeExpertBits } from '../passes/expert-bits/run.js';
import { parseExpertBitsOptions } from '../passes/expert-bits/options.js';
import { solveBudget } from '../passes/expert-bits/mckp.js';
import { Lab } from '../passes/expert-bits/measure.js';
import { loadDir } from '../src/exec/runtime/node.js';
import type { QuantType } from '../src/core/quant/types.js';
import { llmcInProcess } from './cli.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
let mixtral: string;
let qwen: string;
let stories: string;
let storiesTruth: UpcycleTruth;
const sources: { close(): Promise<void> }[] = [];
const open = async (dir: string) => {
  const s = await openCheckpoint(dir);
  sources.push(s);
  return s;
};
const quick = { calib: '4', calibLength: '32', heldOut: '4' };
const analyze = (source: ModelSource, raw: Record<string, string>) =>
  analyzeExpertBits(source, parseExpertBitsOptions({ ...quick, ...raw }), { target: ts, note: () => {}, cacheDir: path.join(tmp, 'cache') });

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-expert-bits-'));
  mixtral = (await generateFixture(path.join(tmp, 'mixtral'), { arch: 'mixtral', tokenizer: 'none' })).dir;
  qwen = (await generateFixture(path.join(tmp, 'qwen'), { arch: 'qwen2_moe', tokenizer: 'none' })).dir;
  const up = await upcycleToMixtral(STORIES, path.join(tmp, 'stories-moe'), { experts: 4, sensitive: 1 });
  stories = up.dir;
  storiesTruth = up.truth;
});
afterAll(async () => {
  for (const s of sources) await s.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

const finiteTable = (r: ExpertTable) => {
  for (const it of r.items) for (const c of it.choices) for (const v of [c.kl, c.recon, c.loss]) expect(Number.isFinite(v) && v >= 0).toBe(true);
};

describe('profiling', () => {
  it('mixtral: counts and gates for every expert, finite sensitivities, traces in the predictor; the plan is optimal for its own table', async () => {
    const src = await open(mixtral);
    const { record } = await analyze(src, { budgetBpw: '6' });
    const E = src.spec.moe!.numExperts;
    expect(record.experts).toHaveLength(src.spec.numLayers * E);
    const N = 4 * 32;
    for (let l = 0; l < src.spec.numLayers; l++) {
      const layer = record.experts.filter((e) => e.layer === l);
      // top-k routing: every token counted k times per layer.
      expect(layer.reduce((s, e) => s + e.tokens, 0)).toBe(N * src.spec.moe!.topK);
      for (const e of layer) if (e.tokens) expect(e.meanGate).toBeGreaterThan(0), expect(e.meanGate).toBeLessThanOrEqual(1);
    }
    finiteTable(record);
    expect(record.predictor.layers.map((l) => l.marginal.reduce((a, b) => a + b, 0))).toEqual(record.predictor.layers.map(() => N * 2));
    // Re-solve the recorded table exactly: same optimum.
    const items = record.items.map((it) => ({ choices: it.choices.map((c) => ({ weight: c.bytes, loss: c.loss })) }));
    const again = solveBudget(items, record.budget.bytes!, { method: 'dp' })!;
    expect(record.plan.bytes).toBeLessThanOrEqual(record.budget.bytes!);
    expect(record.plan.proxyLoss).toBeCloseTo(again.loss, 12);
    // Both sources agree on the ranking, broadly.
    expect(record.sensitivity.rankCorrelation).toBeGreaterThan(0.5);
  });

  it('qwen2_moe: the shared expert is profiled (every token, sigmoid gate) and planned', async () => {
    const src = await open(qwen);
    const { record } = await analyze(src, { budgetBpw: '6' });
    const shared = record.experts.filter((e) => e.expert === -1);
    expect(shared).toHaveLength(src.spec.numLayers);
    for (const s of shared) {
      expect(s.tokens).toBe(4 * 32);
      expect(s.meanGate).toBeGreaterThan(0);
      expect(s.meanGate).toBeLessThan(1);
    }
    expect(record.items.map((i) => i.key)).toContain('0.shared');
    finiteTable(record);
  });

  it('an expert no calibration token reaches is force-routed: finite, non-zero sensitivities, flagged', async () => {
    const base = await open(mixtral);
    const truth = JSON.parse(await fsp.readFile(path.join(mixtral, 'fixture-truth.json'), 'utf8'));
    // Expert 1 of layer 1: its router row reads the massive channels (a constant input, sign from the
    // embedding) with a large negative weight: a constant logit of about −60, never selected.
    const router = 'model.layers.1.block_sparse_moe.gate.weight';
    const D = base.spec.hiddenSize;
    const embed = await base.readF32('model.embed_tokens.weight');
    const dead = transformSource(base, {
      label: 'dead-expert',
      paramsHash: 'dead-1.1',
      untouched: (n) => n !== router,
      rewrite: (name, w) => {
        if (name !== router) return w;
        const out = w.slice();
        for (const c of truth.massiveChannels as number[]) out[1 * D + c] = -5 * Math.sign(embed[c]);
        return out;
      },
    });
    const { record } = await analyze(dead, { budgetBpw: '6', minTokens: '4' });
    const e = record.experts.find((x) => x.layer === 1 && x.expert === 1)!;
    expect(e.tokens).toBeLessThan(4);
    expect(e.forced).toBe(true);
    const it = record.items.find((i) => i.key === '1.1')!;
    for (const c of it.choices.filter((c) => c.format !== 'F16')) {
      expect(c.kl).toBeGreaterThan(0);
      expect(c.recon).toBeGreaterThan(0);
    }
    finiteTable(record);
    expect(record.notes.join(' ')).toMatch(/force-routed: .*1\.1/);
  });
});

describe('granularities and strategies', () => {
  it('expert-proj: one item per projection, each choice measured; edgemoe: a verified plan within its oracle budget', async () => {
    const src = await open(mixtral);
    const { record } = await analyze(src, { budgetBpw: '6', granularity: 'expert-proj' });
    expect(record.granularity).toBe('expert-proj');
    expect(record.items).toHaveLength(3 * src.spec.numLayers * src.spec.moe!.numExperts);
    finiteTable(record);
    const items = record.items.map((it) => ({ choices: it.choices.map((c) => ({ weight: c.bytes, loss: c.loss })) }));
    expect(record.plan.proxyLoss).toBeCloseTo(solveBudget(items, record.budget.bytes!, { method: 'dp' })!.loss, 12);

    const e = (await analyze(src, { strategy: 'edgemoe', maxLoss: '0.05' })).record;
    const N = e.items.length;
    expect(e.edgemoe).not.toBeNull();
    expect(e.plan.heldOutLoss).toBeLessThanOrEqual(0.05);
    expect(e.edgemoe!.oracleCalls).toBeLessThanOrEqual(1 + e.candidates.length + N + Math.ceil(Math.log2(N + 1)));
    // K items at b_lo, the rest at b_hi.
    const at = (f: string) => e.items.filter((it) => it.choices[it.chosen].format === f || it.choices[it.chosen].written.join() === it.choices.find((c) => c.format === f)?.written.join()).length;
    if (e.edgemoe!.bLo !== e.edgemoe!.bHi) expect(at(e.edgemoe!.bLo)).toBeGreaterThanOrEqual(e.edgemoe!.K);
  });
});

describe('real weights (stories260K up-cycled)', () => {
  it('planted sensitive experts get more bits; the plan beats the uniform format of the same bytes on held-out data', async () => {
    const src = await open(stories);
    const { record } = await analyze(src, { budgetBpw: '5', formats: 'Q2_K,Q4_0,Q4_K,Q8_0' });
    const sensitive = (key: string) => {
      const [l, e] = key.split('.').map(Number);
      return storiesTruth.layers[l].sensitive.includes(e);
    };
    const bytesOf = (pred: (k: string) => boolean) => {
      const its = record.items.filter((i) => pred(i.key));
      return its.reduce((s, i) => s + i.choices[i.chosen].bytes, 0) / its.length;
    };
    expect(bytesOf(sensitive)).toBeGreaterThan(1.3 * bytesOf((k) => !sensitive(k)));
    // The uniform candidate with the most bytes within the budget loses more on held-out data.
    const within = record.uniform.filter((u) => u.bytes <= record.plan.bytes).sort((a, b) => b.bytes - a.bytes)[0];
    expect(record.plan.heldOutLoss).toBeLessThan(within.heldOutLoss);
    // Real weights: K-quants on 256-wide down rows, Q4_0/Q5_0 fallbacks on 64-wide gate/up rows.
    const q2 = record.items[0].choices.find((c) => c.format === 'Q2_K')!;
    expect(q2.written).toEqual(['Q4_0', 'Q4_0', 'Q2_K']);
  });
});

describe('ts target', () => {
  it('writes each expert in its planned format; the runtime runs it (logits = onnxruntime on the same quantized weights); deterministic', async () => {
    const src = await open(mixtral);
    const run = (out: string) =>
      compile({ source: src, target: 'ts', outDir: out, passes: [{ name: 'expert-bits', options: { ...quick, budgetBpw: '5.5' } }], quant: 'F32', progress: silentProgress, note: () => {}, cacheDir: path.join(tmp, 'cache') });
    const a = await run(path.join(tmp, 'ts-a'));
    const record = findRecord(a.passes, EXPERT_TABLE)!;
    const planned = new Map<string, string>();
    for (const it of record.items) it.tensors.forEach((t, k) => planned.set(t, it.choices[it.chosen].written[k]));
    const table = (a.targetInfo as { tensors: { name: string; format: string }[] }).tensors;
    for (const [t, f] of planned) expect(table.find((x) => x.name === t)!.format).toBe(f);
    expect(new Set(planned.values()).size).toBeGreaterThan(1);
    // Same logits as the onnxruntime engine fed the same quantize → dequantize values: the JS kernels (f32
    // activations); the wasm kernels quantize activations as llama.cpp does (test/runtime-qdot.test.ts).
    const model = await loadDir(path.join(tmp, 'ts-a'), { wasm: false });
    const ids = [1, 17, 300, 42, 7, 99, 250, 3];
    const got = model.forward(ids);
    const lab = await Lab.open(src, [...planned.keys()]);
    try {
      const want = await lab.logits([ids], await lab.swap([...planned] as [string, QuantType][]));
      let num = 0;
      let den = 0;
      for (let i = 0; i < want.length; i++) {
        num += (got[i] - want[i]) ** 2;
        den += want[i] ** 2;
      }
      expect(Math.sqrt(num / den)).toBeLessThan(1e-4);
    } finally {
      await lab.close();
    }
    const b = await run(path.join(tmp, 'ts-b'));
    expect(b.files).toEqual(a.files);
    expect(await fsp.readFile(path.join(tmp, 'ts-b', 'llmc-manifest.json'), 'utf8')).toBe(await fsp.readFile(path.join(tmp, 'ts-a', 'llmc-manifest.json'), 'utf8'));
  });
});

describe('bad input: one line, nothing written', () => {
  const compileCli = (model: string, out: string, ...opts: string[]) => llmcInProcess('compile', model, '--target', 'ts', '--passes', 'expert-bits', ...opts.flatMap((o) => ['--opt', `expert-bits.${o}`]), '--cache-dir', path.join(tmp, 'cache'), '-o', out);
  const oneLine = (stderr: string) => stderr.split('\n').filter(Boolean);

  it('a dense model names the architectures it takes (exit 2)', async () => {
    const out = path.join(tmp, 'bad-dense');
    const r = await compileCli(STORIES, out, 'budgetBpw=4');
    expect(r.code).toBe(2);
    expect(oneLine(r.stderr)).toHaveLength(1);
    expect(r.stderr).toMatch(/expert-bits takes mixture-of-experts models \(mixtral, qwen2_moe, qwen3_moe, olmoe\); this is a dense llama model/);
    expect(existsSync(out)).toBe(false);
  });

  it('a budget below the smallest plan (exit 2, before any measurement)', async () => {
    const out = path.join(tmp, 'bad-budget');
    const t0 = performance.now();
    const r = await compileCli(mixtral, out, 'budgetBytes=1000');
    expect(r.code).toBe(2);
    expect(oneLine(r.stderr)).toHaveLength(1);
    expect(r.stderr).toMatch(/budgetBytes=1000 is below the smallest plan: \d+ bytes/);
    expect(existsSync(out)).toBe(false);
    expect(performance.now() - t0).toBeLessThan(5000);
  });

  it('a maxLoss no plan meets says the closest achievable (exit 1)', async () => {
    const out = path.join(tmp, 'bad-loss');
    const r = await compileCli(mixtral, out, 'maxLoss=1e-9', 'formats=Q4_0,Q8_0', 'calib=4', 'calibLength=32', 'heldOut=4');
    expect(r.code).toBe(1);
    expect(oneLine(r.stderr)).toHaveLength(1);
    expect(r.stderr).toMatch(/no plan meets maxLoss=1e-9: the closest achievable loses [\d.e-]+ on held-out data/);
    expect(existsSync(out)).toBe(false);
  });

  it('option combinations are refused before the checkpoint is opened (exit 2)', async () => {
    for (const [opts, msg] of [
      [['strategy=edgemoe', 'budgetBpw=4'], /edgemoe takes maxLoss only/],
      [['formats=Q4_0'], /at least two different formats/],
      [['budgetBpw=4', 'granularity=row'], /granularity must be one of expert, expert-proj, layer-proj/],
      [[], /needs a budget/],
    ] as const) {
      const r = await compileCli('/nonexistent', path.join(tmp, 'bad-opts'), ...opts);
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(msg);
    }
    const r = await llmcInProcess('compile', mixtral, '--target', 'hf', '--passes', 'expert-bits', '--opt', 'expert-bits.budgetBpw=4', '-o', path.join(tmp, 'bad-hf'));
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--target hf cannot write a format per tensor/);
  });
});
