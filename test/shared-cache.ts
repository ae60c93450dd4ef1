/**
 * The test run's one llmc profile cache (made by test/global-setup.ts). llmc keys every entry on its
 * inputs (checkpoint digest, pass options), so files that run the same documented job (stories260K
 * reordered with LoRA recovery, in docs/ci.md and in `llmc compile --help`) train it once per run
 * instead of once per file; whichever runs first trains for real. A file run alone starts empty.
 */
import { symlinkSync } from 'node:fs';
import path from 'node:path';
import { inject } from 'vitest';
import type {} from './global-setup.js'; // ProvidedContext.llmcCache

/** Makes `cwd/.llmc-cache` (llmc's default --cache-dir) the run's shared cache. */
export function linkSharedCache(cwd: string): void {
  symlinkSync(inject('llmcCache'), path.join(cwd, '.llmc-cache'));
}
