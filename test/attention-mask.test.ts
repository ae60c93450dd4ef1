/**
 * Attention masks as IR kinds (src/core/ir/mask.ts): the TS interpreter applies a chunk mask (each
 * query sees its own chunk of positions) as the independent float64 reference computes it; a tree
 * mask fed no tree is its base (causal) to the bit; executors that cannot lower a kind say so, by the
 * declared set and in the lowering, before anything runs.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { buildModel } from '../src/core/ir/build.js';
import type { AttentionMask, ModelGraph } from '../src/core/ir/ir.js';
import { maskKinds, unloweredMasks, withTreeMasks } from '../src/core/ir/mask.js';
import { lowerToOnnx, ONNX_MASKS } from '../src/exec/onnx/lower.js';
import { Interpreter, type Model, type WeightTable } from '../src/exec/runtime/model.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { Llama64 } from './reference/llama64.js';
import { compileTs } from './ts-artifact.js';

const STORIES = path.resolve(__dirname, '..', 'fixtures/models/stories260K');
let tmp: string;
let model: Model;
let ref: Llama64;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-mask-'));
  await compileTs(STORIES, tmp);
  model = await loadDir(tmp);
  const ck = await openCheckpoint(STORIES);
  ref = await Llama64.load(ck);
  await ck.close();
});
afterAll(async () => {
  await model?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

const masked = (g: ModelGraph, mask: AttentionMask): ModelGraph => ({ ...g, ops: g.ops.map((op) => (op.op === 'attention' ? { ...op, mask } : op)) });
const ids = Array.from({ length: 11 }, (_, i) => ((i * 37 + 11) % 500) + 1);

describe('attention mask kinds', () => {
  it('chunk mask (size 4): the interpreter = the float64 reference whose queries see their own chunk only, and ≠ causal', () => {
    const chunked = model.withGraph(masked(buildModel(model.spec), { kind: 'chunk', size: 4 }));
    const got = chunked.forward(ids);
    ref.firstKey = (_l, t) => t - (t % 4);
    const want = ref.forward(ids);
    ref.firstKey = null;
    const causal = ref.forward(ids);
    const V = model.spec.vocabSize;
    let err = 0;
    let scale = 0;
    let moved = 0;
    for (let t = 0; t < ids.length; t++) {
      for (let v = 0; v < V; v++) {
        err = Math.max(err, Math.abs(got[t * V + v] - want[t][v]));
        scale = Math.max(scale, Math.abs(want[t][v]));
        moved = Math.max(moved, Math.abs(want[t][v] - causal[t][v]));
      }
    }
    expect(err).toBeLessThan(1e-4 * scale);
    expect(moved).toBeGreaterThan(100 * err); // the mask changes the logits far beyond the tolerance
  });

  it('a tree mask fed no tree is its causal base, bit for bit; a tree on a graph without tree masks is refused', () => {
    expect(maskKinds(model.graph)).toEqual(new Set(['tree', 'causal'])); // the runtime's graph takes trees
    const base = buildModel(model.spec);
    const bare = new Interpreter(model.spec, base, (model as unknown as { table: WeightTable }).table);
    expect(Array.from(bare.run(ids, bare.newCache(), ids.map((_, t) => t)))).toEqual(Array.from(model.forward(ids)));
    const tree = { shared: 0, visible: [Int32Array.of(0)], positions: Int32Array.of(0), keyPositions: Int32Array.of(0) };
    expect(() => bare.run([ids[0]], bare.newCache(), [0], undefined, { tree })).toThrow(/has a causal mask, not a tree/);
  });

  it('ONNX lowers causal and sliding masks only: the declared set names the rest, and the lowering refuses them', async () => {
    const g = buildModel(model.spec);
    expect(unloweredMasks(g, ONNX_MASKS)).toEqual([]);
    expect(unloweredMasks(withTreeMasks(g), ONNX_MASKS)).toEqual(['tree']);
    expect(unloweredMasks(masked(g, { kind: 'chunk', size: 8 }), ONNX_MASKS)).toEqual(['chunk']);
    const ck = await openCheckpoint(STORIES);
    try {
      await expect(lowerToOnnx(ck, { graph: withTreeMasks(g) })).rejects.toThrow(/the ONNX lowering cannot lower a tree attention mask/);
    } finally {
      await ck.close();
    }
  });
});
