/**
 * Pass `reorder`: permutation math and full-width equivalence on the real stories260K model.
 * Expected values come from the reference greedy ids (reference.json, computed independently in
 * float64) and from the unmodified model run by the onnxruntime engine; the negative controls
 * show the equivalence checks can fail.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { layerNames } from '../src/core/arch/names.js';
import { transformSource, type ModelSource } from '../src/core/checkpoint/source.js';
import { Engine } from '../src/exec/engine/index.js';
import { TfModel } from '../src/exec/autodiff/lower.js';
import { generateFixture } from '../fixtures/generate.js';
import { analyzeReorder } from '../passes/reorder/analyze.js';
import { parseReorderOptions } from '../passes/reorder/options.js';
import { levelMasks } from '../passes/reorder/masks.js';
import {
  checkPermutation,
  expandAttention,
  inversePermutation,
  randomOrders,
  permuteSource,
  rewritePlan,
  type LayerOrder,
} from '../passes/reorder/permute.js';
import { sliceSource } from '../src/core/pipeline/elastic.js';
import { planLevels } from '../passes/reorder/planner.js';
import { relErr } from './numeric.js';
import { findTarget } from '../src/app/compile/plan.js';

const MODEL = path.resolve(__dirname, '../fixtures/models/stories260K');
const reference = async () => JSON.parse(await fsp.readFile(path.join(MODEL, 'reference.json'), 'utf8')) as { greedy_ids: number[] };

let ckpt: Checkpoint;
let cacheDir: string;
let orders: LayerOrder[];

/** Every layer's index (random orders for the whole model). */
const allLayers = (src: ModelSource) => Array.from({ length: src.spec.numLayers }, (_, l) => l);

function invertOrder(o: LayerOrder): LayerOrder {
  const invG = inversePermutation(o.groups);
  return {
    layer: o.layer,
    groups: Array.from(invG),
    qInGroup: Array.from(invG, (pos) => Array.from(inversePermutation(o.qInGroup[pos]))),
    mlp: Object.fromEntries(Object.entries(o.mlp).map(([k, p]) => [k, Array.from(inversePermutation(p))])),
  };
}

async function greedy(engine: Engine, n: number): Promise<number[]> {
  return engine.generate([1], { maxTokens: n, stopIds: [] });
}

/** max |a − b| / max |a| (a is the reference). */
const relDiff = (a: Float32Array, b: Float32Array) => relErr(b, a);

const PROMPT = [1, 461, 461, 401, 401, 401, 461, 378, 455, 473, 456, 435, 299, 362, 409, 283, 264];

beforeAll(async () => {
  ckpt = await openCheckpoint(MODEL);
  cacheDir = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-reorder-'));
  const r = await analyzeReorder(ckpt, parseReorderOptions({ importance: 'taylor', evaluate: 'false', recover: 'none' }), { note: () => {}, cacheDir, target: findTarget('ts') });
  orders = r.orders;
});

afterAll(async () => {
  await ckpt?.close();
  if (cacheDir) await fsp.rm(cacheDir, { recursive: true, force: true });
});

describe('permutation math', () => {
  it('expanded channel gathers are block-structured bijections', () => {
    const o = randomOrders(ckpt, 3, allLayers(ckpt))[1];
    const hd = ckpt.spec.headDim;
    const { q, kv } = expandAttention(o, hd);
    checkPermutation(q, ckpt.spec.numHeads * hd, 'q');
    checkPermutation(kv, ckpt.spec.numKvHeads * hd, 'kv');
    for (let i = 0; i < q.length; i++) expect(q[i] % hd).toBe(i % hd); // offsets inside a head kept
    for (let i = 0; i < q.length; i += hd) for (let e = 1; e < hd; e++) expect(q[i + e]).toBe(q[i] + e);
    // Query head r of new group g comes from the old group o.groups[g].
    const R = ckpt.spec.numHeads / ckpt.spec.numKvHeads;
    for (let h = 0; h < ckpt.spec.numHeads; h++) expect(Math.floor(q[h * hd] / hd / R)).toBe(o.groups[Math.floor(h / R)]);
    expect(() => checkPermutation([0, 0, 1], 3, 'x')).toThrow(/not a permutation/);
  });

  it('permute then un-permute is bit-exact for every tensor; untouched tensors are the same bytes', async () => {
    const ords = randomOrders(ckpt, 7, allLayers(ckpt));
    const there = permuteSource(ckpt, ords);
    const back = permuteSource(there, ords.map(invertOrder));
    const plan = rewritePlan(ckpt.spec, ords);
    let moved = 0;
    for (const t of ckpt.tensors) {
      const orig = await ckpt.readF32(t.name);
      const p = await there.readF32(t.name);
      expect(Buffer.from((await back.readF32(t.name)).buffer).equals(Buffer.from(orig.buffer))).toBe(true);
      if (plan.has(t.name)) {
        moved++;
        expect(Buffer.from(p.buffer).equals(Buffer.from(orig.buffer))).toBe(false);
        expect([...p].sort().join()).toBe([...orig].sort().join()); // same multiset of values
      } else {
        expect(Buffer.from(p.buffer).equals(Buffer.from(orig.buffer))).toBe(true);
      }
    }
    // q, k, v, o, gate, up, down in each of the 5 layers.
    expect(moved).toBe(7 * ckpt.spec.numLayers);
  });

  it('the taylor order on stories260K is not the identity, and anchors are left untouched', () => {
    expect(orders.length).toBe(ckpt.spec.numLayers - 1); // one anchor (round(5·6/32))
    const nonIdentity = orders.filter(
      (o) => o.groups.some((g, i) => g !== i) || Object.values(o.mlp).some((p) => p.some((v, i) => v !== i)),
    );
    expect(nonIdentity.length).toBeGreaterThan(0);
    const neuronMoves = orders.reduce((a, o) => a + o.mlp[`model.layers.${o.layer}.mlp`].filter((v, i) => v !== i).length, 0);
    expect(neuronMoves).toBeGreaterThan(100);
  });
});

describe('full-width equivalence (onnxruntime engine, f32)', () => {
  let base: Engine;
  let baseLogits: Float32Array;
  beforeAll(async () => {
    base = await Engine.open(ckpt);
    baseLogits = await base.logits(PROMPT);
  });
  afterAll(async () => base?.close());

  it('the reordered model gives the reference greedy ids and logits within 1e-5 relative', async () => {
    const ref = await reference();
    const e = await Engine.open(permuteSource(ckpt, orders));
    try {
      expect(await greedy(e, ref.greedy_ids.length)).toEqual(ref.greedy_ids);
      const d = relDiff(baseLogits, await e.logits(PROMPT));
      console.log(`full-width reordered vs original: max|Δlogit| / max|logit| = ${d.toExponential(2)}`);
      expect(d).toBeLessThan(1e-5);
    } finally {
      await e.close();
    }
  });

  it('negative control: permuting inside a head breaks it', async () => {
    // Reverse the head_dim channels of every q and k head consistently (q·k per head is unchanged
    // without RoPE): only RoPE's pairing of dims inside a head tells them apart.
    const hd = ckpt.spec.headDim;
    const flip = (data: Float32Array, cols: number) => {
      const out = new Float32Array(data.length);
      const rows = data.length / cols;
      for (let r = 0; r < rows; r++) {
        const src = Math.floor(r / hd) * hd + (hd - 1 - (r % hd));
        out.set(data.subarray(src * cols, (src + 1) * cols), r * cols);
      }
      return out;
    };
    const bad = transformSource(ckpt, {
      label: 'flip-inside-head',
      paramsHash: 'x',
      rewrite: (name, d) => (/self_attn\.(q|k)_proj\.weight$/.test(name) ? flip(d, ckpt.spec.hiddenSize) : d),
    });
    const e = await Engine.open(bad);
    try {
      const d = relDiff(baseLogits, await e.logits(PROMPT));
      console.log(`permuted inside heads: ${d.toExponential(2)}`);
      expect(d).toBeGreaterThan(1e-2);
    } finally {
      await e.close();
    }
  });

  it('negative control: an inconsistent permutation (q without o, gate without down) breaks it', async () => {
    const good = permuteSource(ckpt, orders);
    const n = layerNames(1);
    const inconsistent = transformSource(ckpt, {
      label: 'inconsistent',
      paramsHash: 'y',
      // Take the reordered q and gate, but the ORIGINAL o and down.
      rewrite: async (name, d) => (name === n.q || name === n.mlp.gate ? good.readF32(name) : d),
    });
    const e = await Engine.open(inconsistent);
    try {
      const d = relDiff(baseLogits, await e.logits(PROMPT));
      console.log(`inconsistent permutation: ${d.toExponential(2)}`);
      expect(d).toBeGreaterThan(1e-2);
    } finally {
      await e.close();
    }
  });
});

describe('prefix = mask', () => {
  it('each level sliced from the reordered weights equals the full model with the dropped units masked', async () => {
    const anchors = new Set([0]);
    const { levels } = planLevels(ckpt.spec, { levels: [0.5, 0.75], anchors, block: 1 });
    const reordered = permuteSource(ckpt, orders);
    const full = await TfModel.load(ckpt);
    try {
      for (const lv of levels) {
        const masked = await full.allLogits(PROMPT, levelMasks(ckpt.spec, orders, lv.layers));
        const sliced = await TfModel.load(sliceSource(reordered, lv.layers, lv.id));
        try {
          const d = relDiff(masked, await sliced.allLogits(PROMPT));
          console.log(`prefix vs mask at ${lv.nominal}: ${d.toExponential(2)}`);
          expect(d).toBeLessThan(1e-5);
        } finally {
          sliced.dispose();
        }
        // And it really is a different model from the full one.
        expect(relDiff(masked, await full.allLogits(PROMPT))).toBeGreaterThan(1e-2);
      }
    } finally {
      full.dispose();
    }
  });
});

describe('other architectures (fixtures): biases, MoE experts', () => {
  for (const arch of ['qwen2', 'mixtral', 'qwen2_moe'] as const) {
    it(`${arch}: the reordered model equals the original at full width; expert neurons are reordered`, async () => {
      const dir = path.join(cacheDir, `fx-${arch}`);
      await generateFixture(dir, { arch, seed: 3 });
      const src = await openCheckpoint(dir);
      try {
        const r = await analyzeReorder(src, parseReorderOptions({ importance: 'activation', evaluate: 'false', levels: '0.5,1', recover: 'none' }), {
          note: () => {},
          cacheDir: path.join(cacheDir, `c-${arch}`),
          target: findTarget('ts'),
        });
        if (src.spec.moe) {
          const expertOrders = r.orders.flatMap((o) => Object.entries(o.mlp).filter(([k]) => k.includes('.experts.')));
          expect(expertOrders.length).toBeGreaterThan(0);
          expect(expertOrders.some(([, p]) => p.some((v, i) => v !== i))).toBe(true);
        }
        const ids = [1, 5, 9, 33, 70, 12, 8];
        const e0 = await Engine.open(src);
        const e1 = await Engine.open(permuteSource(src, r.orders));
        try {
          expect(relDiff(await e0.logits(ids), await e1.logits(ids))).toBeLessThan(1e-5);
        } finally {
          await e0.close();
          await e1.close();
        }
      } finally {
        await src.close();
      }
    });
  }
});
