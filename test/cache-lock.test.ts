/**
 * One cache directory shared by concurrent compiles: an entry is written by one llmc at a time (a
 * pid lock; a live owner makes the second skip the write, a dead one's lock is taken over), and a
 * head is never paired with another write's .bin (its sha256 is in the head).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { ensureBuilt } from './build-once.js';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pidLock } from '../src/core/util/pid-lock.js';
import { loadProfile, saveProfile } from '../src/measure/store.js';

let tmp: string;
const ROOT = path.resolve(__dirname, '..');
beforeAll(() => {
  ensureBuilt(); // the children run dist/
  tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-cache-lock-'));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const data = (x: number) => ({ meta: { x }, arrays: { a: Float64Array.from([x, x + 1, x + 2]) } });

describe('profile cache entries under concurrency', () => {
  it('a live owner\'s lock: the second writer skips the entry; a dead owner\'s lock is taken over', async () => {
    const dir = path.join(tmp, 'c1');
    const child = spawn('sleep', ['30']);
    try {
      await saveProfile(dir, 'k', { n: 0 }, data(0)); // creates the directory; the entry's name
      const lockFile = path.join(dir, readdirSync(dir).find((f) => f.startsWith('k-') && f.endsWith('.json'))!.replace(/^/, '.') + '.llmc-lock');
      rmSync(path.join(dir, readdirSync(dir).find((f) => f.endsWith('.json'))!));
      writeFileSync(lockFile, String(child.pid));
      const p = await saveProfile(dir, 'k', { n: 0 }, data(1));
      expect(p.cached).toBe(false);
      expect(await loadProfile(dir, 'k', { n: 0 })).toBeUndefined();
      expect(readFileSync(lockFile, 'utf8')).toBe(String(child.pid));
      writeFileSync(lockFile, '999999999'); // no such process
      await saveProfile(dir, 'k', { n: 0 }, data(2));
      expect(existsSync(lockFile)).toBe(false);
      expect((await loadProfile(dir, 'k', { n: 0 }))?.meta).toEqual({ x: 2 });
    } finally {
      child.kill();
    }
  });

  it('a head with another write\'s .bin (same size) is not a profile', async () => {
    const dir = path.join(tmp, 'c2');
    await saveProfile(dir, 'k', { n: 1 }, data(1));
    const bin = readdirSync(dir).find((f) => f.endsWith('.bin'))!;
    const other = path.join(tmp, 'c3');
    await saveProfile(other, 'k', { n: 1 }, data(5));
    writeFileSync(path.join(dir, bin), readFileSync(path.join(other, bin)));
    expect(await loadProfile(dir, 'k', { n: 1 })).toBeUndefined();
    expect((await loadProfile(other, 'k', { n: 1 }))?.arrays.a).toEqual(Float64Array.from([5, 6, 7]));
  });

  it('pidLock: exclusive between holders', async () => {
    const f = path.join(tmp, 'x.lock');
    const a = await pidLock(f);
    expect('release' in a).toBe(true);
    expect(readFileSync(f, 'utf8')).toBe(String(process.pid)); // the holder's pid, what another llmc checks
    writeFileSync(f, String(process.ppid)); // held by a live process that is not us
    const b = await pidLock(f);
    expect(b).toEqual({ owner: process.ppid });
    if ('release' in a) a.release(); // not ours any more: left to its owner
    expect(readFileSync(f, 'utf8')).toBe(String(process.ppid));
    rmSync(f);
  });

  it('pidLock: a lock this process holds is busy to it too (never taken over by its own holder)', async () => {
    const f = path.join(tmp, 'own.lock');
    const a = await pidLock(f);
    expect('release' in a).toBe(true);
    expect(await pidLock(f)).toEqual({ owner: process.pid });
    expect(readFileSync(f, 'utf8')).toBe(String(process.pid));
    if ('release' in a) a.release();
    const b = await pidLock(f);
    expect('release' in b).toBe(true);
    if ('release' in b) b.release();
    expect(existsSync(f)).toBe(false);
  });

  it('pidLock: release removes only the lock its holder created', async () => {
    const f = path.join(tmp, 'taken.lock');
    const a = await pidLock(f);
    // Another llmc took the lock over meanwhile (it judged this one dead): its lock stays.
    rmSync(f);
    writeFileSync(f, String(process.ppid));
    if ('release' in a) a.release();
    expect(readFileSync(f, 'utf8')).toBe(String(process.ppid));
    rmSync(f);
  });

  it('pidLock: a lock an earlier process with this pid left is taken over', async () => {
    const f = path.join(tmp, 'reused.lock');
    writeFileSync(f, String(process.pid));
    const a = await pidLock(f);
    expect('release' in a).toBe(true);
    if ('release' in a) a.release();
    expect(existsSync(f)).toBe(false);
  });

  it('pidLock: eight processes taking a dead owner\'s lock at once: exactly one gets it', async () => {
    const f = path.join(tmp, 'race.lock');
    const go = path.join(tmp, 'race.go');
    writeFileSync(f, '999999999'); // no such process
    const lib = JSON.stringify(path.join(ROOT, 'dist/src/core/util/pid-lock.js'));
    const script = `
      const { pidLock } = await import(${lib});
      const { existsSync, readdirSync, writeFileSync } = await import('node:fs');
      process.stdout.write('ready\\n');
      while (!existsSync(${JSON.stringify(go)})) await new Promise((r) => setTimeout(r, 2));
      const r = await pidLock(${JSON.stringify(f)});
      // The winner holds the lock until every other process has tried (under load one may start late:
      // after a timed release it would rightly get the lock, and the race would not be tested).
      const tried = () => readdirSync(${JSON.stringify(tmp)}).filter((n) => n.startsWith('race.tried.')).length;
      if ('release' in r) { process.stdout.write('got\\n'); const t0 = Date.now(); while (tried() < 7 && Date.now() - t0 < 30000) await new Promise((x) => setTimeout(x, 10)); r.release(); }
      else { process.stdout.write('owner ' + r.owner + '\\n'); writeFileSync(${JSON.stringify(tmp)} + '/race.tried.' + process.pid, ''); }`;
    let ready = 0;
    const children = Array.from({ length: 8 }, () => {
      const c = spawn('node', ['--input-type=module', '-e', script]);
      let out = '';
      c.stdout.on('data', (d) => {
        out += d;
        if (String(d).includes('ready')) ready++;
      });
      return new Promise<string>((r) => c.on('close', () => r(out)));
    });
    while (ready < 8) await new Promise((r) => setTimeout(r, 20));
    writeFileSync(go, '');
    const outs = await Promise.all(children);
    expect(outs.filter((o) => o.includes('got'))).toHaveLength(1);
    // The others name the winner (a live pid), not the dead owner.
    for (const o of outs.filter((x) => !x.includes('got'))) expect(o).toMatch(/owner [1-9]\d*/);
    expect(outs.join('')).not.toContain('owner 999999999');
    expect(existsSync(f)).toBe(false);
  }, 60_000);
});

describe('concurrent compiles sharing one cache directory', () => {
  it('two compiles at once into different outputs, one cache: both whole, the same bytes, the cache entries whole', async () => {
    const cache = path.join(tmp, 'shared-cache');
    const stories = path.join(ROOT, 'fixtures/models/stories260K');
    const compile = (out: string, ...more: string[]) =>
      new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const c = spawn('node', [path.join(ROOT, 'bin/llmc.js'), 'compile', stories, '--target', 'qnn', '--passes', 'outliers', '--no-eval', '--cache-dir', cache, '-o', path.join(tmp, out), ...more]);
        let stderr = '';
        c.stderr.on('data', (d) => (stderr += d));
        c.on('close', (code) => resolve({ code, stderr }));
      });
    const [a, b] = await Promise.all([compile('ca'), compile('cb')]);
    expect(a.code, a.stderr).toBe(0);
    expect(b.code, b.stderr).toBe(0);
    const files = (out: string) => (JSON.parse(readFileSync(path.join(tmp, out, 'llmc-manifest.json'), 'utf8')) as { files: { path: string; sha256: string }[] }).files;
    expect(files('cb')).toEqual(files('ca'));
    // No lock or half-written file is left, and what the cache holds is read back whole: a compile that may only read it gives the same bytes.
    expect(readdirSync(cache).filter((x) => x.endsWith('.llmc-lock') || x.endsWith('.tmp') || x.includes('.stale'))).toEqual([]);
    const c = await compile('cc', '--cache', 'readonly');
    expect(c.code, c.stderr).toBe(0);
    expect(files('cc')).toEqual(files('ca'));
  }, 120_000);
});
