/**
 * `--target gguf-levels` with `reorder.widths=search`: levels with per-layer widths are written as
 * llama.cpp's `deci` arch (per-layer head_count / head_count_kv / feed_forward_length arrays) and run
 * in real llama.cpp (node-llama-cpp); each level's logits match the ORIGINAL model with the level's
 * dropped units masked, run on onnxruntime (an independent engine).
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
import { readGgufHeader } from '../backends/gguf/read.js';
import { uniformWidth } from '../src/core/pipeline/elastic.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { llmcInProcess } from './cli.js';
import { llamaLogits, relRms, STORIES } from './gguf-helpers.js';

const PROMPT = [1, 461, 461, 401, 401, 401, 461, 378, 455, 473, 456, 435];
let tmp: string;
let src: Checkpoint;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-reorder-deci-'));
  src = await openCheckpoint(STORIES);
});
afterAll(async () => {
  await src?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

describe('gguf-levels with per-layer widths (llama.cpp deci)', () => {
  it('writes deci levels whose llama.cpp logits equal the masked original', async () => {
    const out = path.join(tmp, 'out');
    const manifest = await compile({
      source: src,
      target: 'gguf-levels',
      outDir: out,
      passes: [{ name: 'reorder', options: { importance: 'activation', widths: 'search', searchPoints: '4', levels: '0.5,1', evaluate: 'false', recover: 'none' } }],
      quant: 'F32',
      progress: silentProgress,
      note: () => {},
      cacheDir: path.join(tmp, 'cache'),
    });
    const md = manifest.passes[0].metadata as unknown as ReorderMetadata;
    const info = manifest.targetInfo as { widths: string; levels: { id: string; arch?: string; layers?: { heads: number }[] }[] };
    expect(info.widths).toBe('per-layer');
    const V = src.spec.vocabSize;
    const full = md.levels.at(-1)!;
    const fullHeader = await readGgufHeader(path.join(out, full.id, 'model.gguf'));
    expect(fullHeader.metadata.get('general.architecture')).toBe('llama'); // every layer at full width: the model's own arch
    const fullE = await Engine.open(src);
    const fullFlat = await fullE.logits(PROMPT);
    await fullE.close();
    const fullRows = PROMPT.map((_, t) => fullFlat.slice(t * V, (t + 1) * V));
    for (const lv of md.levels.slice(0, -1)) {
      expect(uniformWidth(lv.layers), `${lv.id} has per-layer widths`).toBeNull(); // not vacuous
      const file = path.join(out, lv.id, 'model.gguf');
      const h = await readGgufHeader(file);
      expect(h.metadata.get('general.architecture')).toBe('deci');
      expect(h.metadata.get('deci.attention.head_count')).toEqual(lv.layers.map((w) => w.heads));
      expect(h.metadata.get('deci.attention.head_count_kv')).toEqual(lv.layers.map((w) => w.kvGroups));
      expect(h.metadata.get('deci.feed_forward_length')).toEqual(lv.layers.map((w) => w.ffn));
      expect(info.levels.find((l) => l.id === lv.id)?.arch).toBe('deci');
      const got = await llamaLogits(file, PROMPT, V);
      const e = await Engine.open(maskSource(src, levelMasks(src.spec, md.orders, lv.layers), lv.id));
      try {
        const flat = await e.logits(PROMPT);
        const want = PROMPT.map((_, t) => flat.slice(t * V, (t + 1) * V));
        expect(relRms(got, want)).toBeLessThan(3e-3);
        expect(relRms(got, fullRows)).toBeGreaterThan(1e-2);
      } finally {
        await e.close();
      }
    }
    // The artifact runs a deci level through --level; the file alone is refused by llmc's own reader in one line.
    const asLevel = await llmcInProcess('run', out, '--level', md.levels[0].id, '--prompt-ids', '1', '-n', '4', '--json');
    expect(asLevel.code, asLevel.stderr).toBe(0);
    const alone = await llmcInProcess('run', path.join(out, md.levels[0].id, 'model.gguf'), '--prompt-ids', '1', '-n', '4');
    expect(alone.code).toBe(1);
    expect(alone.stderr.trim().split('\n')).toHaveLength(1);
    expect(alone.stderr).toMatch(/"deci".*llama-cli/);
  });

  it('a LoRA-recovered per-layer level: llama.cpp runs the deci file (adapters merged) with the TS runtime\'s logits (level + adapters)', async () => {
    const options = { importance: 'activation', widths: 'search', searchPoints: '4', levels: '0.5,1', evaluate: 'false', recover: 'lora', recoverSteps: '6', recoverData: '16', recoverBatch: '4', recoverLr: '1e-2' };
    const build = (target: string, out: string) =>
      compile({ source: src, target, outDir: out, passes: [{ name: 'reorder', options }], quant: 'F32', progress: silentProgress, note: () => {}, cacheDir: path.join(tmp, 'cache') });
    const g = await build('gguf-levels', path.join(tmp, 'rec-gguf'));
    await build('ts', path.join(tmp, 'rec-ts'));
    const lv = (g.passes[0].metadata as unknown as ReorderMetadata).levels[0];
    expect(uniformWidth(lv.layers)).toBeNull();
    expect(lv.adapters?.tensors).toBeGreaterThan(0);
    const model = await loadDir(path.join(tmp, 'rec-ts'));
    const V = src.spec.vocabSize;
    const got = await llamaLogits(path.join(tmp, 'rec-gguf', lv.id, 'model.gguf'), PROMPT, V);
    const flat = model.forward(PROMPT, model.newCache(), model.level(lv.id));
    const want = PROMPT.map((_, t) => flat.slice(t * V, (t + 1) * V));
    expect(relRms(got, want)).toBeLessThan(3e-3);
    const plain = model.forward(PROMPT, model.newCache(), { widths: model.level(lv.id).widths });
    expect(relRms(got, PROMPT.map((_, t) => plain.slice(t * V, (t + 1) * V)))).toBeGreaterThan(1e-3); // the adapters are in the file
  });

  it('refuses per-layer levels of a family llama.cpp has no per-layer form for, before writing', async () => {
    const { deciRefusal } = await import('../backends/gguf/deci.js');
    const { archOf } = await import('../src/core/arch/registry.js');
    expect(deciRefusal(src.spec, archOf(src.spec).gguf)).toBeNull();
    expect(deciRefusal({ ...src.spec, qkNorm: { scope: 'head' } } as typeof src.spec, archOf(src.spec).gguf)).toMatch(/q\/k norms/);
    expect(deciRefusal(src.spec, { ...archOf(src.spec).gguf, arch: 'qwen2' })).toMatch(/qwen2 has one head count/);
  });
});
