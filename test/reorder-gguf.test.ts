/**
 * `--target gguf-levels` after `--passes reorder`: one GGUF per level, each loading in real
 * llama.cpp (node-llama-cpp). The full level reproduces the reference ids; a sub-level's logits
 * match the ORIGINAL model with the dropped units masked, run on onnxruntime (independent engine).
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { compile } from '../src/app/compile/compile.js';
import { Engine } from '../src/exec/engine/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import type { ReorderMetadata } from '../passes/reorder/analyze.js';
import { levelMasks, maskSource } from '../passes/reorder/masks.js';
import { llmcInProcess } from './cli.js';
import { llamaGreedy, llamaLogits, relRms, STORIES } from './gguf-helpers.js';

const PROMPT = [1, 461, 461, 401, 401, 401, 461, 378, 455, 473, 456, 435];
let tmp: string;
let src: Checkpoint;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-reorder-gguf-'));
  src = await openCheckpoint(STORIES);
});
afterAll(async () => {
  await src?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

describe('gguf-levels target', () => {
  it('writes one loadable GGUF per level; full = reference ids, sub-level = masked original', async () => {
    const out = path.join(tmp, 'out');
    const manifest = await compile({
      source: src,
      target: 'gguf-levels',
      outDir: out,
      passes: [{ name: 'reorder', options: { importance: 'activation', levels: '0.5,0.75,1', evaluate: 'false', recover: 'none' } }],
      quant: 'F32',
      progress: silentProgress,
      note: () => {},
      cacheDir: path.join(tmp, 'cache'),
    });
    const md = manifest.passes[0].metadata as unknown as ReorderMetadata;
    expect(md.anchors).toEqual([]);
    expect(manifest.files.map((f) => f.path)).toEqual(md.levels.map((l) => `${l.id}/model.gguf`));
    const ref = JSON.parse(await fsp.readFile(path.join(STORIES, 'reference.json'), 'utf8')).greedy_ids as number[];
    const full = md.levels.at(-1)!;
    expect(await llamaGreedy(path.join(out, full.id, 'model.gguf'), [1], 20)).toEqual(ref.slice(0, 20));
    const V = src.spec.vocabSize;
    const fullE = await Engine.open(src);
    const fullFlat = await fullE.logits(PROMPT);
    await fullE.close();
    const fullRows = PROMPT.map((_, t) => fullFlat.slice(t * V, (t + 1) * V));
    // Baseline: llama.cpp (f16 KV cache) vs onnxruntime on the unsliced model.
    const base = relRms(await llamaLogits(path.join(out, full.id, 'model.gguf'), PROMPT, V), fullRows);
    expect(base).toBeLessThan(3e-3);
    for (const lv of md.levels.slice(0, -1)) {
      const got = await llamaLogits(path.join(out, lv.id, 'model.gguf'), PROMPT, V);
      const e = await Engine.open(maskSource(src, levelMasks(src.spec, md.orders, lv.layers), lv.id));
      try {
        const flat = await e.logits(PROMPT);
        const want = PROMPT.map((_, t) => flat.slice(t * V, (t + 1) * V));
        const d = relRms(got, want);
        console.log(`gguf ${lv.id}: relRms vs masked original ${d.toExponential(2)} (full-model baseline ${base.toExponential(2)})`);
        expect(d).toBeLessThan(3e-3);
        // Not vacuous: the full model differs.
        expect(relRms(got, fullRows)).toBeGreaterThan(1e-2);
        // The level's file alone (no manifest beside it) is a GGUF llmc inspects and runs as the level.
        const file = path.join(out, lv.id, 'model.gguf');
        const alone = await llmcInProcess('run', file, '--prompt-ids', '1', '-n', '8', '--json');
        const asLevel = await llmcInProcess('run', out, '--level', lv.id, '--prompt-ids', '1', '-n', '8', '--json');
        expect(alone.code, alone.stderr).toBe(0);
        expect(JSON.parse(alone.stdout).generated_ids).toEqual(JSON.parse(asLevel.stdout).generated_ids);
        const inspected = await llmcInProcess('inspect', file, '--json');
        expect(inspected.code, inspected.stderr).toBe(0);
        expect(JSON.parse(inspected.stdout).spec).toMatchObject({ numHeads: lv.layers[0].heads, intermediateSize: lv.layers[0].ffn, hiddenSize: src.spec.hiddenSize });
      } finally {
        await e.close();
      }
    }
  });
});
