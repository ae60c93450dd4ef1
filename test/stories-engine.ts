/**
 * stories260K (the repo's copy) as a checkpoint and an onnxruntime Engine on one thread, opened
 * before a describe block's tests and closed after them: `const stories = storiesEngine();` at the
 * top of the block, then `stories.ck` / `stories.engine` inside its tests.
 */
import path from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { Engine } from '../src/exec/engine/index.js';

export const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');

export function storiesEngine(): { readonly ck: Checkpoint; readonly engine: Engine } {
  const held = {} as { ck: Checkpoint; engine: Engine };
  beforeAll(async () => {
    held.ck = await openCheckpoint(STORIES);
    held.engine = await Engine.open(held.ck, { threads: 1 });
  });
  afterAll(async () => {
    await held.engine?.close();
    await held.ck?.close();
  });
  return held;
}
