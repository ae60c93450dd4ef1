/**
 * Quality of the qnn artifact (short version of bench/suites/outliers.ts) on a fixture with massive
 * activations at specific tokens (fixtures/massive-tokens.ts): greedy agreement with the float64
 * model, KL to it and held-out perplexity (reported; on these random ids it is near the float
 * model's and not a ranking), measured through the artifact's own graphs on onnxruntime, for
 * (a) naive W8A8 with T = max, (b) T = p99.9 clipping, (c) shadow on every linear with outliers,
 * (d) shadow on the top 15%. (c) and (d) must beat (a) and (b) in agreement and KL; the planted channel must be found.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QnnRunner } from '../backends/qnn/run.js';
import { generateFixture } from '../fixtures/generate.js';
import { delimitedSequences, plantMassiveTokens, type MassiveTokensTruth } from '../fixtures/massive-tokens.js';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import type { ModelSource } from '../src/core/checkpoint/source.js';
import { findRecord, OUTLIER_SCALES } from '../src/core/records/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { Llama64 } from './reference/llama64.js';

const V = 300;
let tmp: string;
let base: Checkpoint;
let source: ModelSource;
let truth: MassiveTokensTruth;
let calibFile: string;
let held: number[][];

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-outq-'));
  await generateFixture(path.join(tmp, 'm'), { arch: 'llama', planted: false, dims: { hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, vocabSize: V, maxPositions: 128 } });
  base = await openCheckpoint(path.join(tmp, 'm'));
  ({ source, truth } = plantMassiveTokens(base));
  calibFile = path.join(tmp, 'calib.json');
  await fsp.writeFile(calibFile, JSON.stringify(delimitedSequences(truth, V, 8, 48, 1)));
  held = delimitedSequences(truth, V, 6, 48, 2);
});
afterAll(async () => {
  await base?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

async function measure(name: string, opts: Record<string, string>, ref: ArrayLike<number>[][]) {
  const outDir = path.join(tmp, 'out', name);
  const manifest = await compile({
    source,
    target: 'qnn',
    outDir,
    passes: ['outliers'],
    opts: { 'outliers.calibText': calibFile, 'outliers.calib': '8', 'outliers.calibLength': '48', 'outliers.heldOut': '0', 'qnn.chunk': '16', ...opts },
    tensorTypes: [],
    progress: silentProgress,
    note: () => {},
  });
  const rec = findRecord(manifest.passes, OUTLIER_SCALES)!;
  const runner = await QnnRunner.open(outDir, rec);
  let agree = 0;
  let n = 0;
  let nll = 0;
  let kl = 0;
  for (let s = 0; s < held.length; s++) {
    const ids = held[s];
    const logits = await runner.logits(ids);
    for (let t = 0; t < ids.length - 1; t++) {
      const row = logits.subarray(t * V, (t + 1) * V);
      let best = 0;
      let mx = -Infinity;
      for (let i = 0; i < V; i++) if (row[i] > mx) (mx = row[i]), (best = i);
      let z = 0;
      for (let i = 0; i < V; i++) z += Math.exp(row[i] - mx);
      nll += mx + Math.log(z) - row[ids[t + 1]];
      const r = ref[s][t];
      // KL(f64 ‖ artifact) at this position.
      const rm = Math.max(...Array.from(r));
      let rz = 0;
      for (let i = 0; i < V; i++) rz += Math.exp(r[i] - rm);
      for (let i = 0; i < V; i++) {
        const lp = r[i] - rm - Math.log(rz);
        kl += Math.exp(lp) * (lp - (row[i] - mx - Math.log(z)));
      }
      let rb = 0;
      for (let i = 1; i < V; i++) if (r[i] > r[rb]) rb = i;
      if (best === rb) agree++;
      n++;
    }
  }
  const stats = runner.stats;
  await runner.close();
  return { agree: agree / n, ppl: Math.exp(nll / n), kl: kl / n, rec, stats };
}

describe('outliers quality on massive activations at specific tokens', () => {
  it('shadow (all, and the top 15%) beats naive W8A8 (T = max) and clipping (T = p99.9); the planted channel is found', async () => {
    const f64 = await Llama64.load(source);
    const ref = held.map((ids) => f64.forward(ids));
    let refNll = 0;
    let cnt = 0;
    for (let s = 0; s < held.length; s++) {
      for (let t = 0; t < held[s].length - 1; t++) {
        const r = ref[s][t];
        const mx = Math.max(...r);
        refNll += mx + Math.log(r.reduce((a, v) => a + Math.exp(v - mx), 0)) - r[held[s][t + 1]];
        cnt++;
      }
    }
    const a = await measure('a', { 'outliers.keep': '0', 'outliers.policy': 'widen' }, ref);
    const b = await measure('b', { 'outliers.keep': '0', 'outliers.policy': 'clip' }, ref);
    const c = await measure('c', { 'outliers.keep': '1' }, ref);
    const d = await measure('d', {}, ref);
    const fmt = (x: { agree: number; ppl: number; kl: number }) => `agree ${(100 * x.agree).toFixed(1)}% KL ${x.kl.toExponential(2)} ppl ${x.ppl.toFixed(3)}`;
    console.log(`f64 ppl ${Math.exp(refNll / cnt).toFixed(3)}\n(a) ${fmt(a)}\n(b) ${fmt(b)}\n(c) ${fmt(c)}\n(d) ${fmt(d)}`);
    for (const good of [c, d]) {
      for (const bad of [a, b]) {
        expect(good.agree).toBeGreaterThan(bad.agree);
        expect(good.kl).toBeLessThan(bad.kl);
      }
    }
    // The planted neuron is the hot channel of the planted layer's down_proj input: recall 100%.
    const down = d.rec.linears.find((l) => l.weight === `model.layers.${truth.layer}.mlp.down_proj.weight`)!;
    expect(down.input.decision).toBe('shadow');
    expect(down.input.hot).toContain(truth.neuron);
    expect(down.rank).toBe(0); // the most important linear
    console.log(`hot channels of l${truth.layer} down_proj input: [${down.input.hot}] (precision ${(1 / down.input.hot.length).toFixed(2)}); CPU↔NPU syncs per chunk (d) ${d.stats.syncs / d.stats.chunks}, (c) ${c.stats.syncs / c.stats.chunks}`);
  }, 90_000);
});
