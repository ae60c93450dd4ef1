/**
 * `--opt qnn.externalData=true` (what `auto` does to a graph above protobuf's 2 GiB): every NPU/CPU
 * graph's weights in `<graph>.onnx.data` beside it. Checked against the inline artifact of the same
 * compile: every initializer's bytes equal (read back from the data file at the graph's offsets), the
 * graphs otherwise the same, the other files byte-identical, onnxruntime (loading the graphs by path,
 * as `llmc run` does) gives the same logits bit for bit, and --dry-run lists the files and sizes the
 * real compile writes.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { QnnRunner } from '../backends/qnn/run.js';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { findRecord, OUTLIER_SCALES } from '../src/core/records/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { onnx, type TensorProto } from '../src/exec/onnx/proto.js';
import { llmcInProcess } from './cli.js';

let tmp: string;
let source: Checkpoint;
/** The files the external-data compile wrote (the dry run's reference). */
let written: { path: string; size: number }[] | undefined;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-qnnext-'));
  await generateFixture(path.join(tmp, 'model'), { arch: 'llama', dims: { hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, vocabSize: 300, maxPositions: 128 } });
  source = await openCheckpoint(path.join(tmp, 'model'));
});
afterAll(async () => {
  await source?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

const OPTS = { 'outliers.calib': '4', 'outliers.calibLength': '32', 'outliers.heldOut': '0', 'outliers.mode': 'threshold', 'outliers.tau': '1' };

async function compileQnn(name: string, opts: Record<string, string>) {
  const outDir = path.join(tmp, name);
  const manifest = await compile({ source, target: 'qnn', outDir, passes: ['outliers'], opts: { ...OPTS, ...opts }, tensorTypes: [], progress: silentProgress, note: () => {}, cacheDir: path.join(tmp, 'cache') });
  return { dir: outDir, manifest, rec: findRecord(manifest.passes, OUTLIER_SCALES)! };
}

/** Every initializer of a graph file as bytes (raw, or read from its external data file). */
async function initializers(file: string): Promise<Map<string, { dims: string; dataType: number; bytes: Buffer }>> {
  const m = onnx.ModelProto.decode(await fsp.readFile(file));
  const out = new Map<string, { dims: string; dataType: number; bytes: Buffer }>();
  for (const t of m.graph!.initializer as TensorProto[]) {
    let bytes: Buffer;
    if (t.externalData?.length) {
      const kv = Object.fromEntries(t.externalData.map((e) => [e.key, e.value]));
      const data = await fsp.readFile(path.join(path.dirname(file), kv.location!));
      bytes = data.subarray(Number(kv.offset), Number(kv.offset) + Number(kv.length));
    } else bytes = Buffer.from(onnx.TensorProto.encode({ ...t, name: '', dims: [] }).finish());
    out.set(t.name!, { dims: String(t.dims), dataType: t.dataType!, bytes });
  }
  return out;
}

/** The same initializer's bytes whatever its encoding (raw_data or a typed field). */
const rawOf = (t: TensorProto) => Buffer.from(t.rawData ?? onnx.TensorProto.encode({ ...t, name: '', dims: [] }).finish());

describe('qnn.externalData=true', () => {
  it('same bytes, graphs and logits as the inline artifact; other files byte-identical', async () => {
    const inline = await compileQnn('inline', {});
    const ext = await compileQnn('external', { 'qnn.externalData': 'true' });
    written = ext.manifest.files;
    const graphs = inline.manifest.files.map((f) => f.path).filter((f) => f.endsWith('.onnx'));
    expect(graphs.length).toBeGreaterThan(4);
    const extFiles = new Set(ext.manifest.files.map((f) => f.path));
    for (const g of graphs) expect(extFiles.has(`${g}.data`), g).toBe(true);
    // the other files are the same bytes
    for (const f of inline.manifest.files.filter((f) => !f.path.endsWith('.onnx') && f.path !== 'llmc-manifest.json')) {
      expect(await fsp.readFile(path.join(ext.dir, f.path)), f.path).toEqual(await fsp.readFile(path.join(inline.dir, f.path)));
    }
    let external = 0;
    for (const g of graphs) {
      const a = onnx.ModelProto.decode(await fsp.readFile(path.join(inline.dir, g)));
      const b = onnx.ModelProto.decode(await fsp.readFile(path.join(ext.dir, g)));
      // nodes, inputs and outputs unchanged
      expect(onnx.GraphProto.encode({ ...b.graph!, initializer: [] }).finish(), g).toEqual(onnx.GraphProto.encode({ ...a.graph!, initializer: [] }).finish());
      const tb = new Map((b.graph!.initializer as TensorProto[]).map((t) => [t.name!, t]));
      const fromData = await initializers(path.join(ext.dir, g));
      expect(tb.size).toBe(a.graph!.initializer!.length);
      for (const t of a.graph!.initializer as TensorProto[]) {
        const u = tb.get(t.name!)!;
        expect(String(u.dims), t.name!).toBe(String(t.dims));
        expect(u.dataType).toBe(t.dataType);
        if (u.externalData?.length) {
          external++;
          expect(fromData.get(t.name!)!.bytes.equals(rawOf(t)), `${g}: ${t.name}`).toBe(true);
        } else expect(rawOf(u).equals(rawOf(t)), `${g}: ${t.name}`).toBe(true);
      }
    }
    expect(external).toBeGreaterThan(graphs.length);
    // onnxruntime loads the graphs by path (the data beside them): the same logits, bit for bit
    const ids = Array.from({ length: 40 }, (_, i) => (i * 37 + 5) % 300);
    const logits = async (dir: string, rec: typeof inline.rec) => {
      const r = await QnnRunner.open(dir, rec, { engine: 'onnxruntime' });
      try {
        return await r.logits(ids);
      } finally {
        await r.close();
      }
    };
    const la = await logits(inline.dir, inline.rec);
    const lb = await logits(ext.dir, ext.rec);
    expect(lb.length).toBe(la.length);
    expect(Buffer.from(lb.buffer, lb.byteOffset, lb.byteLength).equals(Buffer.from(la.buffer, la.byteOffset, la.byteLength))).toBe(true);
  }, 60_000);

  it('--dry-run lists the graphs, their data files and the sizes the real compile writes; a bad value is one line, exit 2', async () => {
    const args = ['compile', path.join(tmp, 'model'), '-t', 'qnn', '--passes', 'outliers', ...Object.entries(OPTS).flatMap(([k, v]) => ['--opt', `${k}=${v}`]), '--cache-dir', path.join(tmp, 'cache'), '-o', path.join(tmp, 'dry'), '--json'];
    const dry = await llmcInProcess(...args, '--opt', 'qnn.externalData=true', '--dry-run');
    expect(dry.code, dry.stderr).toBe(0);
    const sizes = (files: { path: string; size?: number; bytes?: number }[]) => Object.fromEntries(files.map((f) => [f.path, f.size ?? f.bytes]));
    const d = sizes(JSON.parse(dry.stdout).files);
    expect(Object.keys(d).some((f) => f.endsWith('.onnx.data'))).toBe(true);
    // the first test's compile with the same options
    expect(d).toEqual(sizes(written!));
    const bad = await llmcInProcess(...args, '--opt', 'qnn.externalData=maybe');
    expect(bad.code).toBe(2);
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
    expect(bad.stderr).toMatch(/qnn\.externalData must be true, false or auto/);
  }, 60_000);
});
