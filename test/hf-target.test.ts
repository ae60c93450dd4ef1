/**
 * `--target hf` after `--passes reorder`: a loadable Hugging Face dir whose model reproduces the
 * reference greedy ids, whose manifest carries the elastic levels, and which is byte-identical
 * across runs; other targets accept it as input.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { numel } from '../src/core/checkpoint/safetensors.js';
import { compile } from '../src/app/compile/compile.js';
import { Engine } from '../src/exec/engine/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { loadDir } from '../src/exec/runtime/node.js';
import type { ReorderMetadata } from '../passes/reorder/analyze.js';
import { permuteSource } from '../passes/reorder/permute.js';
import { sliceSource } from '../src/core/pipeline/elastic.js';

const MODEL = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
let src: Checkpoint;

async function compileTo(out: string, cacheDir: string, target = 'hf', from: Checkpoint = src, passes = true) {
  return compile({
    source: from,
    target,
    outDir: out,
    passes: passes ? [{ name: 'reorder', options: { importance: 'magnitude', levels: '0.5,0.75,1', evaluate: 'false', recover: 'none' } }] : [],
    ...(target === 'ts' ? { quant: 'F32' } : {}),
    progress: silentProgress,
    note: () => {},
    cacheDir,
  });
}

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-hf-'));
  src = await openCheckpoint(MODEL);
});
afterAll(async () => {
  await src?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

describe('hf target', () => {
  it('writes a reordered checkpoint that reproduces the reference ids, deterministically', async () => {
    const a = path.join(tmp, 'a');
    const b = path.join(tmp, 'b');
    const manifest = await compileTo(a, path.join(tmp, 'cache-a'));
    await compileTo(b, path.join(tmp, 'cache-b')); // independent caches: everything recomputed
    // The full level is the root checkpoint; the 50% and 75% levels are checkpoints of their own.
    expect(manifest.files.map((f) => f.path)).toEqual(['config.json', 'levels/L0/config.json', 'levels/L0/model.safetensors', 'levels/L1/config.json', 'levels/L1/model.safetensors', 'model.safetensors']);
    for (const f of ['llmc-manifest.json', 'model.safetensors', 'config.json', 'levels/L0/model.safetensors']) {
      expect((await fsp.readFile(path.join(a, f))).equals(await fsp.readFile(path.join(b, f)))).toBe(true);
    }
    const out = await openCheckpoint(a);
    try {
      // Really reordered: some weights moved.
      const name = 'model.layers.1.mlp.down_proj.weight';
      expect(Buffer.from((await out.readF32(name)).buffer).equals(Buffer.from((await src.readF32(name)).buffer))).toBe(false);
      const ref = JSON.parse(await fsp.readFile(path.join(MODEL, 'reference.json'), 'utf8')).greedy_ids as number[];
      const e = await Engine.open(out);
      try {
        expect(await e.generate([1], { maxTokens: ref.length, stopIds: [] })).toEqual(ref);
      } finally {
        await e.close();
      }
    } finally {
      await out.close();
    }
  });

  it('the manifest carries per-level, per-layer metadata that matches the sliced tensors', async () => {
    const m = JSON.parse(await fsp.readFile(path.join(tmp, 'a', 'llmc-manifest.json'), 'utf8'));
    const md = m.passes[0].metadata as ReorderMetadata;
    expect(m.passes[0].name).toBe('reorder');
    expect(md.levels.map((l) => l.nominal)).toEqual([0.5, 0.75, 1]);
    const spec = src.spec;
    const reordered = permuteSource(src, md.orders);
    let prev: ReorderMetadata['levels'][number] | undefined;
    for (const lv of md.levels) {
      expect(lv.layers).toHaveLength(spec.numLayers);
      for (const L of lv.layers) {
        for (const k of ['kvGroups', 'qHeadsPerGroup', 'heads', 'ffn', 'params'] as const) expect(typeof L[k]).toBe('number');
        if (md.anchors.includes(L.layer)) expect([L.kvGroups, L.ffn]).toEqual([spec.numKvHeads, spec.intermediateSize]);
        if (prev) expect(L.ffn).toBeGreaterThanOrEqual(prev.layers[L.layer].ffn); // nested
      }
      expect(lv.paramFrac).toBeLessThanOrEqual(lv.nominal + 1e-9);
      for (const c of ['128', '512', '2048']) expect(lv.flopsPerToken[c]).toBeGreaterThan(0);
      // Parameter count recomputed from the sliced model's tensor shapes.
      const sliced = sliceSource(reordered, lv.layers, lv.id);
      const fromShapes = sliced.tensors.reduce((a, t) => a + numel(sliced.meta(t.name)!.shape), 0);
      expect(lv.params).toBe(fromShapes);
      // f16 KV cache: 2 (K and V) × kvGroups × headDim × 2 bytes, summed over layers.
      expect(lv.kvBytesPerToken).toBe(lv.layers.reduce((a, L) => a + 4 * L.kvGroups * spec.headDim, 0));
      prev = lv;
    }
    expect(md.levels.at(-1)!.params).toBe(src.tensors.reduce((a, t) => a + numel(t.shape), 0));
    // Each level's checkpoint has exactly the level's parameters, and transformers' config of its widths.
    for (const lv of md.levels.slice(0, -1)) {
      const level = await openCheckpoint(path.join(tmp, 'a', 'levels', lv.id));
      try {
        expect(level.tensors.reduce((a, t) => a + numel(t.shape), 0)).toBe(lv.params);
        expect(level.spec).toMatchObject({ numKvHeads: lv.layers[0].kvGroups, numHeads: lv.layers[0].heads, intermediateSize: lv.layers[0].ffn, headDim: spec.headDim });
      } finally {
        await level.close();
      }
    }
  });

  it('llmc run --level runs the level\'s checkpoint: the same ids as onnxruntime on that folder; the levels table reports the bytes written', async () => {
    const a = path.join(tmp, 'a');
    const { llmcInProcess } = await import('./cli.js');
    const r = await llmcInProcess('run', a, '--level', '0.5', '--prompt-ids', '1', '-n', '12', '--json');
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout);
    const level = await openCheckpoint(path.join(a, 'levels', 'L0'));
    const e = await Engine.open(level);
    try {
      expect(out.generated_ids).toEqual(await e.generate([1], { maxTokens: 12, stopIds: [] }));
    } finally {
      await e.close();
      await level.close();
    }
    expect(out.level.id).toBe('L0');
    const { levelRows } = await import('../src/app/cli/levels.js');
    const rows = levelRows(JSON.parse(await fsp.readFile(path.join(a, 'llmc-manifest.json'), 'utf8')))!.rows;
    expect(rows.map((x) => [x.bytes, x.bytesExact])).toEqual([
      [(await fsp.stat(path.join(a, 'levels', 'L0', 'model.safetensors'))).size, true],
      [(await fsp.stat(path.join(a, 'levels', 'L1', 'model.safetensors'))).size, true],
      [(await fsp.stat(path.join(a, 'model.safetensors'))).size, true],
    ]);
  });

  it('other targets accept the hf output as input', async () => {
    const hf = await openCheckpoint(path.join(tmp, 'a'));
    try {
      const m = await compileTo(path.join(tmp, 'ts'), path.join(tmp, 'cache-a'), 'ts', hf, false);
      expect(m.files.length).toBeGreaterThan(0);
      expect(m.source.sha256).toBe(await hf.identity());
      // And the artifact works: the TS runtime on it reproduces the reference ids.
      const ref = JSON.parse(await fsp.readFile(path.join(MODEL, 'reference.json'), 'utf8')).greedy_ids as number[];
      const model = await loadDir(path.join(tmp, 'ts'));
      const ids: number[] = [];
      for await (const id of model.generate([1], { maxTokens: ref.length, stopTokens: [] })) ids.push(id);
      expect(ids).toEqual(ref);
    } finally {
      await hf.close();
    }
  });
});
