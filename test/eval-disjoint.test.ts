/**
 * The compile's evaluation set is disjoint from every set a pass selects or accepts on. On a model
 * without a tokenizer all of them are sampled from the model: the passes draw calibration with their
 * seed s, acceptance (held-out) sets with heldOutSeed(s) and training data with trainingSeed(s); the
 * evaluation draws from EVAL_DRAW_SEED. With the passes' default options no evaluation sequence may
 * share even its first 16 tokens (tree-search's prompt length) with any of theirs. Before the
 * evaluation had its own seed, its first 8–16 sequences were the passes' held-out ones.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { heldOutSet } from '../src/app/evaluate/artifact.js';
import { acceptanceSet, calibrationSet, trainingSeed } from '../src/measure/calibration.js';
import { selfGeneratedSequences } from '../src/measure/sequences.js';
import { Engine } from '../src/exec/engine/index.js';
import { parseExpertBitsOptions } from '../passes/expert-bits/options.js';
import { parseOutliersOptions } from '../passes/outliers/options.js';
import { parseReorderOptions } from '../passes/reorder/options.js';
import { parseTreeSearchOptions } from '../passes/tree-search/options.js';

const PREFIX = 16;
let tmp: string;
let ck: Checkpoint;
let engine: Engine;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-disjoint-'));
  const f = await generateFixture(path.join(tmp, 'llama'), { arch: 'llama', seed: 5, tokenizer: 'none' });
  ck = await openCheckpoint(f.dir);
  engine = await Engine.open(ck, { threads: 1 });
});
afterAll(async () => {
  await engine?.close();
  await ck?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

describe('the evaluation set against the passes\' selection and acceptance sets', () => {
  it('shares no sequence (nor a 16-token prefix) with any default calibration, held-out or training draw', async () => {
    expect(ck.assets.tokenizer).toBeFalsy(); // so the evaluation is self-generated too
    const evalSet = await heldOutSet(ck, { tokens: 24 * 63 });
    expect(evalSet.source).toBe('self-generated');
    const key = (s: number[]) => s.slice(0, PREFIX).join(',');
    const evalKeys = new Set(evalSet.sequences.map(key));
    expect(evalKeys.size).toBe(evalSet.sequences.length);
    const passes = {
      reorder: parseReorderOptions({}),
      outliers: parseOutliersOptions({}),
      'expert-bits': parseExpertBitsOptions({ maxLoss: '0.05' }),
      'tree-search': parseTreeSearchOptions({ draftSkip: '1' }),
    };
    for (const [name, o] of Object.entries(passes)) {
      const set = await calibrationSet(ck, { source: 'self-generated', count: o.calibCount, length: o.calibLength, seed: o.seed, heldOut: o.heldOut }, { engine: async () => engine });
      const training = await selfGeneratedSequences(engine, { count: 16, length: o.calibLength, seed: trainingSeed(o.seed) });
      // expert-bits accepts a maxLoss plan on the written artifact over sequences of their own.
      const accept = name === 'expert-bits' ? (await acceptanceSet(ck, set, (o as ReturnType<typeof parseExpertBitsOptions>).acceptance, { engine: async () => engine })).seqs : [];
      if (name === 'expert-bits') expect(accept).toHaveLength(16);
      const selected = new Set([...set.calib, ...set.heldOut].map(key));
      expect(accept.filter((s) => selected.has(key(s))), `${name}: acceptance sequences among its calibration/held-out`).toEqual([]);
      for (const [what, seqs] of [['calibration', set.calib], ['held-out', set.heldOut], ['training', training], ['acceptance', accept]] as const) {
        if (what !== 'acceptance') expect(seqs.length, `${name} ${what}`).toBeGreaterThan(0);
        const shared = seqs.filter((s) => s.length >= PREFIX && evalKeys.has(key(s)));
        expect(shared.length, `${name}: ${what} sequences in the evaluation set`).toBe(0);
      }
    }
  }, 120_000);
});
