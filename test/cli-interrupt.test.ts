/**
 * Ctrl-C (SIGINT) and SIGTERM during a compile, through the real CLI: exit 130 / 143, one line on
 * stderr, and the file system as it was — no temp file left, an output directory the run created
 * removed, a pre-existing one holding only what it held. The signal is sent once the GGUF's temp file
 * exists, i.e. mid-write.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_PRESETS, generateFixture } from '../fixtures/generate.js';
import { ensureBuilt } from './build-once.js';

const ROOT = path.resolve(__dirname, '..');
let tmp: string;
let model: string;

beforeAll(async () => {
  ensureBuilt();
  tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-cli-interrupt-'));
  // ~30M parameters: a Q4_K_M compile takes long enough to be caught mid-write.
  model = (await generateFixture(path.join(tmp, 'model'), { arch: 'llama', dtype: 'BF16', tokenizer: 'none', planted: false, dims: FIXTURE_PRESETS['llama-30M'] })).dir;
}, 120_000);
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Start a compile into `out`, send `signal` once a temp file shows up there; exit code and stderr. */
async function interrupt(out: string, signal: NodeJS.Signals): Promise<{ code: number | null; stderr: string; caught: boolean }> {
  const child = spawn('node', [path.join(ROOT, 'bin/llmc.js'), 'compile', model, '--target', 'gguf', '--quant', 'Q4_K_M', '-o', out]);
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  let caught = false;
  let done = false;
  void exited.then(() => (done = true));
  while (!done && !caught) {
    caught = existsSync(out) && readdirSync(out).some((f) => f.endsWith('.tmp'));
    if (!caught) await sleep(5);
  }
  if (caught) child.kill(signal);
  return { code: await exited, stderr, caught };
}

describe('interrupting a compile', () => {
  it('SIGINT: exit 130, and the output directory it created is gone', async () => {
    const out = path.join(tmp, 'out-int');
    const r = await interrupt(out, 'SIGINT');
    expect(r.caught, 'the compile finished before its temp file was seen').toBe(true);
    expect(r.code).toBe(130);
    expect(r.stderr).toMatch(/^llmc: interrupted; removed the partial output$/m);
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(existsSync(out)).toBe(false);
  }, 60_000);

  it('SIGTERM: exit 143, and a pre-existing output directory holds only what it held', async () => {
    const out = path.join(tmp, 'out-term');
    mkdirSync(out);
    writeFileSync(path.join(out, 'keep.txt'), 'mine');
    const r = await interrupt(out, 'SIGTERM');
    expect(r.caught, 'the compile finished before its temp file was seen').toBe(true);
    expect(r.code).toBe(143);
    expect(readdirSync(out)).toEqual(['keep.txt']);
  }, 60_000);
});
