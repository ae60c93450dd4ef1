/**
 * Ctrl-C resumes a layer-streamed sweep from the last finished block: `llmc compile` (built) of dense-28M
 * with `--passes imatrix`, streamed (--stream-above 0), is sent SIGINT once k blocks' profiles are in the
 * cache; rerun with the same inputs, it reads those blocks back (its --json notes say how many) and
 * computes the rest, and its imatrix statistics and GGUF equal an uninterrupted compile's byte for byte.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, test } from 'vitest';
import { ensureBuilt } from './build-once.js';

const DENSE = path.resolve(__dirname, '../../shared/models/trained/dense-28M');
const TEXT = path.resolve(__dirname, '../../shared/models/trained/text/calibration.txt');
const CLI = path.resolve(__dirname, '../bin/llmc.js');
const present = existsSync(DENSE) && existsSync(TEXT);
if (!present) console.log(`skipping the kill-and-resume test: ${DENSE} or its calibration text is absent`);

const pieces = (cache: string) => (existsSync(cache) ? readdirSync(cache).filter((f) => f.startsWith('stream-piece-') && f.endsWith('.json')).length : 0);

/** The compile into `out` with its cache in `cache`; SIGINT once `killAt` pieces are stored, when given. */
function compile(out: string, cache: string, killAt?: number): Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string }> {
  const args = [CLI, 'compile', DENSE, '--target', 'gguf', '--quant', 'Q8_0', '--passes', 'imatrix', '--opt', `imatrix.calibText=${TEXT}`, '--opt', 'imatrix.calib=8', '--stream-above', '0', '--no-eval', '--cache-dir', cache, '-o', out, '--json'];
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  // one SIGINT, as Ctrl-C sends (a second would end the process before its handler has cleaned up)
  const poll =
    killAt === undefined
      ? undefined
      : setInterval(() => {
          if (pieces(cache) < killAt) return;
          clearInterval(poll);
          child.kill('SIGINT');
        }, 10);
  return new Promise((resolve) =>
    child.on('close', (code, signal) => {
      clearInterval(poll);
      resolve({ code, signal, stdout, stderr });
    }),
  );
}

describe.skipIf(!present)('Ctrl-C through a streamed calibration sweep', () => {
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-stream-resume-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  test('the rerun starts at the next block and writes what an uninterrupted compile writes', { timeout: 240_000 }, async () => {
    ensureBuilt();
    const L = 8; // dense-28M's decoder blocks
    const k = 3;
    const full = await compile(path.join(tmp, 'full.gguf'), path.join(tmp, 'cache-full'));
    expect(full.code, full.stderr).toBe(0);
    expect((JSON.parse(full.stdout) as { notes: string[] }).notes.join('\n')).not.toMatch(/read from the profile cache/);

    const cache = path.join(tmp, 'cache');
    const killed = await compile(path.join(tmp, 'resumed.gguf'), cache, k);
    expect(killed.code, killed.stderr).toBe(130);
    expect(killed.stderr).toMatch(/llmc: interrupted/);
    const stored = pieces(cache);
    expect(stored).toBeGreaterThanOrEqual(k);
    expect(stored).toBeLessThan(L); // stopped part way
    expect(existsSync(path.join(tmp, 'resumed.gguf'))).toBe(false);

    const resumed = await compile(path.join(tmp, 'resumed.gguf'), cache);
    expect(resumed.code, resumed.stderr).toBe(0);
    const note = (JSON.parse(resumed.stdout) as { notes: string[] }).notes.find((n) => /read from the profile cache/.test(n));
    expect(note).toBe(`${stored} layer-streamed piece(s) read from the profile cache (a resumed or repeated sweep)`);
    expect(pieces(cache)).toBe(pieces(path.join(tmp, 'cache-full')));

    // the streamed statistics (the imatrix profile, float64 bytes) and the artifact, byte for byte (Q8_0: the
    // imatrix's effect on quantized bytes is gguf-imatrix's test; a weighted type here costs 20 s more)
    const stats = (c: string) => readFileSync(path.join(tmp, c, readdirSync(path.join(tmp, c)).find((f) => f.startsWith('imatrix-stats-') && f.endsWith('.bin'))!));
    expect(stats('cache').equals(stats('cache-full'))).toBe(true);
    expect(readFileSync(path.join(tmp, 'resumed.gguf')).equals(readFileSync(path.join(tmp, 'full.gguf')))).toBe(true);
  });
});
