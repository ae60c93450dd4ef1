import os from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 300_000,
    pool: 'forks',
    // Two files at once even on 2 cores (vitest's default, cores − 1, ran them one by one there): most
    // of a file's time is one thread of llmc's, so the second core would otherwise idle.
    maxWorkers: Math.max(2, os.availableParallelism() - 1),
    // One profile cache per run, shared by the files that run the same documented job (test/shared-cache.ts).
    globalSetup: ['test/global-setup.ts'],
    // dist/ (what `npm test` compiles first) is loaded by Node itself, not through vitest's transform,
    // whose module objects make hot loops several times slower (test/cli.ts runs the built CLI).
    server: { deps: { external: [/\/dist\//] } },
    reporters: ['default'],
  },
});
