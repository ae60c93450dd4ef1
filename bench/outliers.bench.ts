/**
 * Pass `outliers` + `--target qnn`:
 *  - quality, through the artifact's own graphs on onnxruntime (backends/qnn/run.ts) against the f32
 *    source on onnxruntime, on stories260K (self-generated held-out data) and on the massive-tokens
 *    fixture (fixtures/massive-tokens.ts, delimiter-rich data): greedy agreement, KL, held-out
 *    perplexity for (a) naive W8A8 T = max, (b) T = p99.9 clipping, (c) shadow on every linear with
 *    outliers, (d) shadow on the top 15%, (e) fused Hadamard rotation without shadow (T = max),
 *    (f) W8A16 on the flagged linears; shadow memory (resident and on-demand rows) as % of the int8
 *    weights; CPU↔NPU syncs per chunk and per token; planted-channel recall and precision;
 *  - speed: profiling time per token on the 30M fixture against one plain forward on the same engine
 *    (goal ≤ 3×), and the qnn emit time.
 *
 * Standalone: `npx tsc -p tsconfig.bench.json && node dist/bench/outliers.bench.js [--quick]`
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { QnnRunner } from '../backends/qnn/run.js';
import { delimitedSequences, plantMassiveTokens } from '../fixtures/massive-tokens.js';
import { generateFixture } from '../fixtures/generate.js';
import { measureLinears } from '../passes/outliers/measure.js';
import { calibrationSet } from '../src/measure/calibration.js';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import type { ModelSource } from '../src/core/checkpoint/source.js';
import { buildModel } from '../src/core/ir/build.js';
import { findRecord, OUTLIER_SCALES } from '../src/core/records/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { Engine } from '../src/exec/engine/index.js';
import { cachedFixture, REPO_ROOT, round, runIfMain, timeMs, type BenchSuite } from './harness.js';

const VARIANTS: [string, Record<string, string>][] = [
  ['a-w8a8-max', { 'outliers.keep': '0', 'outliers.policy': 'widen' }],
  ['b-w8a8-p999-clip', { 'outliers.keep': '0', 'outliers.policy': 'clip' }],
  ['c-shadow-all', { 'outliers.keep': '1' }],
  ['d-shadow-top15', {}],
  ['e-hadamard', { 'outliers.keep': '0', 'outliers.policy': 'widen', 'outliers.rotate': 'hadamard' }],
  ['f-w8a16-flagged', { 'outliers.a16': 'flagged' }],
];

/** Greedy agreement, KL(f32 ‖ artifact) and perplexity of the artifact; the f32 perplexity. */
async function quality(runner: QnnRunner, ref: Float32Array[], held: number[][], V: number) {
  let agree = 0;
  let n = 0;
  let nll = 0;
  let refNll = 0;
  let kl = 0;
  const lse = (row: ArrayLike<number>) => {
    let m = -Infinity;
    for (let i = 0; i < V; i++) m = Math.max(m, row[i]);
    let z = 0;
    for (let i = 0; i < V; i++) z += Math.exp(row[i] - m);
    return m + Math.log(z);
  };
  const argmax = (row: ArrayLike<number>) => {
    let b = 0;
    for (let i = 1; i < V; i++) if (row[i] > row[b]) b = i;
    return b;
  };
  for (let s = 0; s < held.length; s++) {
    const ids = held[s];
    const got = await runner.logits(ids);
    for (let t = 0; t < ids.length - 1; t++) {
      const a = got.subarray(t * V, (t + 1) * V);
      const r = ref[s].subarray(t * V, (t + 1) * V);
      const la = lse(a);
      const lr = lse(r);
      nll += la - a[ids[t + 1]];
      refNll += lr - r[ids[t + 1]];
      for (let i = 0; i < V; i++) {
        const lp = r[i] - lr;
        kl += Math.exp(lp) * (lp - (a[i] - la));
      }
      if (argmax(a) === argmax(r)) agree++;
      n++;
    }
  }
  return { greedyAgreement: round(agree / n, 4), kl: round(kl / n, 6), perplexity: round(Math.exp(nll / n), 3), f32Perplexity: round(Math.exp(refNll / n), 3) };
}

async function qualityRuns(name: string, source: ModelSource, held: number[][], work: string, calibOpts: Record<string, string>, truth?: { layer: number; neuron: number }) {
  const engine = await Engine.open(source);
  const ref: Float32Array[] = [];
  for (const ids of held) ref.push((await engine.logits(ids)).slice());
  await engine.close();
  const out: Record<string, unknown> = {};
  for (const [v, opts] of VARIANTS) {
    const dir = path.join(work, `${name}-${v}`);
    const { ms, result: manifest } = await timeMs(() =>
      compile({ source, target: 'qnn', outDir: dir, passes: ['outliers'], opts: { ...calibOpts, ...opts }, tensorTypes: [], progress: silentProgress, note: () => {} }),
    );
    const rec = findRecord(manifest.passes, OUTLIER_SCALES)!;
    const runner = await QnnRunner.open(dir, rec);
    const q = await quality(runner, ref, held, source.spec.vocabSize);
    const info = manifest.targetInfo as { shadow: { hotBytes: number; coldBytes: number; weightBytes: number }; syncsPerChunk: number; chunk: { c: number } };
    const entry: Record<string, unknown> = {
      ...q,
      shadowLinears: rec.kept,
      shadowResidentPercentOfWeights: round((100 * info.shadow.hotBytes) / info.shadow.weightBytes, 3),
      shadowOnDemandPercentOfWeights: round((100 * info.shadow.coldBytes) / info.shadow.weightBytes, 3),
      syncsPerChunk: info.syncsPerChunk,
      syncsPerToken: round(info.syncsPerChunk / info.chunk.c, 4),
      shadowOutlierElements: runner.stats.outliers,
      shadowRecomputedOutputs: runner.stats.recomputed,
      compileMs: round(ms, 0),
    };
    if (truth) {
      const down = rec.linears.find((l) => l.weight === `model.layers.${truth.layer}.mlp.down_proj.weight`);
      const hot = down?.input.hot ?? [];
      entry.plantedRecall = hot.includes(truth.neuron) ? 1 : 0;
      entry.plantedPrecision = hot.length ? round((hot.includes(truth.neuron) ? 1 : 0) / hot.length, 3) : 0;
    }
    await runner.close();
    out[v] = entry;
    await fsp.rm(dir, { recursive: true, force: true });
  }
  return out;
}

export async function speed(quick: boolean, work: string) {
  const fx = await cachedFixture('llama-30M', { arch: 'llama', tokenizer: 'none', planted: false });
  const src = await openCheckpoint(fx.dir);
  try {
    const graph = buildModel(src.spec);
    const calib = await calibrationSet(src, { source: 'self-generated', count: quick ? 2 : 4, length: 64, seed: 1, heldOut: 0 });
    const tokens = calib.calib.reduce((a, s) => a + s.length, 0);
    const engine = await Engine.open(src);
    try {
      await engine.logits(calib.calib[0]); // warm
      const forwardOnce = () =>
        timeMs(async () => {
          for (const ids of calib.calib) await engine.logits(ids);
        });
      const profileOnce = () => timeMs(() => measureLinears(src, graph, calib, { engine: async () => engine }));
      // The profile on the same engine (same session options), no cache; the first run builds the
      // tapped graph's session (its top-k size depends on the set), so it is not timed. Then rounds
      // of forward / profile interleaved, so that load from other work on the machine hits both; the
      // first round is the tapped session's second run (a compile runs it once or a few times).
      await measureLinears(src, graph, calib, { engine: async () => engine });
      const forward: number[] = [];
      const profile: number[] = [];
      for (let r = 0; r < (quick ? 3 : 5); r++) {
        forward.push((await forwardOnce()).ms);
        profile.push((await profileOnce()).ms);
      }
      const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
      const ratios = profile.map((p, i) => p / forward[i]);
      const emitDir = path.join(work, 'emit');
      const emit = await timeMs(() =>
        compile({ source: src, target: 'qnn', outDir: emitDir, passes: ['outliers'], opts: { 'outliers.calib': String(quick ? 2 : 4), 'outliers.calibLength': '64', 'outliers.heldOut': '0' }, tensorTypes: [], progress: silentProgress, note: () => {} }),
      );
      await fsp.rm(emitDir, { recursive: true, force: true });
      return {
        fixture: 'llama-30M',
        tokens,
        forwardMsPerToken: round(median(forward) / tokens, 3),
        profileMsPerToken: round(median(profile) / tokens, 3),
        profileOverForward: round(median(ratios), 2),
        profileOverForwardRounds: ratios.map((x) => round(x, 2)),
        goalProfileAtMost3xForward: median(ratios) <= 3,
        loadAverage: os.loadavg().map((x) => round(x, 2)),
        compileWithProfileAndEmitMs: round(emit.ms, 0),
      };
    } finally {
      await engine.close();
    }
  } finally {
    await src.close();
  }
}

export const suite: BenchSuite = {
  name: 'outliers',
  description: 'outliers pass + qnn target: quality (a–f) through the artifact on stories260K and a massive-tokens fixture; profiling cost vs a forward; emit time',
  async run({ quick }) {
    const work = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-bench-outliers-'));
    try {
      const stories = await openCheckpoint(path.join(REPO_ROOT, 'fixtures/models/stories260K'));
      const calib = { count: quick ? 8 : 16, length: 64, seed: 42, heldOut: quick ? 6 : 12 };
      const set = await calibrationSet(stories, { source: 'self-generated', ...calib });
      const storiesRuns = await qualityRuns('stories260K', stories, set.heldOut, work, { 'outliers.calib': String(calib.count), 'outliers.calibLength': '64', 'outliers.heldOut': String(calib.heldOut), 'qnn.chunk': '64' });
      await stories.close();

      const fxDir = path.join(work, 'massive');
      const V = 300;
      await generateFixture(fxDir, { arch: 'llama', planted: false, dims: { hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, vocabSize: V, maxPositions: 128 } });
      const base = await openCheckpoint(fxDir);
      const { source, truth } = plantMassiveTokens(base);
      const calibFile = path.join(work, 'calib.json');
      await fsp.writeFile(calibFile, JSON.stringify(delimitedSequences(truth, V, 16, 64, 1)));
      const held = delimitedSequences(truth, V, quick ? 6 : 16, 64, 2);
      const massiveRuns = await qualityRuns('massive', source, held, work, { 'outliers.calibText': calibFile, 'outliers.calib': '16', 'outliers.calibLength': '64', 'outliers.heldOut': '0', 'qnn.chunk': '16' }, truth);
      await base.close();
      return { quality: { stories260K: storiesRuns, massiveTokens: { truth, runs: massiveRuns } }, speed: await speed(quick, work) };
    } finally {
      await fsp.rm(work, { recursive: true, force: true });
    }
  },
};

runIfMain(import.meta.url, suite);
