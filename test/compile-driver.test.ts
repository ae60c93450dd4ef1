/** A failed compile leaves the file system as it found it. */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { llmcInProcess } from './cli.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-driver-'));
});
afterAll(async () => fsp.rm(tmp, { recursive: true, force: true }));

describe('compile driver on failure', () => {
  it('an output directory the run created is removed', async () => {
    const out = path.join(tmp, 'new', 'out');
    const r = await llmcInProcess('compile', STORIES, '--target', 'gguf', '--quant', 'Q9_9', '-o', out);
    expect(r.code).toBe(2);
    expect(existsSync(out)).toBe(false);
  });

  it('an existing output directory keeps exactly what it had', async () => {
    const out = path.join(tmp, 'existing');
    await fsp.mkdir(out);
    await fsp.writeFile(path.join(out, 'keep.txt'), 'mine');
    const r = await llmcInProcess('compile', STORIES, '--target', 'ts', '--quant', 'Q9_9', '-o', out);
    expect(r.code).toBe(2);
    expect(await fsp.readdir(out)).toEqual(['keep.txt']);
  });
});
