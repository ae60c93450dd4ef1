/**
 * The random-weight checkpoints of bench/scale.bench.ts, generated once into the bench cache (or read
 * from $LLMC_BENCH_TINYLLAMA for the 1.1B dense shape):
 *   dense-100M     llama-100M (hidden 768, 12 layers, vocab 16,384; ≈100.7M parameters, bf16)
 *   dense-1.1B     TinyLlama-1.1B's shape (hidden 2048, 22 layers, 32 heads / 4 KV, vocab 32,000; ≈1.10B, bf16, 3 shards)
 *   moe-100M       mixtral, hidden 512, 8 layers, 8 experts of 1024 (top 2), vocab 16,384 (≈124M)
 *   moe-1.1B       mixtral, hidden 1024, 16 layers, 8 experts of 2048 (top 2), vocab 32,000 (≈0.91B)
 * Each with a byte-level tokenizer (text calibration works) and no planted structure. The MoE ones go
 * to $LLMC_SCALE_DIR when set (the 0.93B one is 1.9 GB of bf16), else the bench cache. To reproduce:
 *   npx tsc -p tsconfig.bench.json && node dist/bench/scale-checkpoints.js [name ...]   (prints each directory)
 */
import path from 'node:path';
import { existsSync, promises as fsp } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { FIXTURE_PRESETS, generateFixture, type FixtureDims, type FixtureOptions } from '../fixtures/generate.js';
import { BENCH_CACHE, cachedFixture } from './harness.js';

export const SCALE_CHECKPOINTS = ['dense-100M', 'dense-1.1B', 'moe-100M', 'moe-1.1B'] as const;
export type ScaleCheckpoint = (typeof SCALE_CHECKPOINTS)[number];

const MOE: Record<'moe-100M' | 'moe-1.1B', Partial<FixtureDims>> = {
  'moe-100M': { hiddenSize: 512, intermediateSize: 1024, numLayers: 8, numHeads: 8, numKvHeads: 4, vocabSize: 16384, maxPositions: 1024, numExperts: 8, topK: 2, expertIntermediateSize: 1024 },
  'moe-1.1B': { hiddenSize: 1024, intermediateSize: 2048, numLayers: 16, numHeads: 16, numKvHeads: 4, vocabSize: 32000, maxPositions: 2048, numExperts: 8, topK: 2, expertIntermediateSize: 2048 },
};

/** The directory of checkpoint `name`, generated now when it is not in the bench cache. */
export async function scaleCheckpoint(name: ScaleCheckpoint): Promise<string> {
  if (name === 'dense-100M') return (await cachedFixture('llama-100M', { arch: 'llama', dtype: 'BF16', planted: false })).dir;
  if (name === 'dense-1.1B') return process.env.LLMC_BENCH_TINYLLAMA ?? (await cachedFixture('tinyllama-1.1B', { arch: 'llama', dtype: 'BF16', shards: 3, planted: false })).dir;
  const root = process.env.LLMC_SCALE_DIR ?? BENCH_CACHE;
  const dir = path.join(root, `scale-${name}-bf16`);
  if (existsSync(path.join(dir, 'fixture-truth.json'))) return dir;
  await fsp.mkdir(root, { recursive: true });
  const opts: FixtureOptions = { arch: 'mixtral', dtype: 'BF16', shards: name === 'moe-1.1B' ? 2 : 1, planted: false, dims: { ...FIXTURE_PRESETS.tiny, ...MOE[name] } };
  await generateFixture(dir, opts);
  return dir;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const names = process.argv.slice(2);
  for (const n of names.length ? names : SCALE_CHECKPOINTS) {
    if (!(SCALE_CHECKPOINTS as readonly string[]).includes(n)) throw new Error(`unknown checkpoint "${n}" (one of ${SCALE_CHECKPOINTS.join(', ')})`);
    process.stdout.write(`${n}\t${await scaleCheckpoint(n as ScaleCheckpoint)}\n`);
  }
}
