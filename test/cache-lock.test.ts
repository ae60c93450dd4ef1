/**
 * One cache directory shared by concurrent compiles: an entry is written by one llmc at a time (a
 * pid lock; a live owner makes the second skip the write, a dead one's lock is taken over), and a
 * head is never paired with another write's .bin (its sha256 is in the head).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pidLock } from '../src/core/util/pid-lock.js';
import { loadProfile, saveProfile } from '../src/measure/store.js';

let tmp: string;
beforeAll(() => {
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
    if ('release' in a) a.release();
    expect(existsSync(f)).toBe(false);
  });
});
