/**
 * `--target qnn`: the artifact checked by its consumer here, onnxruntime-node, running every graph it
 * writes in the order of graph/subgraphs.json (backends/qnn/run.ts, what `llmc run` and evaluation
 * use), against an independent float64 simulation of the device's integer arithmetic
 * (test/reference/w8a8-sim.ts, written from the SPEC) and the float64 model; each QDQ linear against
 * the integer pipeline on the same input (≤ 1 LSB); encodings against their schema and the graphs'
 * tensor names; shadow rows against W_q; bad input is one line, exit 2, nothing written.
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { QnnRunner } from '../backends/qnn/run.js';
import { encodingsJsonSchema, validateEncodings } from '../backends/qnn/encodings.js';
import { ShadowStore } from '../backends/qnn/shadow.js';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { findRecord, OUTLIER_SCALES, type OutlierScales } from '../src/core/records/index.js';
import { intMatmul, quantizeWeight, requantize, clampCodes, quantizeUnclamped } from '../src/core/quant/w8a8.js';
import { silentProgress } from '../src/core/util/progress.js';
import { onnx } from '../src/exec/onnx/proto.js';
import { llmcInProcess } from './cli.js';
import { standInSdk } from './qnn-standin-sdk.js';
import { Llama64 } from './reference/llama64.js';
import { w8a8Reference } from './reference/w8a8-sim.js';

const ROOT = path.resolve(__dirname, '..');
let tmp: string;
let planted: Checkpoint;
let plain: Checkpoint;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-qnn-'));
  await generateFixture(path.join(tmp, 'planted'), { arch: 'llama', dims: { hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, vocabSize: 300, maxPositions: 128 } });
  await generateFixture(path.join(tmp, 'plain'), { arch: 'llama', planted: false, dims: { hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, vocabSize: 300, maxPositions: 128 } });
  planted = await openCheckpoint(path.join(tmp, 'planted'));
  plain = await openCheckpoint(path.join(tmp, 'plain'));
});
afterAll(async () => {
  await planted?.close();
  await plain?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

const OPTS = { 'outliers.calib': '4', 'outliers.calibLength': '32', 'outliers.heldOut': '0' };

async function compileQnn(name: string, source: Checkpoint, opts: Record<string, string> = {}) {
  const outDir = path.join(tmp, 'out', name);
  const manifest = await compile({ source, target: 'qnn', outDir, passes: ['outliers'], opts: { ...OPTS, ...opts }, tensorTypes: [], progress: silentProgress, note: () => {} });
  return { dir: outDir, manifest, rec: findRecord(manifest.passes, OUTLIER_SCALES)! };
}

const seqIds = (n: number, vocab: number, seed: number) => Array.from({ length: n }, (_, i) => (seed * 31 + i * 17 + ((i * i) % 7)) % vocab);

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

const argmax = (v: ArrayLike<number>) => {
  let b = 0;
  for (let i = 1; i < v.length; i++) if (v[i] > v[b]) b = i;
  return b;
};

/** Initializers of an ONNX file by name (the artifact writes them inline). */
async function initializers(file: string) {
  const m = onnx.ModelProto.decode(await fsp.readFile(file));
  return { model: m, init: new Map(m.graph!.initializer!.map((t) => [t.name!, t])) };
}

describe('qnn artifact on onnxruntime', () => {
  it('computes what the independent integer simulation computes (chunked prefill, shadow nodes), not the float model', async () => {
    for (const [name, source, opts] of [
      ['plain', plain, {}],
      ['planted', planted, {}],
      ['planted-all', planted, { 'outliers.keep': '1' }],
    ] as const) {
      const { dir, rec } = await compileQnn(name, source, { 'qnn.chunk': '8', ...opts });
      const sim = await w8a8Reference(source, rec);
      // The artifact's graphs on onnxruntime, and llmc's own simulation of them (backends/qnn/sim.ts).
      for (const engine of ['onnxruntime', 'sim'] as const) {
        const runner = await QnnRunner.open(dir, rec, { engine });
        const f64 = await Llama64.load(source);
        const ids = seqIds(21, 300, 3); // 3 chunks of 8, the last padded
        const got = await runner.logits(ids);
        const want = sim.forward(ids);
        const flt = f64.forward(ids);
        const V = 300;
        let dSim = 0;
        let dFloat = 0;
        for (let t = 0; t < ids.length; t++) {
          const row = got.subarray(t * V, (t + 1) * V);
          dSim = Math.max(dSim, maxAbsDiff(row, want[t]));
          dFloat = Math.max(dFloat, maxAbsDiff(row, flt[t]));
          expect(argmax(row), `${name} ${engine} position ${t}`).toBe(argmax(want[t]));
        }
        // float32 on onnxruntime vs float64 here: a code at a rounding boundary may flip; none did on these.
        expect(dSim, name).toBeLessThan(1e-3);
        // The quantization is real (the artifact is not the float model).
        expect(dFloat, name).toBeGreaterThan(100 * dSim);
        if (name !== 'plain') expect(runner.stats.outliers + runner.stats.recomputed, name).toBeGreaterThan(0);
        expect(runner.stats.chunks).toBe(3);
        await runner.close();
      }
    }
  }, 60_000);

  it('each QDQ linear gives the integer pipeline’s codes (int8 × int8, int32 accumulation, requantization) within 1 LSB', async () => {
    const { dir, rec } = await compileQnn('lsb', planted, { 'qnn.chunk': '16', 'outliers.keep': '1' });
    const down = rec.linears.find((l) => l.weight === 'model.layers.0.mlp.down_proj.weight')!;
    expect(down.output.decision).toBe('shadow'); // its output leaves the graph, so it can be compared
    const sub = JSON.parse(await fsp.readFile(path.join(dir, 'graph/subgraphs.json'), 'utf8'));
    const sg = sub.subgraphs.find((x: { ops: { weight?: string }[] }) => x.ops.some((op) => op.weight === down.weight));
    expect(sg.device).toBe('NPU');
    const file = path.join(dir, sg.file);
    const { init } = await initializers(file);
    // W_q in the graph = round-half-even(W / s_w), computed here from the checkpoint.
    const W = await planted.readF32(down.weight);
    const wq = quantizeWeight(W, down.outFeatures, down.inFeatures);
    expect(wq.scale).toBe(down.weightScale);
    expect(Buffer.from(init.get(down.weight)!.rawData!).equals(Buffer.from(wq.q.buffer))).toBe(true);
    const session = await ort.InferenceSession.create(file);
    const c = 16;
    let seed = 7;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1;
    const feeds: Record<string, ort.Tensor> = {};
    for (const i of sg.inputs as { name: string; shape: number[] }[]) feeds[i.name] = new ort.Tensor('float32', Float32Array.from({ length: c * i.shape[3] }, () => 3 * rnd()), i.shape);
    const out = await session.run(feeds);
    const h = out['model.layers.0.mlp.h'].data as Float32Array;
    const y = out['model.layers.0.mlp.down'].data as Float32Array;
    const codes = requantize(intMatmul(clampCodes(quantizeUnclamped(h, down.input.scale), 8), c, wq), down.input.scale, down.weightScale, down.output.scale, 8, 8);
    let exact = 0;
    for (let i = 0; i < y.length; i++) {
      const got = y[i] / down.output.scale;
      expect(Math.abs(got - codes[i]), `element ${i}`).toBeLessThanOrEqual(1 + 1e-4);
      if (Math.abs(got - codes[i]) < 1e-3) exact++;
    }
    expect(exact / y.length).toBeGreaterThan(0.99);
    await session.release();
  }, 30_000);

  it('writes encodings that pass the schema in both layouts and name tensors of the graphs; shadow rows are W_q’s', async () => {
    for (const fmt of ['legacy', 'aimet1'] as const) {
      const { dir, rec } = await compileQnn(`enc-${fmt}`, planted, { 'qnn.encodings': fmt, 'qnn.soc': 'SM8550', 'outliers.keep': '0.5' });
      const sub = JSON.parse(await fsp.readFile(path.join(dir, 'graph/subgraphs.json'), 'utf8'));
      const npu = sub.subgraphs.filter((s: { device: string }) => s.device === 'NPU');
      expect(npu.length).toBeGreaterThan(0);
      for (const s of npu) {
        const doc = JSON.parse(await fsp.readFile(path.join(dir, s.encodings), 'utf8'));
        expect(() => validateEncodings(doc, fmt)).not.toThrow();
        const { model } = await initializers(path.join(dir, s.file));
        const names = new Set([...model.graph!.initializer!.map((t) => t.name!), ...model.graph!.node!.flatMap((n) => [...n.input!, ...n.output!]), ...model.graph!.input!.map((i) => i.name!)]);
        const entries: { name: string; scale: number; offset: number; bits: number }[] =
          fmt === 'legacy'
            ? [...Object.entries(doc.activation_encodings), ...Object.entries(doc.param_encodings)].map(([name, [e]]: [string, any]) => ({ name, scale: e.scale, offset: e.offset, bits: e.bitwidth })) // eslint-disable-line @typescript-eslint/no-explicit-any
            : [...doc.activation_encodings, ...doc.param_encodings].map((e: any) => ({ name: e.name, scale: e.scale[0], offset: e.offset[0], bits: e.bw })); // eslint-disable-line @typescript-eslint/no-explicit-any
        expect(entries.length).toBeGreaterThan(0);
        for (const e of entries) {
          expect(names.has(e.name), `${s.id}: ${e.name}`).toBe(true);
          expect(e.offset).toBe(-(2 ** (e.bits - 1))); // QNN: offset = −zero_point over unsigned codes
        }
        // Legacy keeps is_symmetric as a string.
        if (fmt === 'legacy') for (const [, [e]] of Object.entries(doc.activation_encodings) as [string, any][]) expect(e.is_symmetric).toBe('True'); // eslint-disable-line @typescript-eslint/no-explicit-any
      }
      const htp = JSON.parse(await fsp.readFile(path.join(dir, 'htp.json'), 'utf8'));
      expect(htp.devices[0]).toMatchObject({ dsp_arch: 'v73', soc_id: 43 });
      expect(htp.graphs[0].graph_names).toEqual(npu.map((s: { id: string }) => s.id));
      // Shadow rows: hot ones resident, cold ones row-addressable; every row equals W_q's.
      const store = new ShadowStore(dir);
      const sides = rec.linears.flatMap((l) => (['input', 'output'] as const).filter((sd) => l[sd].decision === 'shadow').map((sd) => ({ l, sd })));
      expect(sides.length).toBeGreaterThan(0);
      for (const { l, sd } of sides) {
        const wq = quantizeWeight(await planted.readF32(l.weight), l.outFeatures, l.inFeatures);
        const rows = sd === 'input' ? l.inFeatures : l.outFeatures;
        for (let k = 0; k < rows; k++) {
          const want = sd === 'input' ? wq.q.subarray(k * l.outFeatures, (k + 1) * l.outFeatures) : Int8Array.from({ length: l.inFeatures }, (_, i) => wq.q[i * l.outFeatures + k]);
          expect(Buffer.from(store.row(l.weight, sd, k)).equals(Buffer.from(want)), `${l.weight} ${sd} row ${k}`).toBe(true);
        }
      }
      expect(store.stats.hotRows).toBeGreaterThan(0);
      expect(store.stats.coldRows).toBeGreaterThan(0);
      store.close();
    }
    // The schema kept in the repo is the one the writer validates with.
    const kept = JSON.parse(await fsp.readFile(path.join(ROOT, 'backends/qnn/encodings.schema.json'), 'utf8'));
    expect(kept).toEqual(JSON.parse(JSON.stringify(encodingsJsonSchema())));
  }, 60_000);

  it('llmc run generates through the artifact what the simulation predicts greedily; llmc report shows the record; build-qnn.sh names what is missing', async () => {
    const { dir, rec } = await compileQnn('cli', planted, { 'qnn.chunk': '8' });
    const prompt = seqIds(5, 300, 1);
    const r = await llmcInProcess('run', dir, '--prompt-ids', prompt.join(','), '-n', '6', '--json');
    expect(r.code, r.stderr).toBe(0);
    const ids: number[] = JSON.parse(r.stdout).generated_ids;
    const sim = await w8a8Reference(planted, rec);
    const seq = [...prompt];
    for (const id of ids) {
      const logits = sim.forward(seq);
      expect(id).toBe(argmax(logits[logits.length - 1]));
      seq.push(id);
    }
    // The report has the record's section, with every linear.
    const rep = await llmcInProcess('report', dir, '--json', '--no-quality');
    expect(rep.code, rep.stderr).toBe(0);
    const section = (JSON.parse(rep.stdout).sections as { id: string; data: { linears: unknown[] } }[]).find((x) => x.id === 'outliers');
    expect(section?.data.linears).toHaveLength(rec.linears.length);
    const { execa } = await import('execa');
    const none = await execa('bash', [path.join(dir, 'build-qnn.sh')], { reject: false, env: { QNN_SDK_ROOT: '' } });
    expect(none.exitCode).toBe(127);
    expect(none.stderr).toMatch(/QNN_SDK_ROOT is not set.*2\.28/);
    const fake = path.join(tmp, 'fake-sdk');
    await fsp.mkdir(fake, { recursive: true });
    const missing = await execa('bash', [path.join(dir, 'build-qnn.sh')], { reject: false, env: { QNN_SDK_ROOT: fake } });
    expect(missing.exitCode).toBe(127);
    expect(missing.stderr).toMatch(/qnn-onnx-converter is missing/);
    // Against a stand-in SDK whose tools check their documented arguments: one context of every NPU graph.
    const standIn = path.join(tmp, 'standin-sdk');
    await standInSdk(standIn, 'v75');
    const built = await execa('bash', [path.join(dir, 'build-qnn.sh')], { reject: false, env: { QNN_SDK_ROOT: standIn } });
    expect(built.exitCode, built.stderr).toBe(0);
    const listed = JSON.parse(await fsp.readFile(path.join(dir, 'graph/subgraphs.json'), 'utf8')).subgraphs as { qnnGraphName: string | null; ctxFile: string | null }[];
    const npu = listed.filter((x) => x.qnnGraphName !== null);
    expect(npu.length).toBeGreaterThan(1);
    for (const x of npu) expect(x.ctxFile).toBe('ctx/llmc.bin');
    expect(JSON.parse(await fsp.readFile(path.join(dir, 'ctx/llmc.bin'), 'utf8'))).toEqual({ graphs: npu.map((x) => x.qnnGraphName), weightSharing: true });
  }, 60_000);
});

describe('qnn bad input', () => {
  it('refuses, in one line with exit 2 and nothing written: no outliers pass, an unknown SoC, a MoE model', async () => {
    const src = path.join(tmp, 'planted');
    const out = path.join(tmp, 'bad');
    const noPass = await llmcInProcess('compile', src, '--target', 'qnn', '-o', out);
    expect(noPass.code).toBe(2);
    expect(noPass.stderr).toMatch(/outliers/);
    const soc = await llmcInProcess('compile', src, '--passes', 'outliers', '--target', 'qnn', '--opt', 'qnn.soc=SM1234', '-o', out);
    expect(soc.code).toBe(2);
    expect(soc.stderr).toMatch(/SM1234.*SM8550, SM8650, SM8750/);
    await generateFixture(path.join(tmp, 'moe'), { arch: 'mixtral', dims: { hiddenSize: 32, intermediateSize: 64, numLayers: 1, numHeads: 2, numKvHeads: 1, vocabSize: 300, maxPositions: 64, numExperts: 4, topK: 2, expertIntermediateSize: 32 } });
    const moe = await llmcInProcess('compile', path.join(tmp, 'moe'), '--passes', 'outliers', '--target', 'qnn', '-o', out);
    expect(moe.code).toBe(2);
    expect(moe.stderr).toMatch(/mixture-of-experts/);
    for (const r of [noPass, soc, moe]) expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(existsSync(out)).toBe(false);
  }, 30_000);
});
