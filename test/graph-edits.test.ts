/**
 * A pass's graph edits reach the target or the target refuses them: the Hadamard rotation
 * (passes/outliers/rotate.ts) inserts online rotations in the IR and rewrites down_proj; ts, gguf, hf
 * and tensorrt-llm rebuild the model from its config, so they refuse such a unit (a usage error naming
 * the target) instead of writing rotated weights that would run without their rotations.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { refuseGraphEdits, unitOf } from '../src/core/pipeline/unit.js';
import { rotateUnit } from '../passes/outliers/rotate.js';
import { tsTarget } from '../backends/ts/emit.js';

const STORIES = path.resolve(__dirname, '..', 'fixtures/models/stories260K');
let ck: Checkpoint;
beforeAll(async () => {
  ck = await openCheckpoint(STORIES);
});
afterAll(async () => {
  await ck?.close();
});

describe('graph edits', () => {
  it('a rotated unit is refused by the targets that rebuild the model; the plain unit passes', async () => {
    const plain = unitOf(ck);
    const rotated = rotateUnit(plain);
    expect(rotated.graph.ops.length).toBeGreaterThan(plain.graph.ops.length); // the online rotations
    expect(() => refuseGraphEdits(plain, 'gguf')).not.toThrow();
    for (const t of ['ts', 'gguf', 'hf', 'tensorrt-llm']) expect(() => refuseGraphEdits(rotated, t)).toThrow(new RegExp(`^target ${t} rebuilds the model from its config and cannot carry a pass's graph edits`));
    const ctx = { outDir: '/nonexistent', formats: { quant: 'F32', tensorTypes: [] }, options: {} } as never;
    await expect(tsTarget.plan!(rotated, ctx)).rejects.toThrow(/target ts rebuilds the model/);
  });
});
