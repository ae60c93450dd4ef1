/**
 * Blockwise recovery (reorder.recover=blockwise, passes/reorder/blockwise.ts) on a tiny random
 * checkpoint: the full level is never touched (no adapters; the shipped weights byte-equal to an
 * unrecovered run's), a narrowed level's block-local loss falls below skipping-the-untrained-block's
 * on held-back sequences, the streamed path (pieces loaded and freed one at a time) gives the same
 * bytes as holding every piece and holds at most two pieces (a second run, byte-identical: deterministic).
 * Quality against whole-model LoRA is measured in bench/blockwise.bench.ts.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import type { LevelLayer } from '../src/core/records/elastic.js';
import { generateFixture } from '../fixtures/generate.js';
import { Rng } from '../src/core/util/rng.js';
import { blockwiseRecoverLevels, blockwiseSettings, type BlockwiseOutcome } from '../passes/reorder/blockwise.js';
import { parseReorderOptions } from '../passes/reorder/options.js';
import { analyzeReorder } from '../passes/reorder/analyze.js';
import { findTarget } from '../src/app/compile/plan.js';

let tmp: string;
let src: Checkpoint;
const T = 16;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-blockwise-'));
  await generateFixture(path.join(tmp, 'm'), { arch: 'llama', seed: 7 });
  src = await openCheckpoint(path.join(tmp, 'm'));
});
afterAll(async () => {
  await src?.close();
  if (tmp) await fsp.rm(tmp, { recursive: true, force: true });
});

const seqs = (n: number, seed: number) => {
  const rng = new Rng(seed);
  return Array.from({ length: n }, () => Array.from({ length: T }, () => Math.floor(rng.next() * src.spec.vocabSize)));
};

function halfLevel(): LevelLayer[] {
  const s = src.spec;
  const g = s.numHeads / s.numKvHeads;
  const kv = Math.max(1, s.numKvHeads / 2);
  return Array.from({ length: s.numLayers }, (_, layer) => ({ layer, anchor: false, kvGroups: kv, qHeadsPerGroup: g, ffn: s.intermediateSize / 2, heads: kv * g, params: 0 }));
}

function fullLevel(): LevelLayer[] {
  const s = src.spec;
  return Array.from({ length: s.numLayers }, (_, layer) => ({ layer, anchor: false, kvGroups: s.numKvHeads, qHeadsPerGroup: s.numHeads / s.numKvHeads, ffn: s.intermediateSize, heads: s.numHeads, params: 0 }));
}

async function recover(keepPieces: boolean): Promise<BlockwiseOutcome> {
  // mse: a random model's head is near uniform, so the default lens loss barely moves here.
  const { settings, blockwise } = blockwiseSettings(parseReorderOptions({ recover: 'blockwise', recoverLoss: 'mse', recoverSteps: '8', recoverEndToEnd: '2', recoverBatch: '4', recoverLr: '3e-2' }).recover!);
  return blockwiseRecoverLevels({
    model: src,
    levels: [
      { id: 'half', layers: halfLevel() },
      { id: 'full', layers: fullLevel() },
    ],
    heldOut: seqs(4, 2),
    training: { seqs: seqs(16, 1), key: 'test', settings },
    blockwise,
    keepPieces,
  });
}

const bytesOf = (r: BlockwiseOutcome) =>
  JSON.stringify([...r.levels].map(([id, lv]) => [id, lv.before, lv.after, lv.bestStep, (lv.adapters ?? []).map((a) => [a.weight, Buffer.from(a.a.buffer).toString('base64'), Buffer.from(a.b.buffer).toString('base64')])]));

describe('blockwise recovery', () => {
  let streamed: BlockwiseOutcome;
  beforeAll(async () => {
    streamed = await recover(false);
  });

  it("trains the narrowed level's blocks (held-back block loss falls) and leaves the full level without adapters", () => {
    const half = streamed.levels.get('half')!;
    const full = streamed.levels.get('full')!;
    expect(full.adapters).toBeUndefined();
    expect(full.before.heldOutPpl).toBe(streamed.full.heldOutPpl);
    const blocks = streamed.stats.get('half')!.blocks;
    expect(blocks).toHaveLength(src.spec.numLayers);
    for (const b of blocks) expect(b.after).toBeLessThanOrEqual(b.before);
    expect(blocks.filter((b) => b.bestStep > 0 && b.after < 0.99 * b.before).length).toBeGreaterThan(0);
    expect(half.adapters?.length).toBeGreaterThan(0);
  });

  it('streams: at most two pieces held at once; holding every piece gives the same bytes (deterministic)', async () => {
    expect(streamed.peakPieces).toBeLessThanOrEqual(2);
    const held = await recover(true);
    expect(held.peakPieces).toBe(src.spec.numLayers + 2);
    expect(bytesOf(held)).toBe(bytesOf(streamed));
  });

  it('reorder.recoverLoss: lens by default, mse / norm, anything else refused, blockwise only', () => {
    expect(parseReorderOptions({ recover: 'blockwise' }).recover!.loss).toBe('lens');
    expect(parseReorderOptions({ recover: 'blockwise', recoverLoss: 'norm' }).recover!.loss).toBe('norm');
    expect(() => parseReorderOptions({ recover: 'blockwise', recoverLoss: 'kl' })).toThrow(/recoverLoss must be mse, norm, lens or topk, got "kl"/);
    expect(() => parseReorderOptions({ recoverLoss: 'mse' })).toThrow(/recoverLoss applies to reorder.recover=blockwise only/);
  });

  it("ships the full model's weights byte for byte (recovery adds adapters only to narrowed levels)", async () => {
    const ctx = { note: () => {}, cacheDir: path.join(tmp, 'cache'), target: findTarget('ts') };
    const base = { levels: '0.5,1', importance: 'activation', calib: '4', calibLength: String(T), heldOut: '2' };
    const none = await analyzeReorder(src, parseReorderOptions({ ...base, recover: 'none' }), ctx);
    const bw = await analyzeReorder(src, parseReorderOptions({ ...base, recover: 'blockwise', recoverSteps: '4', recoverEndToEnd: '0', recoverData: '16', recoverBatch: '4' }), ctx);
    const fullId = bw.metadata.levels.find((l) => l.paramFrac === 1)!.id;
    for (const [, ann] of bw.adapters) expect(ann.adapters?.[fullId]).toBeUndefined();
    expect(bw.adapters.size).toBeGreaterThan(0);
    expect(bw.source.tensors.map((t) => t.name)).toEqual(none.source.tensors.map((t) => t.name));
    for (const t of none.source.tensors) expect(Buffer.from((await bw.source.readF32(t.name)).buffer).equals(Buffer.from((await none.source.readF32(t.name)).buffer))).toBe(true);
  });
});
