/**
 * Scaffolding the elastic-level suites (reorder, recovery) share: a scratch directory and an opened
 * checkpoint that are always cleaned up, the models they run on, and a seeded prompt.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import type { ModelSource } from '../src/core/checkpoint/source.js';
import { Rng } from '../src/core/util/rng.js';
import { cachedFixture, REPO_ROOT } from './harness.js';

/** The repository's copy of stories260K (a real pretrained Llama). */
export const STORIES = path.join(REPO_ROOT, 'fixtures/models/stories260K');

/** The generated llama-30M fixture (seed 1), cached between runs. */
export const llama30M = async () => (await cachedFixture('llama-30M', { arch: 'llama', seed: 1 })).dir;

/** `fn` in a fresh directory under the OS temp dir, removed afterwards. */
export async function withTmpDir<R>(prefix: string, fn: (dir: string) => Promise<R>): Promise<R> {
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), prefix));
  try {
    return await fn(dir);
  } finally {
    await fsp.rm(dir, { recursive: true, force: true });
  }
}

/** `fn` on the checkpoint at `dir`, closed afterwards. */
export async function withCheckpoint<R>(dir: string, fn: (source: ModelSource) => Promise<R>): Promise<R> {
  const source = await openCheckpoint(dir);
  try {
    return await fn(source);
  } finally {
    await source.close();
  }
}

/** A seeded random prompt of min(128, the model's context) ids. */
export function randomPrompt(spec: ModelSource['spec'], seed = 1): number[] {
  const rng = new Rng(seed);
  return Array.from({ length: Math.min(128, spec.maxPositions) }, () => rng.int(spec.vocabSize));
}
