/**
 * The runtime's outputs stay what the model computes, whatever the speed work does to the kernels:
 * on stories260K and a fixture of every architecture, F32 logits at every position against the
 * independent float64 reference (test/reference/llama64.ts), and the runtime's own execution paths
 * (whole-prompt prefill, one token at a time on the KV cache, the plain-JS kernels without
 * WebAssembly) against each other; greedy ids exactly reference.json's.
 */
import { promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { compile } from '../src/app/compile/compile.js';
import { silentProgress } from '../src/core/util/progress.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { positionRows } from '../src/exec/runtime/interpreter.js';
import { buildModel } from '../src/core/ir/build.js';
import type { Model } from '../src/exec/runtime/model.js';
import { generateFixture, type FixtureArch } from '../fixtures/generate.js';
import { Llama64 } from './reference/llama64.js';
import { maxRelError, relErr } from './numeric.js';

const ROOT = path.resolve(__dirname, '..');
const STORIES = path.join(ROOT, 'fixtures/models/stories260K');
const ref = JSON.parse(readFileSync(path.join(STORIES, 'reference.json'), 'utf8')) as { prompt_ids: number[]; greedy_ids: number[] };

/**
 * Float32 against float64: each layer rounds sums of a few hundred products, so the logits carry a
 * few 1e-7 of relative error per layer (measured 0.6–2.0e-6 on these models). Paths of the runtime
 * that sum in another order differ by that rounding only (measured up to 1.8e-6 on stories260K, whole
 * prompt vs token by token): a bug in a kernel shows as 1e-3 or more. The issue asked for 1e-6, which
 * is below float32's own rounding on these models.
 */
const VS_FLOAT64 = 4e-6;
const BETWEEN_PATHS = 3e-6;

const ARCHS: FixtureArch[] = ['llama', 'mistral', 'qwen2', 'mixtral', 'qwen2_moe'];
const SEQ = [1, 17, 300, 42, 9, 255, 100, 3, 77, 480, 61, 12, 5, 260, 33, 411];

let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-outputs-'));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

async function prepare(name: string, modelDir: string): Promise<{ reference: Float64Array[]; dir: string; ids: number[] }> {
  const source = await openCheckpoint(modelDir);
  try {
    const dir = path.join(tmp, `${name}-ts`);
    await compile({ source, target: 'ts', outDir: dir, passes: [], quant: 'F32', progress: silentProgress, note: () => {} });
    const ids = name === 'stories260K' ? [...ref.prompt_ids, ...ref.greedy_ids].slice(0, 160) : SEQ;
    return { reference: (await Llama64.load(source)).forward(ids), dir, ids };
  } finally {
    await source.close();
  }
}

function oneAtATime(model: Model, ids: number[]): Float32Array {
  const cache = model.newCache();
  const rows = ids.map((id) => model.forward([id], cache));
  const out = new Float32Array(rows.length * rows[0].length);
  rows.forEach((r, t) => out.set(r, t * r.length));
  return out;
}

describe('runtime outputs: F32 logits at every position', () => {
  const cases: [string, () => Promise<string>][] = [
    ['stories260K', async () => STORIES],
    ...ARCHS.map((arch): [string, () => Promise<string>] => [
      arch,
      async () => {
        const dir = path.join(tmp, arch);
        await generateFixture(dir, { arch, seed: 7, dtype: 'F32', tokenizer: 'none' });
        return dir;
      },
    ]),
  ];
  for (const [name, modelDir] of cases) {
    it(`${name}: whole prompt, token by token and plain JS agree with float64 and with each other`, async () => {
      const { reference, dir, ids } = await prepare(name, await modelDir());
      const model = await loadDir(dir);
      const plain = await loadDir(dir, { wasm: false });
      const whole = model.forward(ids);
      const stepped = oneAtATime(model, ids);
      const js = plain.forward(ids);
      expect(maxRelError(whole, reference)).toBeLessThan(VS_FLOAT64);
      expect(maxRelError(stepped, reference)).toBeLessThan(VS_FLOAT64);
      expect(maxRelError(js, reference)).toBeLessThan(VS_FLOAT64);
      expect(relErr(stepped, whole)).toBeLessThan(BETWEEN_PATHS);
      expect(relErr(js, whole)).toBeLessThan(BETWEEN_PATHS);
      // Some rows only (unordered, repeated): the last layer past its K/V projections runs on those rows.
      const rows = [ids.length - 1, 2, 2, 9];
      for (const m of [model, plain]) {
        const some = m.forward(ids, m.newCache(), { logitRows: rows });
        expect(maxRelError(some, rows.map((t) => reference[t]))).toBeLessThan(VS_FLOAT64);
      }
      // Greedy choices at every position are the float64 reference's (no near-ties on these inputs).
      const V = reference[0].length;
      reference.forEach((row, t) => {
        let best = 0;
        for (let i = 1; i < V; i++) if (row[i] > row[best]) best = i;
        let got = 0;
        for (let i = 1; i < V; i++) if (whole[t * V + i] > whole[t * V + got]) got = i;
        expect(got, `${name} position ${t}`).toBe(best);
      });
    }, 60_000);
  }

  it('the last layer past its K/V projections, and the head, run at the logit rows only', async () => {
    const ck = await openCheckpoint(STORIES);
    const L = ck.spec.numLayers - 1;
    const rows = positionRows(buildModel(ck.spec).ops);
    await ck.close();
    const last = ['q', 'q_rot', 'attn', 'o', 'resid1', 'mlp_in', 'out'].map((v) => `l${L}.${v}`);
    const mlp = ['gate', 'up', 'act', 'h', 'down'].map((v) => `model.layers.${L}.mlp.${v}`);
    expect([...rows].sort()).toEqual([...last, ...mlp, 'h_last', 'h_final', 'logits'].sort());
  });

  it("stories260K: greedy decoding gives reference.json's ids exactly", async () => {
    const dir = path.join(tmp, 'stories260K-ts');
    const model = await loadDir(dir);
    const out: number[] = [];
    for await (const id of model.generate(ref.prompt_ids, { maxTokens: ref.greedy_ids.length, stopTokens: [] })) out.push(id);
    expect(out).toEqual(ref.greedy_ids);
  });
});
