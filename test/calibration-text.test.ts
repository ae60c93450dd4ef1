/** Calibration from a text file: the model's tokenizer, disjoint calibration / held-out windows, clear errors. */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { calibrationSet, textFileSpec } from '../src/measure/calibration.js';
import { loadTokenizer } from '../src/core/tokenizer/index.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
const TEXT = Array.from({ length: 40 }, (_, i) => `Once upon a time, story number ${i} began with a small red fox who liked to run.`).join('\n');

let dir: string;
let model: Checkpoint;
let textFile: string;
beforeAll(async () => {
  dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-calib-text-'));
  await generateFixture(path.join(dir, 'm'), { arch: 'llama', seed: 5, tokenizer: 'sentencepiece' });
  model = await openCheckpoint(path.join(dir, 'm'));
  textFile = path.join(dir, 'calib.txt');
  await fsp.writeFile(textFile, TEXT);
});
afterAll(async () => {
  await model.close();
  await fsp.rm(dir, { recursive: true, force: true });
});

describe('text calibration', () => {
  it('windows are consecutive slices of [BOS, ...encode(text)]; held-out follows, disjoint', async () => {
    const spec = { source: await textFileSpec(textFile), count: 3, length: 16, seed: 0, heldOut: 2 };
    const set = await calibrationSet(model, spec, { cacheDir: path.join(dir, 'cache') });
    const tok = loadTokenizer(model.assets.tokenizer!, model.assets.tokenizerConfig);
    const encoded = tok.encode(TEXT);
    const ids = encoded[0] === model.spec.bosTokenId ? encoded : [model.spec.bosTokenId!, ...encoded];
    const expected = (k: number) => ids.slice(k * 16, (k + 1) * 16);
    expect(set.calib).toEqual([0, 1, 2].map(expected));
    expect(set.heldOut).toEqual([3, 4].map(expected));
    // A changed file is a different profile (the key follows the content, not the path).
    await fsp.writeFile(textFile, TEXT.replace('fox', 'cat'));
    const changed = await calibrationSet(model, { ...spec, source: await textFileSpec(textFile) }, { cacheDir: path.join(dir, 'cache') });
    expect(changed.key).not.toBe(set.key);
    await fsp.writeFile(textFile, TEXT);
  });

  it('too little text is a one-line error naming the file', async () => {
    const spec = { source: await textFileSpec(textFile), count: 500, length: 64, seed: 0, heldOut: 10 };
    await expect(calibrationSet(model, spec)).rejects.toMatchObject({ file: textFile, message: expect.stringMatching(/510 needed/) });
  });

  it('a model without a tokenizer cannot calibrate on text', async () => {
    const stories = await openCheckpoint(STORIES);
    try {
      const spec = { source: await textFileSpec(textFile), count: 2, length: 8, seed: 0, heldOut: 1 };
      await expect(calibrationSet(stories, spec)).rejects.toThrow(/no tokenizer\.json/);
    } finally {
      await stories.close();
    }
  });
});
