/**
 * Elastic widths: running prefixes of KV groups / query heads / FFN neurons (row prefix of q,k,v,gate,up;
 * column prefix of o,down) must equal the full model whose dropped units' o_proj / down_proj columns
 * are zeroed — the masked model is built independently, as a checkpoint transform compiled to its own artifact.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture, type FixtureArch } from '../fixtures/generate.js';
import { layerNames, moeNames, openCheckpoint, transformSource, type ModelSource } from '../src/core/checkpoint/index.js';
import { isMoeLayer } from '../src/core/arch/spec.js';
import { compile } from '../src/app/compile/compile.js';
import type { LayerWidth } from '../src/exec/runtime/model.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { silentProgress } from '../src/core/util/progress.js';
import { relErr } from './numeric.js';

let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-elastic-'));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

async function emit(source: ModelSource, outDir: string, quant = 'F32') {
  await compile({ source, target: 'ts', outDir, passes: [], quant, progress: silentProgress, note: () => {} });
}

/** Zero columns `keep(c) === false` of a [rows, cols] matrix. */
function zeroColumns(data: Float32Array, cols: number, keep: (c: number) => boolean): Float32Array {
  for (let i = 0; i < data.length; i++) if (!keep(i % cols)) data[i] = 0;
  return data;
}

async function checkArch(arch: FixtureArch, widths: LayerWidth[], quant = 'F32') {
  const src = path.join(tmp, `${arch}-src`);
  await generateFixture(src, { arch, seed: 5 });
  const ck = await openCheckpoint(src);
  const s = ck.spec;
  const hd = s.headDim;
  const nrep = s.numHeads / s.numKvHeads;
  const masks = new Map<string, (c: number) => boolean>();
  widths.forEach((w, l) => {
    const qpg = w.qHeadsPerGroup ?? nrep;
    masks.set(layerNames(l).o, (c) => {
      const h = Math.floor(c / hd);
      return Math.floor(h / nrep) < w.kvGroups && h % nrep < qpg;
    });
    if (!isMoeLayer(s, l)) {
      if (w.ffn !== undefined) masks.set(layerNames(l).mlp.down, (c) => c < w.ffn!);
    } else {
      const m = moeNames(s, l);
      m.experts.forEach((ex, e) => {
        const f = w.expertFfn?.[e] ?? w.ffn;
        if (f !== undefined) masks.set(ex.down, (c) => c < f);
      });
      if (m.shared && w.sharedFfn !== undefined) masks.set(m.shared.down, (c) => c < w.sharedFfn!);
    }
  });
  const masked = transformSource(ck, {
    label: 'mask',
    paramsHash: 'test',
    rewrite: (name, data) => {
      const keep = masks.get(name);
      return keep ? zeroColumns(data, ck.meta(name)!.shape[1], keep) : data;
    },
  });
  try {
    await emit(ck, path.join(tmp, `${arch}-full`), quant);
    await emit(masked, path.join(tmp, `${arch}-masked`), quant);
  } finally {
    await ck.close();
  }
  const full = await loadDir(path.join(tmp, `${arch}-full`));
  const ref = await loadDir(path.join(tmp, `${arch}-masked`));
  const ids = [1, 7, 3, 99, 42, 5, 8, 13];
  const want = ref.forward(ids);
  const got = full.forward(ids, undefined, { widths });
  expect(relErr(got, want)).toBeLessThan(1e-5);
  // Not trivially equal: the full widths on the unmasked model differ.
  expect(relErr(full.forward(ids), want)).toBeGreaterThan(1e-3);
  // Decode through the cache with widths gives the same last-position logits.
  const cache = full.newCache();
  full.forward(ids.slice(0, 5), cache, { widths });
  let last: Float32Array = new Float32Array(0);
  for (const id of ids.slice(5)) last = full.forward([id], cache, { widths });
  const V = full.spec.vocabSize;
  expect(relErr(last, want.subarray((ids.length - 1) * V))).toBeLessThan(1e-5);
}

describe('elastic widths = masked full model', () => {
  it('llama: KV-group prefix, query heads per group, FFN prefixes (one cutting a block)', async () => {
    await checkArch('llama', [
      { kvGroups: 1, ffn: 50 },
      { kvGroups: 2, qHeadsPerGroup: 1, ffn: 96 },
    ]);
  });

  it('llama in F16 (masking zeros are exact in F16, so the same equality holds)', async () => {
    await checkArch('llama', [
      { kvGroups: 2, qHeadsPerGroup: 1, ffn: 64 },
      { kvGroups: 1, ffn: 33 },
    ], 'F16');
  });

  it('mixtral: per-expert FFN prefixes', async () => {
    await checkArch('mixtral', [
      { kvGroups: 1, expertFfn: [64, 20, 40, 1] },
      { kvGroups: 2, expertFfn: [32, 64, 17, 50] },
    ]);
  });

  it('mixtral: one `ffn` for every routed expert (the reorder pass levels\' form)', async () => {
    await checkArch('mixtral', [
      { kvGroups: 2, qHeadsPerGroup: 1, ffn: 24 },
      { kvGroups: 1, ffn: 48 },
    ]);
  });

  it('qwen2_moe: per-expert and shared-expert prefixes', async () => {
    await checkArch('qwen2_moe', [
      { kvGroups: 2, expertFfn: [10, 64, 30, 64], sharedFfn: 70 },
      { kvGroups: 1, qHeadsPerGroup: 1, sharedFfn: 128, expertFfn: [64, 64, 5, 60] },
    ]);
  });

  it('rejects widths outside the model', async () => {
    const dir = path.join(tmp, 'llama-full');
    const m = await loadDir(dir);
    expect(() => m.forward([1], undefined, { widths: [{ kvGroups: 3 }, { kvGroups: 1 }] })).toThrow(/kvGroups = 3 is outside 1\.\.2/);
    expect(() => m.forward([1], undefined, { widths: [{ kvGroups: 1 }] })).toThrow(/1 entries for 2 layers/);
  });

  it('refuses a KV cache filled at other widths; the same widths (or full ones spelled out) go on', async () => {
    const m = await loadDir(path.join(tmp, 'llama-full'));
    const narrow = [{ kvGroups: 1, ffn: 50 }, { kvGroups: 2, qHeadsPerGroup: 1 }];
    const cache = m.newCache();
    m.forward([1, 7, 3], cache);
    expect(() => m.forward([5], cache, { widths: narrow })).toThrow(/KV cache was filled at other elastic widths \(full widths\) than this call's \(a narrower level\)/);
    expect(cache.length).toBe(3);
    const full = [{ kvGroups: 2 }, { kvGroups: 2, qHeadsPerGroup: m.spec.numHeads / m.spec.numKvHeads }];
    m.forward([5], cache, { widths: full });
    const c2 = m.newCache();
    m.forward([1, 7], c2, { widths: narrow });
    expect(() => m.forward([3], c2)).toThrow(/filled at other elastic widths \(a narrower level\) than this call's \(full widths\)/);
    m.forward([3], c2, { widths: narrow.map((w) => ({ ...w })) });
    expect(c2.length).toBe(3);
  });
});
