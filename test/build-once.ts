/**
 * Tests that spawn `node bin/llmc.js` need dist/ to match the sources. `npm test` compiles first;
 * when a test file is run alone with stale or missing output, compile once (one worker at a time).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..');
const MAIN = path.join(ROOT, 'dist/src/app/cli/main.js');

function newestSource(dir: string): number {
  let newest = 0;
  if (!existsSync(dir)) return 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) newest = Math.max(newest, newestSource(p));
    else if (e.name.endsWith('.ts')) newest = Math.max(newest, statSync(p).mtimeMs);
  }
  return newest;
}

/** The commands' one-file bundles' indexes (scripts/bundle-run.mjs); a `tsc` alone leaves them older than dist/. */
const BUNDLE_INDEXES = ['run', 'compile'].map((c) => path.join(ROOT, `dist/llmc-${c}.json`));

function stale(): boolean {
  if (!existsSync(MAIN)) return true;
  const built = statSync(MAIN).mtimeMs;
  if (BUNDLE_INDEXES.some((f) => !existsSync(f) || statSync(f).mtimeMs < built)) return true;
  return ['src', 'fixtures', 'passes', 'backends', 'bench'].some((d) => newestSource(path.join(ROOT, d)) > built);
}

const sleep = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

export function ensureBuilt(): void {
  if (!stale()) return;
  const lock = path.join(ROOT, '.build-lock');
  try {
    mkdirSync(lock);
  } catch {
    for (let waited = 0; existsSync(lock) && waited < 180_000; waited += 250) sleep(250);
    return;
  }
  try {
    // Errors in files other than the ones under test must not stop the build: tsc still emits.
    spawnSync('npx', ['tsc', '-p', 'tsconfig.json'], { cwd: ROOT, stdio: 'ignore' });
    // `llmc run`'s and `llmc compile`'s one-file bundles (bin/llmc.js falls back to dist/ while one is stale).
    spawnSync('node', ['scripts/bundle-run.mjs'], { cwd: ROOT, stdio: 'ignore' });
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
  if (!existsSync(MAIN)) throw new Error('tsc did not produce dist/src/app/cli/main.js');
}
