/**
 * `--passes reorder --target cuda`: one graph per elastic level, every one sharing
 * onnx/model.onnx_data where a level's tensor is a prefix of the full model's. Each level graph on
 * onnxruntime gives the TS runtime's logits for that level's widths (an independent executor running
 * the full reordered weights with prefix widths); `llmc run --level` runs the level's graph, and so
 * does transformers.js given its file name.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { AutoModelForCausalLM, env, Tensor } from '@huggingface/transformers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { ELASTIC_LEVELS, findRecord, levelWidths } from '../src/core/records/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { OnnxDecoder } from '../src/exec/engine/decoder-dir.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { llmcInProcess } from './cli.js';
import { relErr } from './numeric.js';

const MODEL = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
let src: Checkpoint;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-cuda-levels-'));
  src = await openCheckpoint(MODEL);
});
afterAll(async () => {
  await src?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

const reorder = { name: 'reorder', options: { importance: 'magnitude', levels: '0.5,0.75,1', evaluate: 'false', recover: 'none' } };
const build = (target: string, quant: string, name: string) =>
  compile({ source: src, target, outDir: path.join(tmp, name), passes: [reorder], quant, progress: silentProgress, note: () => {}, cacheDir: path.join(tmp, 'cache') });

describe('cuda levels', () => {
  it('one graph per level sharing one data file; each gives the TS runtime\'s logits at its widths', async () => {
    const manifest = await build('cuda', 'fp32', 'cuda');
    const ts = await build('ts', 'F32', 'ts');
    const info = manifest.targetInfo as { levels: { id: string; file: string; sharedBytes: number; ownBytes: number; kvHeads: number[] }[]; levelLayouts: { shared: number; separate: number } };
    const record = findRecord(manifest.passes, ELASTIC_LEVELS)!;
    // The 1.0 level keeps every unit: it is onnx/model.onnx.
    expect(info.levels.map((l) => l.id)).toEqual(record.levels.slice(0, 2).map((l) => l.id));
    expect(manifest.files.map((f) => f.path)).toEqual(expect.arrayContaining(['onnx/model.onnx', 'onnx/model.onnx_data', ...info.levels.map((l) => l.file)]));
    expect(info.levelLayouts.shared).toBeLessThan(info.levelLayouts.separate);
    const data = (await fsp.stat(path.join(tmp, 'cuda/onnx/model.onnx_data'))).size;
    const graphs = await Promise.all(['onnx/model.onnx', ...info.levels.map((l) => l.file)].map(async (f) => (await fsp.stat(path.join(tmp, 'cuda', f))).size));
    expect(info.levelLayouts.shared).toBe(data + graphs.reduce((a, b) => a + b, 0));

    const model = await loadDir(path.join(tmp, 'ts'));
    const ids = [1, 461, 461, 401, 401, 401, 461, 378];
    for (const lv of info.levels) {
      const level = record.levels.find((l) => l.id === lv.id)!;
      // Float weights: every level tensor is a prefix of the full model's.
      expect(lv.ownBytes).toBe(0);
      expect(lv.sharedBytes).toBeGreaterThan(0);
      expect(lv.kvHeads).toEqual(level.layers.map((L) => L.kvGroups));
      const expected = model.forward(ids, model.newCache(), { widths: levelWidths(level) });
      const d = await OnnxDecoder.open(path.join(tmp, 'cuda', lv.file));
      try {
        expect(relErr(await d.logits(ids), expected)).toBeLessThan(1e-5);
      } finally {
        await d.close();
      }
    }
    // llmc run --level runs the level's graph.
    const lv = info.levels[0];
    const d = await OnnxDecoder.open(path.join(tmp, 'cuda', lv.file));
    const direct = await d.generate([1], { maxTokens: 12, stopIds: [] });
    await d.close();
    const run = await llmcInProcess('run', path.join(tmp, 'cuda'), '--prompt-ids', '1', '-n', '12', '--level', lv.id, '--json');
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout).generated_ids.slice(0, direct.length)).toEqual(direct);
    // transformers.js loads a level's graph by file name; its data comes from the shared file.
    env.allowRemoteModels = false;
    env.localModelPath = tmp;
    const tjs = await AutoModelForCausalLM.from_pretrained('cuda', { local_files_only: true, device: 'cpu', model_file_name: path.basename(lv.file, '.onnx') });
    try {
      const out = (await tjs.generate({ input_ids: new Tensor('int64', BigInt64Array.from([1n]), [1, 1]), attention_mask: new Tensor('int64', BigInt64Array.from([1n]), [1, 1]), max_new_tokens: 12, min_new_tokens: 12, do_sample: false })) as Tensor;
      expect(Array.from(out.data as BigInt64Array, Number).slice(1)).toEqual(direct);
    } finally {
      await tjs.dispose();
    }
  });

  it('int8 levels: row-sliced weights and per-row scales are shared, the others appended; all run', async () => {
    const manifest = await build('cuda', 'int8', 'cuda-int8');
    const info = manifest.targetInfo as { levels: { id: string; file: string; sharedBytes: number; ownBytes: number }[]; levelLayouts: { shared: number; separate: number; saved: number } };
    expect(info.levelLayouts.saved).toBeGreaterThan(0);
    const ids = [1, 461, 461, 401];
    const full = await OnnxDecoder.open(path.join(tmp, 'cuda-int8/onnx/model.onnx'));
    const V = 512;
    expect((await full.logits(ids)).length).toBe(ids.length * V);
    await full.close();
    for (const lv of info.levels) {
      expect(lv.sharedBytes).toBeGreaterThan(0);
      const f32 = await OnnxDecoder.open(path.join(tmp, 'cuda', lv.file));
      const q = await OnnxDecoder.open(path.join(tmp, 'cuda-int8', lv.file));
      expect(relErr(await q.logits(ids), await f32.logits(ids))).toBeLessThan(0.2);
      await f32.close();
      await q.close();
    }
  });
});
