/**
 * vitest's globalSetup: one llmc profile cache (`.llmc-cache`) for the whole test run, empty at its
 * start and removed after it (test/shared-cache.ts hands it to the test files); and dist/ compiled
 * if a source is newer (test/cli.ts runs the built CLI), once, before any test's timeout runs.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { ensureBuilt } from './build-once.js';

declare module 'vitest' {
  export interface ProvidedContext {
    llmcCache: string;
  }
}

export default function setup(project: TestProject): () => void {
  ensureBuilt();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'llmc-test-cache-'));
  project.provide('llmcCache', dir);
  return () => rmSync(dir, { recursive: true, force: true });
}
