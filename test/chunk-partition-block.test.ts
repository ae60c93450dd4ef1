/**
 * chunk-partition's costs for a large model, measured on layer 0 of it cut to two layers
 * (passes/chunk-partition/block.ts; forced here, automatic where the model streams): the cut model
 * computes what the whole model does with layers 2.. removed (the TS runtime's own layer skipping,
 * logits equal), its per-layer subgraphs are the whole model's (same kinds, same ops), a plan
 * records costs for every kind of the whole partition and says where they come from; a model whose
 * layers differ (sliding and full attention) is costed whole.
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { buildModel } from '../src/core/ir/build.js';
import { silentProgress } from '../src/core/util/progress.js';
import { modelFromTensors } from '../src/exec/runtime/memory.js';
import { costBlock, CUT_LAYERS } from '../passes/chunk-partition/block.js';
import { firstLayers, uniformLayers } from '../src/core/checkpoint/layers.js';
import { parseChunkPartitionOptions } from '../passes/chunk-partition/options.js';
import { partitionOf, plan } from '../passes/chunk-partition/pass.js';
import { STORIES } from './stories-engine.js';

const SWA = path.resolve(__dirname, '../../shared/models/archs/gemma2');
let ck: Checkpoint;
let tmp: string;
beforeAll(async () => {
  ck = await openCheckpoint(STORIES);
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-chunk-block-'));
});
afterAll(async () => {
  await ck?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

describe('chunk-partition costs on one block (stories260K)', () => {
  it('the cut model is the model with layers 2.. removed: equal logits on the TS runtime', async () => {
    const block = firstLayers(ck, CUT_LAYERS);
    expect(block.spec.numLayers).toBe(2);
    expect(block.tensors.some((t) => t.name.startsWith('model.layers.2.'))).toBe(false);
    const ids = [1, 17, 300, 42, 7, 99, 250, 3].map((x) => x % ck.spec.vocabSize);
    const full = (await modelFromTensors(ck)).withoutLayers(Array.from({ length: ck.spec.numLayers - 2 }, (_, l) => l + 2)).forward(ids);
    const cut = (await modelFromTensors(block)).forward(ids);
    expect(cut.length).toBe(full.length);
    let d = 0;
    cut.forEach((v, i) => (d = Math.max(d, Math.abs(v - full[i]))));
    expect(d).toBe(0);
  });

  it("its subgraphs are every layer's: the same kinds and ops as layer ℓ's of the whole partition", () => {
    const o = parseChunkPartitionOptions({ chunk: '16' });
    const whole = partitionOf(buildModel(ck.spec), o);
    const b = costBlock(ck, buildModel(ck.spec), [])!;
    const one = partitionOf(b.graph, o);
    const ops = (g: ReturnType<typeof buildModel>, s: { ops: [number, number] }) => g.ops.slice(s.ops[0], s.ops[1]).map((op) => op.op);
    const wg = buildModel(ck.spec);
    for (let l = 0; l < ck.spec.numLayers; l++) {
      const layer = whole.subgraphs.filter((s) => s.layer === l);
      const first = one.subgraphs.filter((s) => s.layer === 0);
      expect(layer.map((s) => s.kind)).toEqual(first.map((s) => s.kind));
      layer.forEach((s, k) => expect(ops(wg, s)).toEqual(ops(b.graph, first[k])));
    }
    expect(new Set(one.subgraphs.map((s) => s.kind))).toEqual(new Set(whole.subgraphs.map((s) => s.kind)));
  });

  it('a plan costed on the block has every kind of the whole partition, and says so', async () => {
    const o = parseChunkPartitionOptions({ chunk: '16', nMax: '3' });
    const rec = await plan(ck, buildModel(ck.spec), o, { cacheDir: tmp, progress: silentProgress, note: () => {}, stream: true });
    expect(rec.costs.source).toMatch(/on layer 0 of the model cut to 2 layers/);
    const kinds = new Set(rec.subgraphs.map((s) => s.kind));
    for (const k of kinds) {
      const c = rec.chunks[0].costs[k];
      expect(Number.isFinite(c.ms) && c.ms >= 0).toBe(true);
    }
    // the schedule covers the whole model's subgraphs, not the block's
    expect(rec.subgraphs.filter((s) => s.layer === ck.spec.numLayers - 1).length).toBeGreaterThan(0);
    const whole = await plan(ck, buildModel(ck.spec), o, { cacheDir: tmp, progress: silentProgress, note: () => {}, stream: false });
    expect(whole.costs.source).not.toMatch(/layer 0/);
    expect(whole.subgraphs).toEqual(rec.subgraphs);
  });
});

const present = existsSync(SWA);
if (!present) console.log(`skipping the non-uniform chunk-partition block check: ${SWA} is absent`);
describe.skipIf(!present)('layers that differ', () => {
  it('gemma2 (sliding and full attention layers): costed whole', async () => {
    const g = await openCheckpoint(SWA);
    try {
      expect(uniformLayers(g.spec)).toBe(false);
      expect(costBlock(g, buildModel(g.spec), [])).toBeNull();
    } finally {
      await g.close();
    }
  });
});
