/**
 * Ctrl-C (SIGINT) and SIGTERM during a compile, through the real CLI: exit 130 / 143, one line on
 * stderr, and the file system as it was — no temp file left, an output directory the run created
 * removed, an existing artifact being replaced left intact, byte for byte. The signal is sent once
 * the GGUF's temp file exists, i.e. mid-write.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
  // A new directory is written in place; an existing artifact is rebuilt beside it, then swapped in.
  const beside = path.join(path.dirname(out), `.${path.basename(out)}.llmc-${child.pid}`);
  const writing = (dir: string) => existsSync(dir) && readdirSync(dir).some((f) => f.endsWith('.tmp'));
  while (!done && !caught) {
    caught = writing(out) || writing(beside);
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

  it('SIGTERM: exit 143, and the artifact it was replacing is intact, byte for byte', async () => {
    const out = path.join(tmp, 'out-term');
    mkdirSync(out);
    // An existing artifact (what the manifest makes one), with a file of its own.
    writeFileSync(path.join(out, 'llmc-manifest.json'), '{"format":"llmc-artifact"}');
    writeFileSync(path.join(out, 'weights.bin'), 'old weights');
    const r = await interrupt(out, 'SIGTERM');
    expect(r.caught, 'the compile finished before its temp file was seen').toBe(true);
    expect(r.code).toBe(143);
    expect(readdirSync(out).sort()).toEqual(['llmc-manifest.json', 'weights.bin']);
    expect(readFileSync(path.join(out, 'weights.bin'), 'utf8')).toBe('old weights');
    expect(readdirSync(tmp).filter((f) => f.startsWith('.out-term'))).toEqual([]);
  }, 60_000);
});
