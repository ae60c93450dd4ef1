/**
 * The TS runtime in real headless Chromium (bench/browser-runtime.ts): the esbuild bundle and the
 * stories260K ts artifact served from 127.0.0.1 with COOP/COEP; the page must be cross-origin
 * isolated and generate reference.json's ids single-threaded and with the worker pool (2 threads,
 * every matmul split). Skipped with a message where Chromium is absent.
 */
import { promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { compileTs } from './ts-artifact.js';
import { browserUnavailable, runInChromium } from '../bench/browser-runtime.js';

const ROOT = path.resolve(__dirname, '..');
const STORIES = path.join(ROOT, 'fixtures/models/stories260K');
const ref = JSON.parse(readFileSync(path.join(STORIES, 'reference.json'), 'utf8')) as { prompt_ids: number[]; greedy_ids: number[] };
const why = browserUnavailable();
if (why) console.warn(`runtime-browser: skipped: ${why}`);

describe('TS runtime in headless Chromium', () => {
  it.skipIf(why !== null)('generates the stories260K reference ids, single-threaded and with the worker pool (cross-origin isolated)', async () => {
    const tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-browser-art-'));
    try {
      await compileTs(STORIES, tmp);
      const run = { prompt: ref.prompt_ids, maxTokens: ref.greedy_ids.length, steps: 16, rounds: 1 };
      const [one, pooled] = await runInChromium(tmp, [{ ...run, threads: 1 }, { ...run, threads: 2, minWork: 0 }]);
      for (const r of [one, pooled]) {
        expect(r.crossOriginIsolated).toBe(true);
        expect(r.ids).toEqual(ref.greedy_ids);
        expect(r.tokensPerSecond[0]).toBeGreaterThan(0);
      }
      expect(one.workerChunks).toBe(0);
      expect(pooled.workerChunks).toBeGreaterThan(0); // the Web Workers ran part of the rows
    } finally {
      await fsp.rm(tmp, { recursive: true, force: true });
    }
  });
});
