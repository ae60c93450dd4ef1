/**
 * expert-bits, tree-search and chunk-partition measurements, layer-streamed or whole-graph, one per
 * process (run it under /usr/bin/time -v for its peak RSS):
 *   node dist/bench/stream-passes.js make-mixtral DIR          a random-weight ≈99M mixtral (8 layers, 8 experts, bf16)
 *   node dist/bench/stream-passes.js expert-bits DIR stream|whole [calib] [formats]
 *   node dist/bench/stream-passes.js tree-search DIR stream|whole [prompts] [generate]
 *   node dist/bench/stream-passes.js chunk-partition DIR stream|whole [chunk]
 * Prints one JSON line: wall ms and what the pass measured.
 */
import os from 'node:os';
import path from 'node:path';
import { promises as fsp } from 'node:fs';
import { generateFixture } from '../fixtures/generate.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { buildModel } from '../src/core/ir/build.js';
import { silentProgress } from '../src/core/util/progress.js';
import { ts } from '../backends/ts/index.js';
import { analyzeExpertBits } from '../passes/expert-bits/run.js';
import { parseExpertBitsOptions } from '../passes/expert-bits/options.js';
import { parseChunkPartitionOptions } from '../passes/chunk-partition/options.js';
import { plan } from '../passes/chunk-partition/pass.js';
import { Engine } from '../src/exec/engine/index.js';
import { StreamEngine } from '../src/exec/stream/index.js';
import { argmax } from '../src/core/sampling.js';

const [what, dir, mode, a, b] = process.argv.slice(2);
const stream = mode === 'stream';
const t0 = performance.now();
let out: Record<string, unknown> = {};

if (what === 'make-mixtral') {
  await generateFixture(dir, {
    arch: 'mixtral',
    dtype: 'BF16',
    planted: false,
    tokenizer: 'byte-level',
    dims: { hiddenSize: 512, numLayers: 8, numHeads: 8, numKvHeads: 4, vocabSize: 16384, maxPositions: 1024, numExperts: 8, topK: 2, expertIntermediateSize: 768 },
  });
} else if (what === 'expert-bits') {
  const source = await openCheckpoint(dir);
  const calibText = path.resolve(import.meta.dirname, '../../../shared/models/trained/text/calibration.txt');
  const o = parseExpertBitsOptions({ calib: a ?? '4', calibLength: '64', heldOut: '4', formats: b ?? 'Q4_K,Q8_0', budgetBpw: '6', calibText });
  const cacheDir = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-bench-eb-'));
  const { record } = await analyzeExpertBits(source, o, { target: ts, note: () => {}, cacheDir, progress: silentProgress, stream });
  await fsp.rm(cacheDir, { recursive: true, force: true });
  out = { items: record.items.length, choices: record.items.reduce((s, it) => s + it.choices.length, 0), heldOutPpl: record.plan.heldOutPpl, chosen: record.items.map((it) => it.chosen).join('') };
} else if (what === 'tree-search') {
  // the profile's target work: greedy continuations of the calibration prompts
  const source = await openCheckpoint(dir);
  const n = Number(a ?? 16);
  const G = Number(b ?? 32);
  let s = 12345;
  const prompts = Array.from({ length: n }, () => Array.from({ length: 16 }, () => (s = (s * 1103515245 + 12345) >>> 0) % source.spec.vocabSize));
  let ids: number[][];
  if (stream) ids = await new StreamEngine(source).greedy(prompts, G);
  else {
    const engine = await Engine.open(source);
    const session = engine.session(n);
    ids = prompts.map(() => []);
    let logits = await session.step(prompts);
    for (let g = 0; g < G; g++) {
      const next = logits.map((l) => argmax(l));
      next.forEach((id, r) => ids[r].push(id));
      if (g + 1 < G) logits = await session.step(next.map((id) => [id]));
    }
    await engine.close();
  }
  out = { prompts: n, generated: G, first: ids[0].slice(0, 8) };
} else if (what === 'chunk-partition') {
  const source = await openCheckpoint(dir);
  const o = parseChunkPartitionOptions({ chunk: a ?? '256', nMax: '4' });
  const cacheDir = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-bench-cp-'));
  const rec = await plan(source, buildModel(source.spec), o, { cacheDir, progress: silentProgress, note: () => {}, stream });
  await fsp.rm(cacheDir, { recursive: true, force: true });
  out = { costs: rec.costs.source, perKind: rec.chunks[0].costs };
} else throw new Error(`unknown measurement ${what}`);

console.log(JSON.stringify({ what, mode, wallMs: Math.round(performance.now() - t0), ...out }));
