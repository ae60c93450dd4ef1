/**
 * The product simulation of a qnn artifact (backends/qnn/sim.ts: int8 × int8 / int32 / requantization
 * from the artifact's own files, what `llmc run` uses by default) against the artifact's QDQ graphs on
 * onnxruntime (`--engine onnxruntime`), through the same runner (chunked prefill with a padded last
 * chunk, then decoding one padded chunk per token, shadow nodes between): on stories260K and on the
 * massive-tokens fixture, with shadow on every linear that has outliers and with the default pruning.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as ort from 'onnxruntime-node';
import type { SubgraphEntry } from '../backends/qnn/emit.js';
import { openOnnxruntime, QnnRunner, type QnnEngine } from '../backends/qnn/run.js';
import { openSimulation } from '../backends/qnn/sim.js';
import type { Op } from '../src/core/ir/ir.js';
import { generateFixture } from '../fixtures/generate.js';
import { delimitedSequences, plantMassiveTokens, type MassiveTokensTruth } from '../fixtures/massive-tokens.js';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import type { ModelSource } from '../src/core/checkpoint/source.js';
import { findRecord, OUTLIER_SCALES, type OutlierScales } from '../src/core/records/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { llmcInProcess } from './cli.js';
import { compileTs } from './ts-artifact.js';

const ROOT = path.resolve(__dirname, '..');
let tmp: string;
let stories: Checkpoint;
let base: Checkpoint;
let massive: ModelSource;
let truth: MassiveTokensTruth;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-qnnsim-'));
  stories = await openCheckpoint(path.join(ROOT, 'fixtures/models/stories260K'));
  await generateFixture(path.join(tmp, 'm'), { arch: 'llama', planted: false, dims: { hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, vocabSize: 300, maxPositions: 128 } });
  base = await openCheckpoint(path.join(tmp, 'm'));
  ({ source: massive, truth } = plantMassiveTokens(base));
});
afterAll(async () => {
  await stories?.close();
  await base?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

async function compileQnn(name: string, source: ModelSource, opts: Record<string, string>) {
  const outDir = path.join(tmp, 'out', name);
  const manifest = await compile({ source, target: 'qnn', outDir, passes: ['outliers'], opts: { 'outliers.calib': '4', 'outliers.calibLength': '32', 'outliers.heldOut': '0', 'qnn.chunk': '12', ...opts }, tensorTypes: [], progress: silentProgress, note: () => {} });
  return { dir: outDir, rec: findRecord(manifest.passes, OUTLIER_SCALES)! };
}

/** Logits of every prompt position (prefill in chunks) and of 6 greedy decode steps, per engine. */
async function trace(dir: string, rec: OutlierScales, engine: QnnEngine, prompt: number[]) {
  const runner = await QnnRunner.open(dir, rec, { engine });
  try {
    const prefill = await runner.logits(prompt);
    const generated = await runner.generate(prompt, { maxTokens: 6 });
    const decode = await runner.logits([...prompt, ...generated.slice(0, -1)]);
    return { prefill, generated, decode, stats: { ...runner.stats } };
  } finally {
    await runner.close();
  }
}

function compare(a: Float32Array, b: Float32Array, V: number) {
  let maxDiff = 0;
  let scale = 0;
  let argmaxSame = 0;
  for (let i = 0; i < a.length; i++) {
    maxDiff = Math.max(maxDiff, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  const rows = a.length / V;
  for (let r = 0; r < rows; r++) {
    const am = (x: Float32Array) => {
      let best = 0;
      for (let i = 1; i < V; i++) if (x[r * V + i] > x[r * V + best]) best = i;
      return best;
    };
    if (am(a) === am(b)) argmaxSame++;
  }
  return { maxDiff, scale, argmaxAgreement: argmaxSame / rows };
}

describe('qnn simulation = onnxruntime on the emitted QDQ graphs', () => {
  const cases: [string, () => ModelSource, Record<string, string>, () => number[]][] = [
    ['stories260K, shadow on every linear with outliers', () => stories, { 'outliers.mode': 'threshold', 'outliers.tau': '1' }, () => [1, ...Array.from({ length: 29 }, (_, i) => (i * 37 + 11) % 512)]],
    ['stories260K, default pruning', () => stories, {}, () => [1, 403, 407, 261, 378, 1473 % 512, 280, 395, 271, 30, 260, 365, 438, 4, 300, 2, 9, 41]],
    ['massive-tokens fixture, shadow on every linear with outliers', () => massive, { 'outliers.mode': 'threshold', 'outliers.tau': '1' }, () => delimitedSequences(truth, 300, 1, 31, 5)[0]],
    ['massive-tokens fixture, default pruning', () => massive, {}, () => delimitedSequences(truth, 300, 1, 31, 6)[0]],
  ];
  for (const [name, source, opts, prompt] of cases) {
    it(name, async () => {
      const { dir, rec } = await compileQnn(name.replace(/\W+/g, '-'), source(), opts);
      const ids = prompt();
      const V = source().spec.vocabSize;
      const sim = await trace(dir, rec, 'sim', ids);
      const ort = await trace(dir, rec, 'onnxruntime', ids);
      // Same device work: chunks, subgraph runs, syncs, outliers corrected, outputs recomputed.
      expect(sim.stats).toEqual(ort.stats);
      expect(sim.generated).toEqual(ort.generated);
      for (const [a, b] of [[sim.prefill, ort.prefill], [sim.decode, ort.decode]]) {
        const c = compare(a, b, V);
        // float32 summation order (attention, RMSNorm, lm_head) is the only difference: a QDQ code
        // can flip by 1 LSB where a value sits on a rounding boundary, nothing more.
        expect(c.maxDiff).toBeLessThan(1e-4 * Math.max(1, c.scale));
        expect(c.argmaxAgreement).toBe(1);
        console.log(`${name}: max |sim − onnxruntime| ${c.maxDiff.toExponential(2)} (logits up to ${c.scale.toFixed(2)}), ${a.length / V} positions`);
      }
      if (opts['outliers.tau']) expect(sim.stats.outliers + sim.stats.recomputed).toBeGreaterThan(0);
    });
  }

  it('rounding half to even and saturation as QuantizeLinear: NPU subgraphs fed values on .5 code boundaries and far beyond the range', async () => {
    // Shadow on every linear with outliers cuts the static groups after those linears: many NPU parts
    // then start and end at one linear (its input in, its output out), compared code for code.
    const { dir, rec } = await compileQnn('rounding', stories, { 'outliers.mode': 'threshold', 'outliers.tau': '1' });
    const { subgraphs } = JSON.parse(await fsp.readFile(path.join(dir, 'graph/subgraphs.json'), 'utf8')) as { subgraphs: SubgraphEntry[] };
    const sim = openSimulation(dir, subgraphs);
    const onnx = await openOnnxruntime(dir, subgraphs, 1);
    const scaleOf = new Map(rec.linears.map((l) => [l.weight, l.input.scale]));
    const outScale = new Map(rec.linears.map((l) => [l.weight, l.output.scale]));
    let ties = 0;
    let saturated = 0;
    let checked = 0;
    for (const sg of subgraphs.filter((s) => s.device === 'NPU')) {
      // An input read directly by a linear: its values are that linear's quantizer input.
      const lin = sg.ops.find((o): o is Extract<Op, { op: 'linear' }> => o.op === 'linear' && sg.inputs.some((i) => i.name === o.x));
      if (!lin || !sg.outputs.some((o) => o.name === lin.out)) continue;
      const sx = scaleOf.get(lin.weight)!;
      const feeds: Record<string, ort.Tensor> = {};
      for (const input of sg.inputs) {
        const n = input.shape.reduce<number>((a, d) => a * Number(d), 1);
        const x = new Float32Array(n);
        for (let i = 0; i < n; i++) {
          const k = ((i * 7919) % 251) - 125;
          if (i % 13 === 0) x[i] = Math.fround((i % 2 ? 1 : -1) * 400 * sx); // saturates
          else x[i] = Math.fround((k + 0.5) * sx);
          if (input.name === lin.x && Math.fround(x[i] / sx) === k + 0.5) ties++;
          if (input.name === lin.x && i % 13 === 0) saturated++;
        }
        feeds[input.name] = new ort.Tensor('float32', x, input.shape.map(Number));
      }
      const a = await sim.run(sg, feeds);
      const b = await onnx.run(sg, feeds);
      // The linear's dequantized codes: bit for bit (the float32 multiplier can put a rare value on the
      // other side of a boundary: at most 1 LSB there).
      const x = a[lin.out].data as Float32Array;
      const y = b[lin.out].data as Float32Array;
      let same = 0;
      for (let i = 0; i < x.length; i++) if (x[i] === y[i]) same++;
      expect(compare(x, y, 1).maxDiff, `${sg.id} ${lin.out}`).toBeLessThanOrEqual(1.01 * outScale.get(lin.weight)!);
      expect(same / x.length, `${sg.id} ${lin.out}`).toBeGreaterThan(0.999);
      checked++;
    }
    await onnx.close();
    expect(checked).toBeGreaterThanOrEqual(5);
    expect(ties).toBeGreaterThan(1000);
    expect(saturated).toBeGreaterThan(100);
  });

  it('llmc run: --engine sim (default) and onnxruntime generate the same tokens; bad --engine is a usage error', async () => {
    const { dir } = await compileQnn('cli', stories, {});
    const run = async (...extra: string[]) => llmcInProcess('run', dir, '--prompt-ids', '1,403,407', '-n', '8', '--json', ...extra);
    const sim = await run();
    const ort = await run('--engine', 'onnxruntime');
    expect(sim.code).toBe(0);
    expect(ort.code).toBe(0);
    expect(JSON.parse(sim.stdout).generated_ids).toEqual(JSON.parse(ort.stdout).generated_ids);
    // Without --json both engines stream the same ids (no EOS here: 8 tokens).
    expect(JSON.parse(sim.stdout).stop_reason).toBe('length');
    for (const engine of ['sim', 'onnxruntime']) {
      const streamed = await llmcInProcess('run', dir, '--prompt-ids', '1,403,407', '-n', '8', '--engine', engine);
      expect(streamed.stdout).toBe(`${JSON.parse(sim.stdout).generated_ids.join(' ')}\n`);
    }
    const bad = await run('--engine', 'npu');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--engine must be sim or onnxruntime/);
    // A target with one engine (capabilities.engines absent) refuses the choice.
    const ts = path.join(tmp, 'ts-engine');
    await compileTs(path.resolve(__dirname, '..', 'fixtures/models/stories260K'), ts);
    const refused = await llmcInProcess('run', ts, '--prompt-ids', '1', '-n', '2', '--engine', 'onnxruntime');
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/--engine onnxruntime: a ts artifact runs on one engine/);
  });
});
