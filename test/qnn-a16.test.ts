/**
 * Why sim and onnxruntime differ with 16-bit activations (outliers.a16=all), and the bound that
 * follows. Both engines run every subgraph on the same feeds (onnxruntime's outputs carried on):
 * with 8-bit activations every QDQ output is identical to the bit; with 16-bit ones the linears
 * themselves agree (the sim follows onnxruntime's float path: f32 operands, float32 FMA in k order,
 * QuantizeLinear rounding half to even), but the float ops before each QuantizeLinear (attention's
 * softmax, RMSNorm, SiLU) agree with onnxruntime only to ~1e-6, and an int16 code's LSB (T/32767) is
 * 256× finer than int8's: such differences cross a rounding boundary in a few percent of values, one
 * LSB each. Per subgraph the gap is a few LSB of the output's scale; over 5 layers it compounds to
 * the end-to-end bound docs/outliers.md states (1e-3 relative; test/qnn-chunks measures it per chunk).
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QnnRunner } from '../backends/qnn/run.js';
import { findRecord, OUTLIER_SCALES } from '../src/core/records/index.js';
import { llmcInProcess as llmc } from './cli.js';
import { npuOutput, simBeside, type Gap } from './qnn-gaps.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-qnn-a16-'));
});
afterAll(() => fsp.rm(tmp, { recursive: true, force: true }));

/** Prefill 12 tokens on onnxruntime, running the simulation beside it on every subgraph's same feeds. */
async function gaps(a16: 'none' | 'all'): Promise<Gap[]> {
  const dir = path.join(tmp, `qnn-${a16}`);
  const r = await llmc('compile', STORIES, '--target', 'qnn', '--passes', 'outliers', '--opt', 'outliers.calib=4', '--opt', 'outliers.calibLength=32', '--opt', 'outliers.heldOut=0', '--opt', `outliers.a16=${a16}`, '--no-eval', '-o', dir);
  expect(r.code, r.stderr).toBe(0);
  const m = JSON.parse(await fsp.readFile(path.join(dir, 'llmc-manifest.json'), 'utf8'));
  const out: Gap[] = [];
  const runner = await QnnRunner.open(dir, findRecord(m.passes, OUTLIER_SCALES)!, { engine: 'onnxruntime', observe: simBeside(dir, out) });
  try {
    await runner.forwardChunk(Array.from({ length: 12 }, (_, i) => ((i * 37 + 5) % 500) + 1), runner.emptyKv());
  } finally {
    await runner.close();
  }
  return out;
}

describe('sim vs onnxruntime subgraph by subgraph on the same feeds', () => {
  it('8-bit activations: every NPU output identical; 16-bit: within a few LSB (T/32767) of its scale, in a few percent of values; float ops differ by ~1e-6 in both', async () => {
    const a8 = await gaps('none');
    const a16 = await gaps('all');
    const attn = (g: Gap) => /_attn$/.test(g.subgraph);
    for (const g of a8.filter(npuOutput)) expect(g.maxAbs, `a8 ${g.subgraph} ${g.output}`).toBe(0);
    for (const g of [...a8, ...a16].filter(attn)) expect(g.maxAbs, `${g.subgraph} ${g.output}`).toBeLessThan(1e-5 * Math.max(1, g.scale));
    const flipped = a16.filter(npuOutput).filter((g) => g.maxAbs > 0);
    expect(flipped.length).toBeGreaterThan(0); // the cause is real: 16-bit codes flip where 8-bit ones do not
    for (const g of a16.filter(npuOutput)) {
      expect(g.maxAbs / (g.scale / 32767), `a16 ${g.subgraph} ${g.output}: LSBs`).toBeLessThan(4);
      expect(g.differ / g.n, `a16 ${g.subgraph} ${g.output}: values that differ`).toBeLessThan(0.05);
    }
    console.log(`a16: ${flipped.length} of ${a16.filter(npuOutput).length} NPU outputs differ, at most ${Math.max(...flipped.map((g) => g.maxAbs / (g.scale / 32767))).toFixed(2)} LSB, in at most ${(100 * Math.max(...flipped.map((g) => g.differ / g.n))).toFixed(2)}% of values`);
  }, 120_000);
});
