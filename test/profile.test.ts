/** The profile cache: computed once per key, reloaded bit-exactly, recomputed when the entry is damaged. */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cachedProfile, profileKey, profilePaths } from '../src/measure/store.js';

let dir: string;
beforeAll(async () => {
  dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-profile-'));
});
afterAll(async () => fsp.rm(dir, { recursive: true, force: true }));

const data = () => ({
  meta: { loss: 2.5, note: 'x' },
  arrays: { a: Float64Array.from([1, -0, Math.PI, 1e-300, -Infinity]), b: new Float64Array(0), c: Float64Array.from([0.1 + 0.2]) },
});

describe('profile cache', () => {
  it('computes once, then returns the stored profile bit-exactly', async () => {
    let calls = 0;
    const compute = async () => (calls++, data());
    const p1 = await cachedProfile(dir, 'unit-test', { checkpoint: 'abc', n: 1 }, compute);
    const p2 = await cachedProfile(dir, 'unit-test', { n: 1, checkpoint: 'abc' }, compute); // key order irrelevant
    expect(calls).toBe(1);
    expect(p1.cached).toBe(false);
    expect(p2.cached).toBe(true);
    expect(p2.key).toBe(p1.key);
    expect(p2.meta).toEqual(data().meta);
    for (const [k, v] of Object.entries(data().arrays)) {
      expect(Buffer.from(p2.arrays[k].buffer).equals(Buffer.from(v.buffer))).toBe(true);
    }
  });

  it('different key parts give a different profile', async () => {
    expect(profileKey('unit-test', { checkpoint: 'abc', n: 2 })).not.toBe(profileKey('unit-test', { checkpoint: 'abc', n: 1 }));
    let calls = 0;
    await cachedProfile(dir, 'unit-test', { checkpoint: 'abc', n: 2 }, async () => (calls++, data()));
    expect(calls).toBe(1);
  });

  it('a truncated binary or corrupt JSON is recomputed, not trusted', async () => {
    const parts = { checkpoint: 'def' };
    await cachedProfile(dir, 'unit-test', parts, async () => data());
    const p = profilePaths(dir, 'unit-test', profileKey('unit-test', parts));
    await fsp.truncate(p.bin, 8);
    let calls = 0;
    const again = await cachedProfile(dir, 'unit-test', parts, async () => (calls++, data()));
    expect(calls).toBe(1);
    expect(again.arrays.a[2]).toBe(Math.PI);
    await fsp.writeFile(p.json, '{not json');
    await cachedProfile(dir, 'unit-test', parts, async () => (calls++, data()));
    expect(calls).toBe(2);
  });

  it('without a cache dir it just computes', async () => {
    let calls = 0;
    await cachedProfile(undefined, 'unit-test', {}, async () => (calls++, data()));
    await cachedProfile(undefined, 'unit-test', {}, async () => (calls++, data()));
    expect(calls).toBe(2);
  });
});
