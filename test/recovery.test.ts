/**
 * Recovery of elastic levels (reorder.recover=lora): LoRA adapters per level, distilled from the full
 * model with the tfjs lowering, carried by every target that writes levels. Checked against
 * independent executors: the TS runtime reproduces the record's held-out perplexities (measured in
 * tfjs), llama.cpp runs gguf-levels' merged files with the runtime's logits, and the hf target's PEFT
 * adapter, merged into its own checkpoint with the level's units masked, runs to the same logits on
 * onnxruntime. Short training here (the quality bars are bench/recovery.bench.ts).
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { SafetensorsFile, toF32 } from '../src/core/checkpoint/safetensors.js';
import { compile } from '../src/app/compile/compile.js';
import { calibrationSet, textFileSpec, trainingSet } from '../src/measure/calibration.js';
import { generateFixture } from '../fixtures/generate.js';
import { loadTokenizer } from '../src/core/tokenizer/index.js';
import { Engine } from '../src/exec/engine/index.js';
import { loadDir } from '../src/exec/runtime/node.js';
import type { Model } from '../src/exec/runtime/model.js';
import { silentProgress } from '../src/core/util/progress.js';
import { ELASTIC_LEVELS, findRecord, type ElasticLevels, type Manifest } from '../src/core/records/index.js';
import { transformSource } from '../src/core/checkpoint/source.js';
import { mergeLowRank } from '../src/core/util/lowrank.js';
import { levelMasks, maskSource } from '../passes/reorder/masks.js';
import { parseReorderOptions } from '../passes/reorder/options.js';
import { autoSteps, recoverSettings } from '../passes/reorder/recover.js';
import { TfModel } from '../src/exec/autodiff/lower.js';
import { tf } from '../src/exec/autodiff/tf.js';
import { Rng } from '../src/core/util/rng.js';
import { llamaLogits, relRms, STORIES } from './gguf-helpers.js';
import { relErr } from './numeric.js';
import { llmcInProcess } from './cli.js';
import { ensureBuilt } from './build-once.js';
import { execFile } from 'node:child_process';

const ROOT = path.resolve(__dirname, '..');

const PROMPT = [1, 461, 461, 401, 401, 401, 461, 378, 455, 473, 456, 435];
/** Short training: enough to move every level a long way, small enough for the suite. */
const RECOVER = { importance: 'activation', levels: '0.5,1', recoverSteps: '30', recoverData: '32', recoverBatch: '4', recoverLr: '1e-2' };
let tmp: string;
let cache: string;
let src: Checkpoint;
let tsManifest: Manifest;
let record: ElasticLevels;

const build = (target: string, out: string, options: Record<string, string>, quant = 'F32') =>
  compile({ source: src, target, outDir: out, passes: [{ name: 'reorder', options }], quant, progress: silentProgress, note: () => {}, cacheDir: cache });

/** Held-out perplexity of a runtime model at a level (teacher-forced over whole sequences). */
function runtimePpl(model: Model, seqs: number[][], run: Parameters<Model['forward']>[2]): number {
  const V = model.spec.vocabSize;
  let nll = 0;
  let n = 0;
  for (const s of seqs) {
    const logits = model.forward(s, model.newCache(), run);
    for (let t = 0; t + 1 < s.length; t++) {
      const row = logits.subarray(t * V, (t + 1) * V);
      let max = -Infinity;
      for (const v of row) max = Math.max(max, v);
      let sum = 0;
      for (const v of row) sum += Math.exp(v - max);
      nll += Math.log(sum) + max - row[s[t + 1]];
      n++;
    }
  }
  return Math.exp(nll / n);
}

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-recovery-'));
  cache = path.join(tmp, 'cache');
  src = await openCheckpoint(STORIES);
  tsManifest = await build('ts', path.join(tmp, 'ts'), RECOVER);
  record = findRecord(tsManifest.passes, ELASTIC_LEVELS)!;
}, 240_000);
afterAll(async () => {
  await src?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

describe('LoRA in the tfjs lowering', () => {
  it('gradients of the low-rank terms equal finite differences of the loss', async () => {
    const model = await TfModel.load(src);
    try {
      const rng = new Rng(3);
      const seq = [[1, 461, 401, 378, 455, 473, 456, 435]];
      const names = ['model.layers.1.self_attn.q_proj.weight', 'model.layers.3.mlp.down_proj.weight'];
      const shapes = names.map((n) => src.meta(n)!.shape);
      const r = 2;
      const init = shapes.flatMap(([out, inF]) => [
        Float32Array.from({ length: inF * r }, () => rng.normal() * 0.3),
        Float32Array.from({ length: r * out }, () => rng.normal() * 0.3),
      ]);
      const lossOf = (ps: tf.Tensor[]) =>
        model.loss(seq, { lowRank: new Map(names.map((n, i) => [n, { at: ps[2 * i] as tf.Tensor2D, bt: ps[2 * i + 1] as tf.Tensor2D, scale: 1.5 }])) });
      const tensors = init.map((p, i) => tf.tensor2d(p, i % 2 ? [r, shapes[i >> 1][0]] : [shapes[i >> 1][1], r]));
      const grads = tf.grads((...ps: tf.Tensor[]) => lossOf(ps))(tensors);
      // Directional derivative along a random direction: analytic (Σ g·d) vs central difference.
      const dirs = init.map((p) => Float32Array.from(p, () => rng.normal()));
      let analytic = 0;
      for (let i = 0; i < grads.length; i++) {
        const g = grads[i].dataSync();
        for (let k = 0; k < g.length; k++) analytic += g[k] * dirs[i][k];
      }
      const at = (eps: number) => {
        const ps = init.map((p, i) => tf.tensor2d(Float32Array.from(p, (v, k) => v + eps * dirs[i][k]), tensors[i].shape as [number, number]));
        const v = lossOf(ps).dataSync()[0];
        tf.dispose(ps);
        return v;
      };
      // Central differences, Richardson-extrapolated (cancels the h² term; f32 noise stays far below).
      const central = (h: number) => (at(h) - at(-h)) / (2 * h);
      const numeric = (4 * central(1e-3) - central(2e-3)) / 3;
      tf.dispose([...tensors, ...grads]);
      expect(Math.abs(analytic)).toBeGreaterThan(1e-2); // not vacuous
      expect(Math.abs(analytic - numeric) / Math.abs(numeric)).toBeLessThan(2e-3);
    } finally {
      model.dispose();
    }
  });
});

describe('recovery in the reorder pass', () => {
  it('records each level before and after; recovery lowers perplexity and raises agreement', () => {
    expect(record.format).toBe('elastic-prefix/2');
    expect(record.recovery).toMatchObject({ method: 'lora', rank: 8, alpha: 16, steps: 30, batch: 4 });
    expect(record.recovery!.method === 'lora' && record.recovery!.targets).toEqual(['o_proj', 'down_proj']);
    const [half, full] = record.levels;
    expect(full.unrecovered).toBeUndefined();
    expect(full.heldOutPpl).toBeCloseTo(record.heldOutPpl!, 6);
    expect(half.unrecovered!.heldOutPpl).toBeGreaterThan(1000); // the reordering alone
    expect(half.heldOutPpl!).toBeLessThan(half.unrecovered!.heldOutPpl / 4);
    expect(half.heldOutPpl!).toBeLessThan(src.spec.vocabSize);
    expect(half.adapters).toMatchObject({ rank: 8, tensors: 20 });
  });

  it('trains on data disjoint from the held-out set (self-generated and text)', async () => {
    const c = record.calibration;
    const calib = await calibrationSet(src, { source: c.source, count: c.count, length: c.length, seed: c.seed, heldOut: c.heldOut }, { cacheDir: cache });
    const train = await trainingSet(src, calib, 32, 42, { cacheDir: cache });
    expect(train.seqs).toHaveLength(32);
    const held = new Set(calib.heldOut.map((s) => s.join(',')));
    expect(train.seqs.some((s) => held.has(s.join(',')))).toBe(false);
    // Text: the calibration windows, then the windows after the held-out ones.
    const dir = path.join(tmp, 'text-model');
    await generateFixture(dir, { arch: 'llama', seed: 5, tokenizer: 'sentencepiece' });
    const m = await openCheckpoint(dir);
    try {
      const text = path.join(tmp, 'story.txt');
      const TEXT = Array.from({ length: 40 }, (_, i) => `Once upon a time, story number ${i} began with a small red fox who liked to run.`).join('\n');
      await fsp.writeFile(text, TEXT);
      const tcal = await calibrationSet(m, { source: await textFileSpec(text), count: 2, length: 16, seed: 0, heldOut: 2 }, { cacheDir: cache });
      const ttrain = await trainingSet(m, tcal, 5, 42, { cacheDir: cache });
      const tok = loadTokenizer(m.assets.tokenizer!, m.assets.tokenizerConfig);
      const enc = tok.encode(TEXT);
      const ids = enc[0] === m.spec.bosTokenId ? enc : [m.spec.bosTokenId!, ...enc];
      const window = (k: number) => ids.slice(k * 16, (k + 1) * 16);
      expect(ttrain.seqs).toEqual([0, 1, 4, 5, 6].map(window));
    } finally {
      await m.close();
    }
  });

  it('the TS runtime reproduces the record: held-out perplexity with and without the adapters', async () => {
    const model = await loadDir(path.join(tmp, 'ts'));
    const c = record.calibration;
    const calib = await calibrationSet(src, { source: c.source, count: c.count, length: c.length, seed: c.seed, heldOut: c.heldOut }, { cacheDir: cache });
    const run = model.level('0.5');
    expect(run.adapters?.size).toBe(10); // o and down of five layers
    const withAdapters = runtimePpl(model, calib.heldOut, { widths: run.widths, adapters: run.adapters });
    const without = runtimePpl(model, calib.heldOut, { widths: run.widths });
    expect(Math.abs(withAdapters / run.level.heldOutPpl! - 1)).toBeLessThan(1e-3);
    expect(Math.abs(without / run.level.unrecovered!.heldOutPpl - 1)).toBeLessThan(1e-3);
  });

  it('merging the adapters into the level slice at load gives the low-rank terms\' logits', async () => {
    const model = await loadDir(path.join(tmp, 'ts'));
    const merged = await loadDir(path.join(tmp, 'ts'), { mergeLevel: '0.5' });
    const run = model.level('0.5');
    const a = model.forward(PROMPT, model.newCache(), run);
    const b = merged.forward(PROMPT, merged.newCache(), merged.level('0.5'));
    expect(relErr(b, a)).toBeLessThan(1e-5);
    expect(relErr(model.forward(PROMPT, model.newCache(), { widths: run.widths }), a)).toBeGreaterThan(1e-2); // the adapters matter
    expect(() => merged.level('1')).toThrow(/merged/);
    expect(() => merged.forward(PROMPT)).toThrow(/merged/);
  });

  it('gguf-levels: llama.cpp runs each merged level file with the runtime\'s logits (level + adapters)', async () => {
    const m = await build('gguf-levels', path.join(tmp, 'gguf'), RECOVER);
    const ts = await build('ts', path.join(tmp, 'ts-uniform'), { ...RECOVER, anchors: '0' });
    const rec = findRecord(m.passes, ELASTIC_LEVELS)!;
    expect(rec.levels.map((l) => l.layers)).toEqual(findRecord(ts.passes, ELASTIC_LEVELS)!.levels.map((l) => l.layers));
    const model = await loadDir(path.join(tmp, 'ts-uniform'));
    const V = src.spec.vocabSize;
    const lv = rec.levels[0];
    const got = await llamaLogits(path.join(tmp, 'gguf', lv.id, 'model.gguf'), PROMPT, V);
    const flat = model.forward(PROMPT, model.newCache(), model.level(lv.id));
    const want = PROMPT.map((_, t) => flat.slice(t * V, (t + 1) * V));
    const plain = model.forward(PROMPT, model.newCache(), { widths: model.level(lv.id).widths });
    expect(relRms(got, want)).toBeLessThan(3e-3);
    expect(relRms(got, PROMPT.map((_, t) => plain.slice(t * V, (t + 1) * V)))).toBeGreaterThan(3e-2); // adapters merged, not dropped
  });

  it('hf: each level is a checkpoint of its own (sliced config, adapters merged); onnxruntime on it = the TS runtime\'s level with its adapters; the root stays the full model', async () => {
    const out = path.join(tmp, 'hf');
    const m = await build('hf', out, RECOVER, 'F32');
    const rec = findRecord(m.passes, ELASTIC_LEVELS)!;
    expect(rec.anchors).toEqual([]); // hf asks for uniform widths
    const lv = rec.levels[0];
    expect(m.files.map((f) => f.path)).toEqual(expect.arrayContaining([`levels/${lv.id}/model.safetensors`, `levels/${lv.id}/config.json`]));
    expect(m.files.some((f) => f.path.startsWith('levels/L1/') || f.path.startsWith('adapters/'))).toBe(false); // the full level is the root
    const w = lv.layers[0];
    const config = JSON.parse(await fsp.readFile(path.join(out, 'levels', lv.id, 'config.json'), 'utf8'));
    expect(config).toMatchObject({ model_type: 'llama', num_attention_heads: w.kvGroups * w.qHeadsPerGroup, num_key_value_heads: w.kvGroups, intermediate_size: w.ffn, head_dim: 8 });
    const st = await SafetensorsFile.open(path.join(out, 'levels', lv.id, 'model.safetensors'));
    expect(st.tensors.get('model.layers.0.mlp.down_proj.weight')).toMatchObject({ dtype: 'F32', shape: [64, w.ffn] });
    expect(st.tensors.get('model.layers.0.self_attn.k_proj.weight')).toMatchObject({ shape: [w.kvGroups * 8, 64] });
    await st.close();
    // The bytes the levels table reports are the level's file.
    expect(m.files.find((f) => f.path === `levels/${lv.id}/model.safetensors`)!.size).toBe((await fsp.stat(path.join(out, 'levels', lv.id, 'model.safetensors'))).size);
    // The same levels and adapters as a ts build with uniform widths (anchors 0): the level's checkpoint on
    // onnxruntime (adapters merged) = the TS runtime's level (adapters as low-rank terms).
    const uniform = path.join(tmp, 'ts-uniform');
    if (!(await fsp.stat(path.join(uniform, 'llmc-manifest.json')).catch(() => null))) await build('ts', uniform, { ...RECOVER, anchors: '0' });
    const ts = await loadDir(uniform);
    const level = await openCheckpoint(path.join(out, 'levels', lv.id));
    const root = await openCheckpoint(out);
    const e = await Engine.open(level);
    const full = await Engine.open(root);
    try {
      expect(relErr(await e.logits(PROMPT), ts.forward(PROMPT, ts.newCache(), ts.level(lv.id)))).toBeLessThan(1e-4);
      // The root checkpoint is the full model, untouched by any level's adapters.
      expect(relErr(await full.logits(PROMPT), ts.forward(PROMPT, ts.newCache()))).toBeLessThan(1e-4);
    } finally {
      await e.close();
      await full.close();
      await level.close();
      await root.close();
    }
  });
});

describe('determinism', () => {
  it('the artifact is the same bytes whether levels train on worker threads (CLI, compiled) or in one thread', async () => {
    ensureBuilt();
    // Three trained levels: two chains, the smallest level starting from its neighbour's adapters.
    const opts = { importance: 'activation', levels: '0.4,0.5,0.75,1', recoverSteps: '8', recoverData: '16', recoverBatch: '4' };
    const flags = Object.entries(opts).flatMap(([k, v]) => ['--opt', `reorder.${k}=${v}`]);
    const cli = path.join(tmp, 'det-cli');
    // Asynchronously: a synchronous child blocks this worker past vitest's RPC timeout on a loaded machine.
    const r = await new Promise<{ status: number | null; stderr: string }>((resolve) => {
      const child = execFile('node', [path.join(ROOT, 'bin/llmc.js'), 'compile', STORIES, '--target', 'ts', '-q', 'F32', '--passes', 'reorder', ...flags, '--opt', 'reorder.recoverThreads=2', '--no-eval', '--cache-dir', path.join(tmp, 'det-cache-1'), '-o', cli], { encoding: 'utf8' }, (_err, _out, stderr) =>
        resolve({ status: child.exitCode, stderr }),
      );
    });
    expect(r.status, r.stderr).toBe(0);
    // The same measurements and training data (cached), the levels trained again in this thread.
    const detCache = path.join(tmp, 'det-cache-1');
    for (const f of await fsp.readdir(detCache)) if (f.startsWith('level-recovery-')) await fsp.rm(path.join(detCache, f));
    const lib = path.join(tmp, 'det-lib');
    await compile({ source: src, target: 'ts', outDir: lib, passes: [{ name: 'reorder', options: opts }], quant: 'F32', progress: silentProgress, note: () => {}, cacheDir: detCache });
    const [a, b] = await Promise.all([fsp.readFile(path.join(cli, 'weights.bin')), fsp.readFile(path.join(lib, 'weights.bin'))]);
    expect(a.equals(b)).toBe(true);
    const ma = JSON.parse(await fsp.readFile(path.join(cli, 'llmc-manifest.json'), 'utf8'));
    expect(ma.targetInfo.adapters.L0.tensors).toHaveLength(10); // three levels were recovered
    expect(Object.keys(ma.targetInfo.adapters)).toEqual(['L0', 'L1', 'L2']);
  }, 240_000); // a CLI compile and an in-process one, on a shared 2-core machine
});

describe('records and options', () => {
  it('elastic-prefix/1 records are still read (no recovery); other versions are refused', () => {
    const v1 = { ...structuredClone(record), format: 'elastic-prefix/1' } as Record<string, unknown>;
    delete v1.recovery;
    const got = findRecord([{ name: 'reorder', options: {}, metadata: v1 }], ELASTIC_LEVELS)!;
    expect(got.recovery).toBeNull();
    expect(got.levels).toHaveLength(2);
    expect(() => findRecord([{ name: 'reorder', options: {}, metadata: { ...v1, format: 'elastic-prefix/3' } }], ELASTIC_LEVELS)).toThrow(/not the version this llmc reads/);
  });

  it('recover options: defaults, and bad values are usage errors', () => {
    expect(parseReorderOptions({}).recover).toMatchObject({ rank: 8, alpha: 16, seed: 42 });
    expect(parseReorderOptions({ seed: '7' }).recover!.seed).toBe(7);
    expect(parseReorderOptions({}).recover!.targets).toBe('auto');
    expect(recoverSettings(parseReorderOptions({}).recover!, 9)).toMatchObject({ steps: 80, targets: ['o', 'down'] });
    expect(recoverSettings(parseReorderOptions({}).recover!, 2)).toMatchObject({ steps: 240, targets: ['o', 'up', 'down'] });
    expect(recoverSettings(parseReorderOptions({ recoverSteps: '200', recoverTargets: 'q,o' }).recover!, 9)).toMatchObject({ steps: 200, targets: ['q', 'o'] });
    expect(parseReorderOptions({}).recover!.init).toBe('chain');
    expect(parseReorderOptions({ recoverInit: 'fit' }).recover!.init).toBe('fit');
    expect(() => parseReorderOptions({ recoverInit: 'random' })).toThrow(/recoverInit/);
    expect(parseReorderOptions({ recoverTargets: 'down, q,o' }).recover!.targets).toEqual(['q', 'o', 'down']);
    expect(() => parseReorderOptions({ recoverTargets: 'q,proj' })).toThrow(/recoverTargets/);
    expect(parseReorderOptions({ recover: 'none' }).recover).toBeNull();
    expect(() => parseReorderOptions({ recover: 'full' })).toThrow(/lora, distill, blockwise or none/);
    expect(() => parseReorderOptions({ recoverRank: '0' })).toThrow(/recoverRank/);
    expect(() => parseReorderOptions({ recoverLr: 'fast' })).toThrow(/recoverLr/);
    expect(() => parseReorderOptions({ recover: 'none', recoverSteps: '5' })).toThrow(/needs reorder.recover=lora/);
    expect(parseReorderOptions({}).recover!.steps).toBe('auto');
    expect(parseReorderOptions({ recoverSteps: '120' }).recover!.steps).toBe(120);
    expect(() => parseReorderOptions({ recoverSteps: 'many' })).toThrow(/recoverSteps must be auto or an integer/);
    // auto: ~360 steps per chain of levels, 80..240 each (the default 10 levels train nine: chains of 5 and 4).
    expect([1, 2, 3, 4, 5, 9, 20].map(autoSteps)).toEqual([240, 240, 180, 180, 120, 80, 80]);
  });
});

describe('CLI: quality where the user picks a level', () => {
  it('compile ends with the level table; run --level names the level and its perplexity; noise is flagged', async () => {
    const out = path.join(tmp, 'cli');
    const opts = Object.entries(RECOVER).flatMap(([k, v]) => ['--opt', `reorder.${k}=${v}`]);
    const c = await llmcInProcess('compile', STORIES, '--target', 'ts', '-q', 'F32', '--passes', 'reorder', ...opts, '--cache-dir', cache, '-o', out);
    expect(c.code).toBe(0);
    const half = record.levels[0];
    expect(c.stderr).toMatch(/level\s+params\s+bytes\s+held-out ppl\s+greedy agree\s+before recovery: ppl\s+agree/);
    expect(c.stderr).toMatch(new RegExp(`${half.id}\\s+${(half.paramFrac * 100).toFixed(1)}%.*${half.heldOutPpl!.toFixed(1)}`));
    const r = await llmcInProcess('run', out, '--prompt-ids', '1', '-n', '8', '--level', '0.5');
    expect(r.code).toBe(0);
    expect(r.stderr).toContain(`level ${half.id} (${(half.paramFrac * 100).toFixed(1)}% of the parameters): held-out perplexity ${half.heldOutPpl!.toFixed(1)}`);
    const j = await llmcInProcess('run', out, '--prompt-ids', '1', '-n', '8', '--level', '0.5', '--json');
    expect(JSON.parse(j.stdout).level).toMatchObject({ id: half.id, recovered: true, worseThanUniform: false, uniformPpl: 512 });
    // The level's tokens were streamed: the --json ids (without an EOS that stopped it).
    const lj = JSON.parse(j.stdout);
    expect(r.stdout).toBe(`${(lj.stop_reason === 'eos' ? lj.generated_ids.slice(0, -1) : lj.generated_ids).join(' ')}\n`);
    // Without recovery the 0.5 level is worse than uniform guessing: flagged in both places.
    const none = path.join(tmp, 'cli-none');
    const c2 = await llmcInProcess('compile', STORIES, '--target', 'ts', '-q', 'F32', '--passes', 'reorder', '--importance', 'activation', '--levels', '0.5,1', '--opt', 'reorder.recover=none', '--cache-dir', cache, '-o', none);
    expect(c2.stderr).toMatch(/L0 .* !/);
    expect(c2.stderr).toContain('worse than uniform guessing');
    const r2 = await llmcInProcess('run', none, '--prompt-ids', '1', '-n', '4', '--level', '0.5', '--json');
    const j2 = JSON.parse(r2.stdout);
    expect(j2.level.worseThanUniform).toBe(true);
    expect(j2.warning).toMatch(/worse than uniform guessing/);
    const r3 = await llmcInProcess('run', none, '--prompt-ids', '1', '-n', '4', '--level', '0.5');
    expect(r3.stderr).toMatch(/warning: level L0 is worse than uniform guessing/);
  });
});
