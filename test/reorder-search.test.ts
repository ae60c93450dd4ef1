/**
 * reorder.widths=search (passes/reorder/search.ts): per-layer widths under a budget per level.
 * - the descent on a hand-made sensitivity table: nesting, each level within its budget (params and
 *   memory), the least sensitive layer cut first;
 * - on stories260K: searched levels are nested, within budget, non-uniform; a per-layer level with
 *   fewer query heads in several KV groups, run as the physically narrower model (the ONNX level graph
 *   over the sliced weights; the decoder graph cuda writes, as a file; tfjs over the slice, what
 *   recovery trains) and on the
 *   TS runtime, equals the full model with the dropped units' o_proj / down_proj columns zeroed by
 *   the test itself (the level-equivalence approach of runtime-elastic);
 * - hf (one width for all layers) refuses widths=search in one line; gguf-levels takes it (deci);
 * - importance=fisher: one batch's score is the squared mask derivative, checked by finite differences;
 *   iterative importance keeps the largest level's units and every order a nested permutation.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compile } from '../src/app/compile/compile.js';
import { findTarget } from '../src/app/compile/plan.js';
import { layerNames } from '../src/core/arch/names.js';
import { mlpsOf } from '../src/core/arch/units.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { transformSource, type ModelSource } from '../src/core/checkpoint/source.js';
import { UsageError } from '../src/core/errors.js';
import { buildModel } from '../src/core/ir/build.js';
import { levelGraph } from '../src/core/ir/level.js';
import { sliceSource } from '../src/core/pipeline/elastic.js';
import type { Level, LevelWidth } from '../src/core/records/elastic.js';
import { silentProgress } from '../src/core/util/progress.js';
import { TfModel } from '../src/exec/autodiff/lower.js';
import { Engine } from '../src/exec/engine/index.js';
import { OnnxDecoder } from '../src/exec/engine/decoder-dir.js';
import { lowerDecoder } from '../src/exec/onnx/decoder.js';
import { writeOnnx } from '../src/exec/onnx/external.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { analyzeReorder } from '../passes/reorder/analyze.js';
import { fisherScores, resortWithin } from '../passes/reorder/importance.js';
import { reorder } from '../passes/reorder/index.js';
import { parseReorderOptions } from '../passes/reorder/options.js';
import { permuteSource, randomOrders } from '../passes/reorder/permute.js';
import { describeLevel, fullWidth } from '../passes/reorder/planner.js';
import { axisChoices, budgetOf, chooseNested, nestedIn, searchLevels, searchLevelsRefined, type Budget, type Sensitivity } from '../passes/reorder/search.js';
import { relErr } from './numeric.js';

const MODEL = path.resolve(__dirname, '../fixtures/models/stories260K');
let ckpt: Checkpoint;
let tmp: string;
beforeAll(async () => {
  ckpt = await openCheckpoint(MODEL);
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-reorder-search-'));
});
afterAll(async () => {
  await ckpt?.close();
  if (tmp) await fsp.rm(tmp, { recursive: true, force: true });
});

/** Per-layer widths of a level: each axis ≤ the next larger level's. */
function expectNested(levels: Level[]) {
  for (let i = 1; i < levels.length; i++) {
    levels[i].layers.forEach((L, l) => {
      const s = levels[i - 1].layers[l];
      expect(s.kvGroups).toBeLessThanOrEqual(L.kvGroups);
      expect(s.qHeadsPerGroup).toBeLessThanOrEqual(L.qHeadsPerGroup);
      expect(s.ffn).toBeLessThanOrEqual(L.ffn);
    });
  }
}

describe('search: the greedy descent on a sensitivity table', () => {
  // Layer l's loss rises by (l + 1)·(1 − kept share) per axis: layer 1 is the least sensitive.
  const table = (spec: Checkpoint['spec'], anchors: Set<number>, block: number): Sensitivity => {
    const c = axisChoices(spec, block);
    const full = fullWidth(spec);
    const layers = new Map<number, Sensitivity['layers'] extends Map<number, infer V> ? V : never>();
    for (let l = 0; l < spec.numLayers; l++) {
      if (anchors.has(l)) continue;
      const axis = (k: 'kvGroups' | 'qHeadsPerGroup' | 'ffn') => ({ widths: c[k], loss: c[k].map((v) => 2 + (l + 1) * (1 - v / full[k])) });
      layers.set(l, { kvGroups: axis('kvGroups'), qHeadsPerGroup: axis('qHeadsPerGroup'), ffn: axis('ffn') });
    }
    return { base: 2, layers };
  };

  it('levels are nested, within their budget, the least sensitive layer cut most; memory and latency budgets too', () => {
    const spec = ckpt.spec;
    const anchors = new Set([0]);
    const full = describeLevel(spec, 'full', 1, Array.from({ length: spec.numLayers }, () => fullWidth(spec)), anchors);
    for (const budget of [{ kind: 'params', sizeBy: 'total' }, { kind: 'params', sizeBy: 'blocks' }, { kind: 'memory', context: 2048, bytesPerParam: 2 }, { kind: 'latency', cost: { perCall: 2e-6, perMac: 1e-9, context: 512, host: 'test' } }] as Budget[]) {
      for (const block of [1, 16]) {
        const targets = [0.5, 0.6, 0.75, 0.9, 1];
        const { levels } = searchLevels(spec, { targets, anchors, block, budget, sensitivity: table(spec, anchors, block) });
        expect(levels.map((l) => l.nominal)).toEqual(targets);
        expectNested(levels);
        levels.forEach((lv) => expect(budgetOf(spec, budget, lv, full)).toBeLessThanOrEqual(lv.nominal + 1e-9));
        expect(levels.at(-1)!.paramFrac).toBe(1);
        const half = levels[0].layers;
        // Anchors stay full; the least sensitive layer (1) keeps no more than the most sensitive (4).
        expect(half[0]).toMatchObject({ ...fullWidth(spec), anchor: true });
        expect(half[1].params).toBeLessThan(half[4].params);
        const c = axisChoices(spec, block);
        for (const L of half) {
          expect(c.ffn).toContain(L.ffn);
          expect(c.kvGroups).toContain(L.kvGroups);
          expect(c.qHeadsPerGroup).toContain(L.qHeadsPerGroup);
        }
      }
    }
  });

  it('refined: re-measured at each level reached (its widths), the same table gives the same levels; another table changes what follows', async () => {
    const spec = ckpt.spec;
    const anchors = new Set([0]);
    const t = table(spec, anchors, 1);
    const o = { targets: [0.5, 0.75, 1], anchors, block: 1, budget: { kind: 'params', sizeBy: 'total' } as Budget, sensitivity: t };
    const plain = searchLevels(spec, o);
    const states: string[] = [];
    const same = await searchLevelsRefined(spec, o, async (state) => (states.push(JSON.stringify(state)), t));
    expect(same.levels).toEqual(plain.levels);
    // Called at the 0.75 level's widths (the full model's table is the one given).
    expect(states).toEqual([0.75].map((n) => JSON.stringify(plain.levels.find((l) => l.nominal === n)!.layers.map(({ kvGroups, qHeadsPerGroup, ffn }) => ({ kvGroups, qHeadsPerGroup, ffn })))));
    // A table where layer 4 (the most sensitive) became nearly free to cut: the 0.5 level cuts it more.
    const flipped: Sensitivity = { base: 2, layers: new Map([...t.layers].map(([l, per]) => [l, Object.fromEntries(Object.entries(per).map(([k, a]) => [k, { widths: a!.widths, loss: a!.loss.map((v) => (l === 4 ? 2 + (v - 2) / 100 : v)) }]))])) };
    const other = await searchLevelsRefined(spec, o, async () => flipped);
    expect(other.levels[1]).toEqual(plain.levels[1]);
    expect(other.levels[0].layers[4].params).toBeLessThan(plain.levels[0].layers[4].params);
    expectNested(other.levels);
  });

  it('chooseNested: per level the searched or the uniform widths, nested, of least summed loss', () => {
    const spec = ckpt.spec;
    const anchors = new Set<number>();
    const lv = (w: [number, number][]) => describeLevel(spec, '', 0, w.map(([kvGroups, ffn]) => ({ kvGroups, qHeadsPerGroup: 2, ffn })), anchors);
    const full = lv(Array(5).fill([4, 172]));
    const s50 = lv([[4, 172], [1, 22], [1, 22], [1, 22], [1, 1]]);
    const u50 = lv(Array(5).fill([1, 50]));
    const s75 = lv([[4, 172], [4, 151], [4, 51], [2, 60], [1, 22]]);
    const u75 = lv(Array(5).fill([2, 119]));
    const c = (uLoss50: number, uLoss75: number) => [
      { searched: s50, uniform: u50, loss: { searched: 8, uniform: uLoss50 } },
      { searched: s75, uniform: u75, loss: { searched: 5, uniform: uLoss75 } },
      { searched: full, uniform: null, loss: { searched: 2, uniform: null } },
    ];
    expect(nestedIn(u50, s75)).toBe(false); // layer 4: 50 neurons > 22
    expect(nestedIn(s50, u75)).toBe(false); // layer 0: 4 groups > 2
    expect(chooseNested(c(6, 4))).toEqual(['uniform', 'uniform', 'searched']);
    expect(chooseNested(c(7.5, 9))).toEqual(['searched', 'searched', 'searched']);
    // Uniform 50% alone measures lower (7 < 8) but nests only under uniform 75%, which costs more: all searched.
    expect(chooseNested(c(7, 7))).toEqual(['searched', 'searched', 'searched']);
  });

  it('a target below the smallest sub-model gets the smallest one, with a note', () => {
    const anchors = new Set([0, 1]);
    const r = searchLevels(ckpt.spec, { targets: [0.05, 1], anchors, block: 1, budget: { kind: 'params', sizeBy: 'total' }, sensitivity: table(ckpt.spec, anchors, 1) });
    expect(r.notes.join('\n')).toMatch(/level 0.05: the smallest searched sub-model is/);
    for (const L of r.levels[0].layers.slice(2)) expect(L).toMatchObject({ kvGroups: 1, qHeadsPerGroup: 1, ffn: 1 });
  });
});

describe('search on stories260K', () => {
  let searched: Awaited<ReturnType<typeof analyzeReorder>>;
  beforeAll(async () => {
    searched = await analyzeReorder(ckpt, parseReorderOptions({ levels: '0.5,0.75,1', widths: 'search', searchPoints: '4', calib: '4', quantBlock: '1', evaluate: 'false', recover: 'none' }), {
      note: () => {},
      cacheDir: path.join(tmp, 'cache'),
      target: findTarget('ts'),
    });
  }, 60_000);

  it('levels within the parameter budget, nested, widths differing between non-anchor layers', () => {
    const md = searched.metadata;
    expect(md.widthSearch).toMatchObject({ budget: { kind: 'params', sizeBy: 'total' }, points: 4 });
    const levels = md.levels;
    expect(levels.map((l) => l.nominal)).toEqual([0.5, 0.75, 1]);
    levels.forEach((lv) => expect(lv.params / md.full.params).toBeLessThanOrEqual(lv.nominal + 1e-9));
    expect(md.widthSearch!.fractions).toEqual(levels.map((lv) => lv.paramFrac));
    expectNested(levels);
    // Each level is the searched one or the uniform cut (whichever measured lower and nests); a searched one differs between layers.
    expect(md.widthSearch!.picked).toHaveLength(levels.length);
    levels.forEach((lv, i) => {
      const nonAnchor = lv.layers.filter((L) => !L.anchor).map((L) => JSON.stringify([L.kvGroups, L.qHeadsPerGroup, L.ffn]));
      if (lv.paramFrac < 1) expect(new Set(nonAnchor).size === 1).toBe(md.widthSearch!.picked![i] === 'uniform');
    });
  });

  it('a per-layer level (fewer query heads in several KV groups) = the full model with the dropped units zeroed by hand', async () => {
    const spec = ckpt.spec;
    const src = searched.source;
    const hd = spec.headDim;
    const R = spec.numHeads / spec.numKvHeads;
    // The searched L0, and widths with query heads cut inside 2 and 3 kept groups (gathered, not a prefix).
    const l0 = searched.metadata.levels[0].layers.map(({ kvGroups, qHeadsPerGroup, ffn }) => ({ kvGroups, qHeadsPerGroup, ffn }));
    const strided: LevelWidth[] = l0.map((w, l) => (l === 1 ? { kvGroups: 3, qHeadsPerGroup: 1, ffn: 77 } : l === 3 ? { kvGroups: 2, qHeadsPerGroup: 1, ffn: w.ffn } : w));
    const prompt = [1, 403, 29, 77, 5, 300, 41, 12, 9, 250];
    const ts = path.join(tmp, 'ts-permuted');
    await compile({ source: src, target: 'ts', outDir: ts, passes: [], quant: 'F32', progress: silentProgress, note: () => {} });
    const runtime = await loadDir(ts);
    for (const widths of [l0, strided]) {
      // Reference: zero o_proj columns of dropped heads (head h = group ⌊h/R⌋, slot h mod R) and down_proj columns past ffn.
      const keep = new Map<string, (c: number) => boolean>();
      widths.forEach((w, l) => {
        keep.set(layerNames(l).o, (c) => Math.floor(c / hd / R) < w.kvGroups && Math.floor(c / hd) % R < w.qHeadsPerGroup);
        for (const m of mlpsOf(spec, l)) keep.set(m.down, (c) => c < w.ffn);
      });
      const masked: ModelSource = transformSource(src, {
        label: 'zeroed by hand',
        paramsHash: JSON.stringify(widths),
        rewrite: (name, data) => {
          const k = keep.get(name);
          if (!k) return data;
          const cols = src.meta(name)!.shape[1];
          for (let i = 0; i < data.length; i++) if (!k(i % cols)) data[i] = 0;
          return data;
        },
      });
      const ref = await Engine.open(masked, { threads: 1 });
      const want = await ref.logits(prompt);
      await ref.close();
      // The narrower model: sliced weights under the level graph (onnxruntime), and tfjs over the slice.
      const slice = sliceSource(src, widths, 'level');
      expect(slice.meta(layerNames(1).q)!.shape[0]).toBe(widths[1].kvGroups * widths[1].qHeadsPerGroup * hd);
      const narrow = await Engine.open(slice, { graph: levelGraph(buildModel(spec), widths), threads: 1 });
      expect(relErr(await narrow.logits(prompt), want)).toBeLessThan(1e-5);
      await narrow.close();
      // The decoder graph cuda writes for a level (lowerDecoder over the slice), run as a file.
      const file = path.join(tmp, `level-${widths === l0 ? 'l0' : 'strided'}.onnx`);
      await writeOnnx(file, lowerDecoder(slice, levelGraph(buildModel(spec), widths), { compute: 'fp32', format: () => ({ kind: 'fp32' }) }), null);
      const dec = await OnnxDecoder.open(file);
      expect(relErr(await dec.logits(prompt), want)).toBeLessThan(1e-5);
      await dec.close();
      const tfm = await TfModel.load(slice);
      expect(relErr(await tfm.allLogits(prompt), want)).toBeLessThan(1e-5);
      tfm.dispose();
      // The TS runtime at the widths over the full weights.
      expect(relErr(runtime.forward(prompt, runtime.newCache(), { widths }), want)).toBeLessThan(1e-5);
      // Not vacuous: the full model differs.
      expect(relErr(runtime.forward(prompt), want)).toBeGreaterThan(1e-3);
    }
  }, 60_000);
});

describe('targets', () => {
  it('hf (one width for all layers) refuses widths=search in one line; ts, cuda and gguf-levels (llama.cpp deci) take it', () => {
    const o = parseReorderOptions({ widths: 'search', anchors: '0' });
    for (const t of ['hf']) {
      let err: unknown;
      try {
        reorder.check!(o, findTarget(t), { tensorTypes: [] }, { passes: ['reorder'] });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(UsageError);
      expect((err as Error).message).toMatch(new RegExp(`^--target ${t} takes one width for all layers .*reorder\\.widths=search needs a target with per-layer widths \\(ts, cuda, gguf-levels\\)$`));
      expect((err as Error).message).not.toMatch(/\n/);
    }
    for (const t of ['ts', 'cuda', 'gguf-levels']) expect(() => reorder.check!(o, findTarget(t), { tensorTypes: [] }, { passes: ['reorder'] })).not.toThrow();
  });

  it('options: search-only and fisher-only keys are refused elsewhere', () => {
    expect(() => parseReorderOptions({ budget: 'memory' })).toThrow(/applies to reorder.widths=search only/);
    expect(() => parseReorderOptions({ widths: 'search', budgetContext: '512' })).toThrow(/budget=memory or latency only/);
    expect(() => parseReorderOptions({ fisherTokens: '1000' })).toThrow(/importance=fisher only/);
    expect(() => parseReorderOptions({ widths: 'per-layer' })).toThrow(/uniform or search/);
  });
});

describe('importance', () => {
  it('fisher: one batch gives (∂L/∂m)² of each unit mask, as finite differences of the masked loss', async () => {
    const spec = ckpt.spec;
    const tfm = await TfModel.load(ckpt);
    try {
      const seqs = [[1, 403, 29, 77, 5, 300, 41, 12, 9, 250, 33, 2, 17, 88, 120, 6]];
      const s = await fisherScores(tfm, seqs, 1);
      const eps = 1e-2;
      const lossWith = (l: number, head: number | null, neuron: number | null, m: number) => {
        const headMask = Array.from({ length: spec.numLayers }, () => null as Float32Array | null);
        const neuronMask = new Map<string, Float32Array>();
        if (head !== null) headMask[l] = Float32Array.from({ length: spec.numHeads }, (_, h) => (h === head ? m : 1));
        const mlp = mlpsOf(spec, l)[0];
        if (neuron !== null) neuronMask.set(mlp.prefix, Float32Array.from({ length: mlp.width }, (_, i) => (i === neuron ? m : 1)));
        return tfm.meanLoss(seqs, { headMask, neuronMask }, 1);
      };
      for (const [l, head, neuron] of [[2, 3, null], [3, null, 100]] as [number, number | null, number | null][]) {
        const d = ((await lossWith(l, head, neuron, 1 + eps)) - (await lossWith(l, head, neuron, 1 - eps))) / (2 * eps);
        const got = head !== null ? s.head[l][head] : s.mlp[mlpsOf(spec, l)[0].prefix][neuron!];
        expect(Math.abs(Math.sqrt(got) - Math.abs(d))).toBeLessThan(0.05 * Math.abs(d) + 2e-4);
      }
    } finally {
      tfm.dispose();
    }
  }, 30_000);

  it('iterative: re-sorting inside the wider level keeps permutations and every position past its widths', () => {
    const spec = ckpt.spec;
    const orders = randomOrders(ckpt, 3, [1, 2, 3, 4]);
    const wider = Array.from({ length: spec.numLayers }, (_, l) => ({ kvGroups: l % 2 ? 2 : 3, qHeadsPerGroup: 1, ffn: 60 + l }));
    const rnd = (n: number, k: number) => Float64Array.from({ length: n }, (_, i) => Math.sin(i * 7.1 + k));
    const scores = {
      head: Array.from({ length: spec.numLayers }, (_, l) => rnd(spec.numHeads, l)),
      kv: Array.from({ length: spec.numLayers }, () => new Float64Array(spec.numKvHeads)),
      mlp: Object.fromEntries(Array.from({ length: spec.numLayers }, (_, l) => [mlpsOf(spec, l)[0].prefix, rnd(spec.intermediateSize, l + 10)])),
    };
    const out = resortWithin(spec, orders, wider, scores);
    out.forEach((o, i) => {
      const before = orders[i];
      const w = wider[o.layer];
      expect([...o.groups].sort()).toEqual([...before.groups].sort());
      expect(new Set(o.groups.slice(0, w.kvGroups))).toEqual(new Set(before.groups.slice(0, w.kvGroups)));
      expect(o.groups.slice(w.kvGroups)).toEqual(before.groups.slice(w.kvGroups));
      const m = mlpsOf(spec, o.layer)[0].prefix;
      expect(o.mlp[m].slice(w.ffn)).toEqual(before.mlp[m].slice(w.ffn));
      expect(new Set(o.mlp[m].slice(0, w.ffn))).toEqual(new Set(before.mlp[m].slice(0, w.ffn)));
      // Inside the prefix: by descending score.
      const sc = scores.mlp[m];
      for (let j = 1; j < w.ffn; j++) expect(sc[o.mlp[m][j - 1]]).toBeGreaterThanOrEqual(sc[o.mlp[m][j]]);
      o.groups.forEach((g, pos) => expect(new Set(o.qInGroup[pos])).toEqual(new Set(before.qInGroup[before.groups.indexOf(g)])));
    });
  });

  it('iterative on stories260K: the largest level keeps the units the one-shot order keeps', async () => {
    const opts = { levels: '0.5,0.75,1', quantBlock: '1', evaluate: 'false', recover: 'none', anchors: '0' };
    const ctx = { note: () => {}, cacheDir: path.join(tmp, 'cache'), target: findTarget('ts') };
    const one = await analyzeReorder(ckpt, parseReorderOptions(opts), ctx);
    const it_ = await analyzeReorder(ckpt, parseReorderOptions({ ...opts, iterative: 'true' }), ctx);
    expect(it_.metadata.iterative).toBe(true);
    const big = one.metadata.levels[1];
    for (const [a, b] of one.orders.map((o, i) => [o, it_.orders[i]] as const)) {
      const w = big.layers[a.layer];
      const m = mlpsOf(ckpt.spec, a.layer)[0].prefix;
      expect(new Set(b.mlp[m].slice(0, w.ffn))).toEqual(new Set(a.mlp[m].slice(0, w.ffn)));
      expect(new Set(b.groups.slice(0, w.kvGroups))).toEqual(new Set(a.groups.slice(0, w.kvGroups)));
    }
    // permuteSource accepts the re-sorted orders (each a permutation).
    expect(permuteSource(ckpt, it_.orders).spec.numLayers).toBe(5);
  }, 60_000);
});
