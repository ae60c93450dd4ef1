/**
 * The kernel store (src/exec/runtime/kernel-files.ts): assembled WebAssembly kernels persist in
 * $LLMC_KERNEL_CACHE under the assembler sources' fingerprint, damaged files are assembled again, and
 * another version's kernels are left alone until unread for a week. Each case is a fresh process.
 */
import { spawnSync } from 'node:child_process';
import v8 from 'node:v8';
import { mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { ensureBuilt } from './build-once.js';

const ROOT = path.resolve(__dirname, '..');
const url = (f: string) => pathToFileURL(path.join(ROOT, 'dist/src/exec/runtime', f)).href;
const dir = mkdtempSync(path.join(os.tmpdir(), 'llmc-kernels-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// the stored bytes may use relaxed SIMD (the child's default), which Node 20 validates only behind this flag
v8.setFlagsFromString('--experimental-wasm-relaxed-simd');

/** A fresh process with the store in `dir`: whether the matmul kernels compiled, with relaxed integer dots, and the fingerprint. */
function run(): { simd: boolean; relaxed: boolean; key: string } {
  const code = `import { wasmSimdAvailable } from '${url('wasm.js')}'; import '${url('node.js')}'; import { kernelFingerprint } from '${url('kernel-files.js')}';
import { relaxedIntegerDots } from '${url('relaxed.js')}';
console.log(JSON.stringify({ simd: wasmSimdAvailable(), relaxed: relaxedIntegerDots(), key: kernelFingerprint() }));`;
  const r = spawnSync('node', ['--input-type=module', '-e', code], { encoding: 'utf8', env: { ...process.env, LLMC_KERNEL_CACHE: dir } });
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout);
}

describe('kernel store', () => {
  it('writes the kernels under their fingerprint, reassembles a damaged file, keeps other versions a week', () => {
    ensureBuilt();
    const first = run();
    expect(first.simd).toBe(true);
    expect(first.key).toMatch(/^[0-9a-f]{16}$/);
    const name = first.relaxed ? 'matmul-rdot' : 'matmul';
    const file = path.join(dir, `${name}-${first.key}.wasm`);
    const bytes = readFileSync(file);
    expect(WebAssembly.validate(bytes)).toBe(true);

    writeFileSync(file, bytes.subarray(0, bytes.length >> 1)); // damaged: half a module
    const recent = path.join(dir, `${name}-0123456789abcdef.wasm`);
    const stale = path.join(dir, `${name}-fedcba9876543210.wasm`);
    writeFileSync(recent, bytes);
    writeFileSync(stale, bytes);
    const eightDaysAgo = Date.now() / 1000 - 8 * 86400;
    utimesSync(stale, eightDaysAgo, eightDaysAgo);

    expect(run()).toEqual(first);
    expect(readFileSync(file).equals(bytes)).toBe(true);
    const names = readdirSync(dir);
    expect(names).toContain(path.basename(recent));
    expect(names).not.toContain(path.basename(stale));
  });
});
