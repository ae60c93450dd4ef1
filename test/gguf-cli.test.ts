/**
 * Bad input through the real CLI entry (src/app/cli/main.ts, in-process): one `llmc:` line on stderr,
 * a non-zero exit, and the output directory left without model.gguf or temp files. And `llmc compile`
 * as users start it (bin/llmc.js): from its one-file bundle, with the bytes dist/ gives.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, writeFileSync, writeSync, closeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { main } from '../src/app/cli/main.js';
import { closeQuantWorkers } from '../src/core/quant/index.js';
import { LlmcError } from '../src/core/errors.js';
import { AtomicFile } from '../src/core/util/atomic.js';
import { WORKER_MIN_BYTES } from '../src/core/util/sha256.js';
import { ensureBuilt } from './build-once.js';
import { ROOT, STORIES } from './gguf-helpers.js';

let tmp: string;
const mounts: string[] = [];

beforeAll(() => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-gguf-cli-'));
});
afterAll(async () => {
  for (const m of mounts) {
    try {
      execFileSync('umount', [m]);
    } catch {
      /* already gone */
    }
  }
  rmSync(tmp, { recursive: true, force: true });
  await closeQuantWorkers();
});

async function run(args: string[]): Promise<{ code: number; errLines: string[] }> {
  const chunks: string[] = [];
  const spy = vi.spyOn(process.stderr, 'write').mockImplementation((s: string | Uint8Array) => {
    chunks.push(String(s));
    return true;
  });
  try {
    const code = await main(args);
    return { code, errLines: chunks.join('').split('\n').filter((l) => l.startsWith('llmc:')) };
  } finally {
    spy.mockRestore();
  }
}

/** Mount a tmpfs (root only); null when this machine does not allow it. */
function tryMount(dir: string, opts: string): string | null {
  mkdirSync(dir, { recursive: true });
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', opts, 'tmpfs', dir], { stdio: 'pipe' });
    mounts.push(dir);
    return dir;
  } catch {
    return null;
  }
}

const leftovers = (dir: string) => readdirSync(dir).filter((f) => f === 'model.gguf' || f.endsWith('.tmp'));

describe('gguf target: bad input', () => {
  it('unknown quant type: usage error (exit 2) listing the valid types', async () => {
    const out = path.join(tmp, 'q');
    const r = await run(['compile', STORIES, '--target', 'gguf', '--quant', 'Q9_Z', '-o', out]);
    expect(r.code).toBe(2);
    expect(r.errLines).toHaveLength(1);
    expect(r.errLines[0]).toMatch(/unknown quant type "Q9_Z".*valid: .*Q4_K_M/);
    expect(existsSync(out)).toBe(false); // the directory this run created is gone again
  });

  it('unknown --tensor-type type: usage error', async () => {
    const out = path.join(tmp, 'tt');
    const r = await run(['compile', STORIES, '--target', 'gguf', '--tensor-type', 'ffn_down=Q7', '-o', out]);
    expect(r.code).toBe(2);
    expect(r.errLines).toHaveLength(1);
    expect(r.errLines[0]).toMatch(/unknown tensor type "Q7"/);
  });

  it('unwritable output directory (a path through a regular file, and a read-only mount)', async (ctx) => {
    const file = path.join(tmp, 'plain-file');
    writeFileSync(file, 'x');
    let r = await run(['compile', STORIES, '--target', 'gguf', '-o', path.join(file, 'out')]);
    expect(r.code).toBe(1);
    expect(r.errLines).toHaveLength(1);
    expect(r.errLines[0]).toMatch(/cannot write to output directory/);

    const ro = tryMount(path.join(tmp, 'ro'), 'ro,size=64k');
    if (!ro) return ctx.skip('mount not permitted here: read-only case');
    r = await run(['compile', STORIES, '--target', 'gguf', '-o', ro]);
    expect(r.code).toBe(1);
    expect(r.errLines).toHaveLength(1);
    expect(r.errLines[0]).toMatch(/read-only file system|permission denied/);
    expect(readdirSync(ro)).toEqual([]);
  });

  it('disk full mid-write (64 KiB tmpfs): one line, no model.gguf, no temp file', async (ctx) => {
    const small = tryMount(path.join(tmp, 'full'), 'size=64k');
    if (!small) return ctx.skip('mount not permitted here: disk-full case');
    const r = await run(['compile', STORIES, '--target', 'gguf', '--quant', 'F32', '-o', small]);
    expect(r.code).toBe(1);
    expect(r.errLines).toHaveLength(1);
    expect(r.errLines[0]).toMatch(/model\.gguf: cannot write: no space left on device/);
    expect(readdirSync(small)).toEqual([]);
  });

  it('disk full mid-write while the hash worker reads the pieces: one LlmcError line, the temp file removed, every hashed promise settled', async (ctx) => {
    const small = tryMount(path.join(tmp, 'full-hashed'), 'size=1m');
    if (!small) return ctx.skip('mount not permitted here: disk-full case');
    // expectedSize at the worker threshold: the artifact's pieces are hashed on a worker as written (the GGUF writer's path).
    const f = await AtomicFile.open(path.join(small, 'model.gguf'), { expectedSize: WORKER_MIN_BYTES });
    const hashed: Promise<void>[] = [];
    let err: unknown;
    try {
      // Pieces in shared memory (lent to the worker, as the kernels' arena is) and plain ones (copied into its ring).
      for (let i = 0; i < 64; i++) {
        const piece = i % 2 ? new Uint8Array(256 << 10).fill(i) : new Uint8Array(new SharedArrayBuffer(256 << 10)).fill(i);
        hashed.push((await f.append(piece)).hashed);
      }
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(LlmcError);
    expect((err as Error).message.split('\n')).toHaveLength(1);
    expect((err as Error).message).toMatch(/cannot write: no space left on device/);
    expect(hashed.length).toBeGreaterThan(0);
    expect(hashed.length).toBeLessThan(64);
    await Promise.all(hashed); // none hangs or rejects once the writer gave up
    expect(readdirSync(small)).toEqual([]);
  });

  it('a source tensor with a NaN (found mid-write): named in the error, nothing left behind', async () => {
    const src = path.join(tmp, 'nan-src');
    await generateFixture(src, { arch: 'llama', tokenizer: 'none' });
    // Poison one element of a late tensor, so the writer has already streamed earlier ones.
    const st = path.join(src, 'model.safetensors');
    const buf = readFileSync(st);
    const hlen = Number(buf.readBigUInt64LE(0));
    const header = JSON.parse(buf.subarray(8, 8 + hlen).toString());
    const victim = 'model.layers.1.mlp.down_proj.weight';
    const fd = openSync(st, 'r+');
    const nan = Buffer.alloc(4);
    nan.writeFloatLE(NaN);
    writeSync(fd, nan, 0, 4, 8 + hlen + header[victim].data_offsets[0] + 40);
    closeSync(fd);
    const out = path.join(tmp, 'nan-out');
    mkdirSync(out);
    // An existing artifact in the output dir, which the failed compile must leave as it was.
    writeFileSync(path.join(out, 'llmc-manifest.json'), '{}');
    writeFileSync(path.join(out, 'keep.txt'), 'its file');
    const r = await run(['compile', src, '--target', 'gguf', '--quant', 'Q8_0', '-o', out]);
    expect(r.code).toBe(1);
    expect(r.errLines).toHaveLength(1);
    expect(r.errLines[0]).toContain(`tensor "${victim}" holds a non-finite value (NaN) at element 10`);
    expect(leftovers(out)).toEqual([]);
    expect(readdirSync(out).sort()).toEqual(['keep.txt', 'llmc-manifest.json']);
    expect(readdirSync(tmp).filter((f) => f.startsWith('.nan-out'))).toEqual([]);
  });

  it('a truncated safetensors file: one line naming it', async () => {
    const src = path.join(tmp, 'trunc-src');
    mkdirSync(src);
    copyFileSync(path.join(STORIES, 'config.json'), path.join(src, 'config.json'));
    const full = readFileSync(path.join(STORIES, 'model.safetensors'));
    writeFileSync(path.join(src, 'model.safetensors'), full.subarray(0, full.length - 1000));
    const out = path.join(tmp, 'trunc-out');
    const r = await run(['compile', src, '--target', 'gguf', '-o', out]);
    expect(r.code).toBe(1);
    expect(r.errLines).toHaveLength(1);
    expect(r.errLines[0]).toContain('model.safetensors');
    expect(existsSync(path.join(out, 'model.gguf'))).toBe(false); // refused at open: nothing was created
  });
});

describe('llmc compile through bin/llmc.js', () => {
  it('starts from its one-file bundle (scripts/bundle-run.mjs) and writes the bytes dist/ writes', async () => {
    ensureBuilt();
    // A module hook that names every file the process loads.
    writeFileSync(path.join(tmp, 'hooks.mjs'), "export async function load(url, c, next) { if (url.startsWith('file:')) console.error('loaded ' + url); return next(url, c); }\n");
    writeFileSync(path.join(tmp, 'register.mjs'), "import { register } from 'node:module'; register('./hooks.mjs', import.meta.url);\n");
    const compile = (out: string, env: Record<string, string>) => {
      const r = spawnSync('node', ['--import', path.join(tmp, 'register.mjs'), path.join(ROOT, 'bin/llmc.js'), 'compile', STORIES, '--target', 'gguf', '--quant', 'Q4_K_M', '--no-eval', '-o', out], { encoding: 'utf8', env: { ...process.env, ...env } });
      expect(r.status, r.stderr).toBe(0);
      return r.stderr.split('\n').filter((l) => l.startsWith('loaded ')).map((l) => path.relative(ROOT, fileURLToPath(l.slice(7))));
    };
    const bundled = compile(path.join(tmp, 'bundled'), {});
    const plain = compile(path.join(tmp, 'plain'), { LLMC_RUN_BUNDLE: 'off' });
    expect(bundled).toContain('dist/llmc-compile.mjs');
    expect(bundled).not.toContain('dist/backends/gguf/emit.js');
    expect(plain).toContain('dist/backends/gguf/emit.js');
    expect(readFileSync(path.join(tmp, 'bundled/model.gguf')).equals(readFileSync(path.join(tmp, 'plain/model.gguf')))).toBe(true);
  }, 60_000);
});
