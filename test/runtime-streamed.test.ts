/**
 * A ts artifact run one piece at a time (src/exec/runtime/streamed.ts, the evaluation of artifacts
 * too large to load) gives the resident model's logits bit for bit: dense and MoE fixtures at F32,
 * Q8_0 and Q4_0, dense-28M through the ts runner with the threshold forced, an elastic level, and one
 * with recovery adapters (merged at load by the resident runner, and per piece here); and
 * `evaluateArtifact` gives the same figures streamed or not.
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture, type FixtureArch } from '../fixtures/generate.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { compile } from '../src/app/compile/compile.js';
import { evaluateArtifact } from '../src/app/evaluate/artifact.js';
import { silentProgress } from '../src/core/util/progress.js';
import { artifactDirSource, loadDir, nodeWorker } from '../src/exec/runtime/node.js';
import { StreamedArtifact } from '../src/exec/runtime/streamed.js';
import { compileTs } from './ts-artifact.js';
import { openTs } from '../backends/ts/run.js';

const DENSE = path.resolve(__dirname, '../../shared/models/trained/dense-28M');

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-streamed-'));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

/** Windows of different lengths over the vocabulary (seeded arithmetic, no randomness needed). */
const windowsOf = (V: number): number[][] => [7, 12, 5].map((T, w) => Array.from({ length: T }, (_, t) => (1 + w * 31 + t * 17) % V));

const same = (got: Float32Array, want: Float32Array) => got.length === want.length && Buffer.from(got.buffer, got.byteOffset, got.byteLength).equals(Buffer.from(want.buffer, want.byteOffset, want.byteLength));

/** The artifact's runner (what `llmc run` and the evaluation open) on `windows`: resident, or layer-streamed with the threshold forced. */
async function runnerLogits(dir: string, windows: number[][], o: { level?: string; stream?: boolean }): Promise<Float32Array[]> {
  const artifact = { path: dir, dir, manifest: JSON.parse(await fsp.readFile(path.join(dir, 'llmc-manifest.json'), 'utf8')) };
  const runner = await openTs(artifact, { level: o.level, ...(o.stream ? { windows: { ids: windows, stream: true } } : {}) });
  try {
    expect(runner.notes.some((n) => n.startsWith('evaluated layer by layer'))).toBe(o.stream === true);
    const out: Float32Array[] = [];
    for (const w of windows) out.push(await runner.logits!(w));
    return out;
  } finally {
    await runner.close();
  }
}

async function expectSameLogits(dir: string, level?: string) {
  const model = await loadDir(dir);
  const source = await artifactDirSource(dir);
  try {
    const wins = windowsOf(model.spec.vocabSize);
    const run = level === undefined ? {} : model.level(level);
    // one thread, and two (a worker pool over the pieces' shared arena): the same bits
    for (const threads of [1, 2]) {
      const streamed = await (await StreamedArtifact.open(source)).windows(wins, { level, threads, pool: { spawn: nodeWorker, minWork: 0 } });
      try {
        expect(streamed.threads).toBe(threads);
        wins.forEach((ids, i) => {
          const want = model.forward(ids, model.newCache(), run);
          const got = streamed.logits(i);
          expect(got.length).toBe(want.length);
          expect(same(got, want), `${threads} thread(s), window ${i}`).toBe(true);
        });
      } finally {
        streamed.close();
      }
    }
  } finally {
    await source.close();
    await model.close();
  }
}

/** A seeded fixture checkpoint of `arch` compiled to a ts artifact at `quant` (each made once per file, whichever test asks first). */
async function fixtureArtifact(arch: FixtureArch, quant: string): Promise<{ src: string; out: string }> {
  const src = path.join(tmp, `${arch}-src`);
  await fsp.access(src).catch(() => generateFixture(src, { arch, seed: 3 }));
  const out = path.join(tmp, `${arch}-${quant}`);
  await fsp.access(out).catch(() => compileTs(src, out, quant));
  return { src, out };
}

describe('layer-streamed ts artifact', () => {
  for (const [arch, quant] of [['llama', 'F32'], ['llama', 'Q8_0'], ['llama', 'Q4_0'], ['mixtral', 'F32']] as [FixtureArch, string][]) {
    it(`${arch} ${quant}: the resident model's logits bit for bit`, async () => {
      await expectSameLogits((await fixtureArtifact(arch, quant)).out);
    });
  }

  it('an elastic level: the resident level bit for bit', async () => {
    const source = await openCheckpoint(STORIES);
    const out = path.join(tmp, 'levels');
    try {
      const passes = [{ name: 'reorder', options: { importance: 'activation', levels: '0.5,1', evaluate: 'false', recover: 'none' } }];
      await compile({ source, target: 'ts', outDir: out, passes, quant: 'F32', progress: silentProgress, note: () => {}, cacheDir: path.join(tmp, 'cache') });
      await expectSameLogits(out, '0.5');
    } finally {
      await source.close();
    }
  });

  it('an elastic level with recovery adapters: the resident runner\'s logits bit for bit (merged at load), and the low-rank terms\' unmerged', async () => {
    const source = await openCheckpoint(STORIES);
    const out = path.join(tmp, 'adapters');
    try {
      const passes = [{ name: 'reorder', options: { importance: 'activation', levels: '0.5,1', evaluate: 'false', recover: 'lora', recoverSteps: '1', recoverData: '4', recoverBatch: '2' } }];
      await compile({ source, target: 'ts', outDir: out, passes, quant: 'Q8_0', progress: silentProgress, note: () => {}, cacheDir: path.join(tmp, 'cache') });
    } finally {
      await source.close();
    }
    const manifest = JSON.parse(await fsp.readFile(path.join(out, 'llmc-manifest.json'), 'utf8'));
    expect(Object.keys(manifest.targetInfo.adapters ?? {})).toEqual(['L0']); // the 0.5 level has adapters to merge
    const wins = windowsOf(manifest.arch.vocabSize);
    const resident = await runnerLogits(out, wins, { level: '0.5' });
    const streamed = await runnerLogits(out, wins, { level: '0.5', stream: true });
    streamed.forEach((got, i) => expect(same(got, resident[i])).toBe(true));
    // unmerged: the low-rank terms of a Model loaded whole, which differ from the merged slices
    const model = await loadDir(out);
    const src = await artifactDirSource(out);
    try {
      const lowRank = await (await StreamedArtifact.open(src)).windows(wins, { level: '0.5', merge: false });
      wins.forEach((ids, i) => {
        const want = model.forward(ids, model.newCache(), model.level('0.5'));
        expect(same(lowRank.logits(i), want)).toBe(true);
        expect(same(want, resident[i])).toBe(false);
      });
    } finally {
      await src.close();
      await model.close();
    }
  });

  it.skipIf(!existsSync(DENSE))('dense-28M Q8_0 with the threshold forced: the resident runner\'s logits bit for bit', async () => {
    const out = path.join(tmp, 'dense-Q8_0');
    await compileTs(DENSE, out, 'Q8_0');
    const wins = [0, 1].map((w) => Array.from({ length: 48 }, (_, t) => (3 + w * 977 + t * 131) % 8000));
    const resident = await runnerLogits(out, wins, {});
    const streamed = await runnerLogits(out, wins, { stream: true });
    streamed.forEach((got, i) => expect(same(got, resident[i])).toBe(true));
  });

  it('evaluateArtifact: the same figures with the artifact streamed or whole', async () => {
    const { src, out } = await fixtureArtifact('llama', 'Q8_0');
    const source = await openCheckpoint(src);
    try {
      const artifact = { path: out, dir: out, manifest: JSON.parse(await fsp.readFile(path.join(out, 'llmc-manifest.json'), 'utf8')) };
      const sequences = windowsOf(source.spec.vocabSize);
      const whole = await evaluateArtifact({ artifact, source, sequences, stream: false });
      const streamed = await evaluateArtifact({ artifact, source, sequences, stream: true });
      // the source streams too (onnxruntime per layer: its logits equal the whole graph's to float32 rounding), so compare what the artifact alone decides
      expect(streamed.candidatePpl).toBe(whole.candidatePpl);
      expect(streamed.executor).toBe(whole.executor);
      expect(streamed.kl).toBeCloseTo(whole.kl, 6);
    } finally {
      await source.close();
    }
  });
});
