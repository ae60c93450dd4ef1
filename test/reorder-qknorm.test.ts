/**
 * reorder on olmo2 and olmoe, whose q/k RMSNorm spans the whole projection. A level with fewer heads
 * is the narrower model of the same family: its norm runs over the kept heads' channels with their
 * weights, as transformers and llama.cpp compute a checkpoint with fewer heads. The reference for a
 * level: the reordered tensors cut to the level's prefixes by hand, written as a plain checkpoint with
 * a narrower config.json and run on onnxruntime like any olmo2 / olmoe (no level code on that side).
 * The level runs on the TS runtime (widths over the full weights) and as the ONNX level graph over the
 * sliced weights (what cuda writes). gguf-levels refuses them: llama.cpp's olmo2 / olmoe load attn_q,
 * attn_output and attn_q_norm only at n_embd, so a GGUF with fewer heads does not load.
 */
import { existsSync, promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compile } from '../src/app/compile/compile.js';
import { layerNames } from '../src/core/arch/names.js';
import { mlpsOf } from '../src/core/arch/units.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { gatherMatrix, type ModelSource } from '../src/core/checkpoint/source.js';
import { buildModel } from '../src/core/ir/build.js';
import { levelGraph } from '../src/core/ir/level.js';
import { sliceSource } from '../src/core/pipeline/elastic.js';
import { levelWidths, type Level, type LevelWidth } from '../src/core/records/elastic.js';
import { silentProgress } from '../src/core/util/progress.js';
import { Engine } from '../src/exec/engine/index.js';
import { loadDir } from '../src/exec/runtime/node.js';
import type { ReorderMetadata } from '../passes/reorder/analyze.js';
import { permuteSource } from '../passes/reorder/permute.js';
import { olmoeWithoutGqa, writeEdited } from './edited-checkpoints.js';
import { relErr } from './numeric.js';

type Json = Record<string, unknown>;
const ARCHS = path.resolve(__dirname, '../../shared/models/archs');
const HAVE = existsSync(ARCHS);
if (!HAVE) console.log(`reorder-qknorm: ${ARCHS} is absent; skipped`);
const readJson = (f: string) => JSON.parse(readFileSync(f, 'utf8')) as Json;
const REORDER = { name: 'reorder', options: { importance: 'activation', levels: '0.5,1', anchors: '0', evaluate: 'false', recover: 'none' } };

let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-reorder-qknorm-'));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

const prefix = (n: number) => Int32Array.from({ length: n }, (_, i) => i);

/** `source` (reordered) cut to one uniform width by hand: the first heads of the first groups, the first neurons of each MLP. */
async function narrowed(source: ModelSource, w: LevelWidth, out: string): Promise<string> {
  const s = source.spec;
  const hd = s.headDim;
  const nrep = s.numHeads / s.numKvHeads;
  const qRows = Int32Array.from({ length: w.kvGroups * w.qHeadsPerGroup * hd }, (_, i) => {
    const head = Math.floor(i / hd);
    return (Math.floor(head / w.qHeadsPerGroup) * nrep + (head % w.qHeadsPerGroup)) * hd + (i % hd);
  });
  const kvRows = prefix(w.kvGroups * hd);
  const cuts = new Map<string, { rows?: Int32Array; cols?: Int32Array }>();
  for (let l = 0; l < s.numLayers; l++) {
    const n = layerNames(l);
    cuts.set(n.q, { rows: qRows }).set(n.qNorm, { rows: qRows }).set(n.o, { cols: qRows });
    for (const name of [n.k, n.v, n.kNorm]) cuts.set(name, { rows: kvRows });
    for (const m of mlpsOf(s, l)) {
      cuts.set(m.gate, { rows: prefix(w.ffn) }).set(m.up, { rows: prefix(w.ffn) }).set(m.down, { cols: prefix(w.ffn) });
    }
  }
  const config = { ...source.assets.config, num_attention_heads: w.kvGroups * w.qHeadsPerGroup, num_key_value_heads: w.kvGroups, head_dim: hd, intermediate_size: w.ffn };
  return writeEdited(source, config, out, (name, data, shape) => {
    const cut = cuts.get(name);
    if (!cut) return { data, shape };
    const C = shape.length === 2 ? shape[1] : 1;
    const rows = cut.rows?.length ?? shape[0];
    return { data: gatherMatrix(data, C, cut), shape: shape.length === 2 ? [rows, cut.cols?.length ?? C] : [rows] };
  });
}

/** The reference logits of `level` (its orders from the reorder record) on the hand-cut checkpoint. */
async function levelReference(dir: string, md: ReorderMetadata, level: Level, prompt: number[], out: string): Promise<Float32Array> {
  const ck = await openCheckpoint(dir);
  try {
    const w = levelWidths(level);
    expect(w.every((x) => x.kvGroups === w[0].kvGroups && x.qHeadsPerGroup === w[0].qHeadsPerGroup && x.ffn === w[0].ffn)).toBe(true);
    const narrow = await openCheckpoint(await narrowed(permuteSource(ck, md.orders), w[0], out));
    const engine = await Engine.open(narrow, { threads: 1 });
    try {
      // Not vacuous: fewer heads than the model has.
      expect(narrow.spec.numHeads).toBeLessThan(ck.spec.numHeads);
      return await engine.logits(prompt);
    } finally {
      await engine.close();
      await narrow.close();
    }
  } finally {
    await ck.close();
  }
}

const build = async (dir: string, target: string, out: string) => {
  const source = await openCheckpoint(dir);
  try {
    const m = await compile({ source, target, outDir: out, passes: [REORDER], quant: 'F32', progress: silentProgress, note: () => {}, cacheDir: path.join(tmp, 'cache') });
    return m.passes[0].metadata as unknown as ReorderMetadata;
  } finally {
    await source.close();
  }
};

describe.skipIf(!HAVE).each(['olmo2', 'olmoe'])('%s: reorder levels are the narrower model', (name) => {
  const dir = path.join(ARCHS, name);
  const prompt = () => readJson(path.join(dir, 'reference.json')).prompt_ids as number[];

  it('ts: the TS runtime at the level = the hand-cut checkpoint on onnxruntime (1e-5); so is the ONNX level graph', async () => {
    const out = path.join(tmp, `ts-${name}`);
    const md = await build(dir, 'ts', out);
    const level = md.levels[0];
    const want = await levelReference(dir, md, level, prompt(), path.join(tmp, `cut-ts-${name}`));
    const model = await loadDir(out);
    const got = model.forward(prompt(), model.newCache(), { widths: levelWidths(level) });
    expect(relErr(got, want)).toBeLessThan(1e-5);
    // Not vacuous: the full model differs.
    expect(relErr(model.forward(prompt()), want)).toBeGreaterThan(1e-2);

    // The level graph over the sliced weights (cuda's levels, reorder's exact level loss).
    const ck = await openCheckpoint(dir);
    const widths = levelWidths(level);
    const engine = await Engine.open(sliceSource(permuteSource(ck, md.orders), widths, 'level'), { graph: levelGraph(buildModel(ck.spec), widths), threads: 1 });
    try {
      expect(relErr(await engine.logits(prompt()), want)).toBeLessThan(1e-5);
    } finally {
      await engine.close();
      await ck.close();
    }
  }, 120_000);

  it("gguf-levels: refused before any work (llama.cpp's loader sizes attn_q by n_embd, so a GGUF with fewer heads does not load)", async () => {
    // llama.cpp's olmoe has no grouped-query attention: its MHA equivalent, which the gguf target takes whole.
    const src = name === 'olmoe' ? await olmoeWithoutGqa(dir, path.join(tmp, 'olmoe-mha')) : dir;
    const out = path.join(tmp, `gguf-${name}`);
    const t0 = performance.now();
    await expect(build(src, 'gguf-levels', out)).rejects.toThrow(new RegExp(`^--target gguf-levels writes levels with fewer attention heads, which llama.cpp's ${name} does not load \\(num_attention_heads × head_dim is \\d+, not hidden_size 64`));
    expect(performance.now() - t0).toBeLessThan(5000);
    expect(existsSync(out)).toBe(false);
  });
});
