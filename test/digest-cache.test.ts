/**
 * The source-identity digest kept across runs (src/core/util/digest-cache.ts): the same digest as
 * hashing the bytes (node:crypto over the whole file here), reused while the file is unchanged, and
 * recomputed after a same-size rewrite of it.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { cachedSha256Files } from '../src/core/util/digest-cache.js';
import { WORKER_MIN_BYTES } from '../src/core/util/sha256.js';

let tmp = '';
const saved = process.env.LLMC_DIGEST_CACHE;
beforeAll(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'llmc-digest-'));
  process.env.LLMC_DIGEST_CACHE = path.join(tmp, 'cache');
});
afterAll(() => {
  if (saved === undefined) delete process.env.LLMC_DIGEST_CACHE;
  else process.env.LLMC_DIGEST_CACHE = saved;
  fs.rmSync(tmp, { recursive: true, force: true });
});

const expected = (prefix: string, bytes: Buffer) => createHash('sha256').update(prefix).update(bytes).digest('hex');

test('a big file: hashed once, then read from the cache; a same-size rewrite is hashed again', async () => {
  const file = path.join(tmp, 'model.safetensors');
  const bytes = Buffer.alloc(WORKER_MIN_BYTES + 4096, 7);
  fs.writeFileSync(file, bytes);
  expect(await cachedSha256Files([file], 'cfg')).toBe(expected('cfg', bytes));
  expect(fs.readdirSync(path.join(tmp, 'cache'))).toHaveLength(1);
  // A planted digest shows the second call reads the cache instead of the file.
  const entry = path.join(tmp, 'cache', fs.readdirSync(path.join(tmp, 'cache'))[0]);
  fs.writeFileSync(entry, 'a'.repeat(64));
  expect(await cachedSha256Files([file], 'cfg')).toBe('a'.repeat(64));
  // Another prefix (config.json) is another key.
  expect(await cachedSha256Files([file], 'cfg2')).toBe(expected('cfg2', bytes));
  bytes[100] = 8;
  fs.writeFileSync(file, bytes); // same size, new ctime
  expect(await cachedSha256Files([file], 'cfg')).toBe(expected('cfg', bytes));
});

test('small inputs and LLMC_DIGEST_CACHE=off are hashed every time and leave no entry', async () => {
  const file = path.join(tmp, 'small.bin');
  const bytes = Buffer.from('hello');
  fs.writeFileSync(file, bytes);
  const before = fs.existsSync(path.join(tmp, 'cache')) ? fs.readdirSync(path.join(tmp, 'cache')).length : 0;
  expect(await cachedSha256Files([file])).toBe(expected('', bytes));
  expect(fs.readdirSync(path.join(tmp, 'cache'))).toHaveLength(before);
  // Planted digests under every key: `off` must neither read them nor add one.
  const cache = path.join(tmp, 'cache');
  for (const f of fs.readdirSync(cache)) fs.writeFileSync(path.join(cache, f), 'b'.repeat(64));
  const big = path.join(tmp, 'model.safetensors');
  process.env.LLMC_DIGEST_CACHE = 'off';
  try {
    expect(await cachedSha256Files([big], 'cfg')).toBe(expected('cfg', fs.readFileSync(big)));
    expect(await cachedSha256Files([big], 'cfg3')).toBe(expected('cfg3', fs.readFileSync(big)));
  } finally {
    process.env.LLMC_DIGEST_CACHE = cache;
  }
  expect(fs.readdirSync(cache).length).toBe(before);
  // With the cache on again, the planted entry is what comes back: the check above could fail.
  expect(await cachedSha256Files([big], 'cfg')).toBe('b'.repeat(64));
});

test('a cache directory that cannot be made (under a file, or in /proc) only means hashing: no error, no hang', async () => {
  const big = path.join(tmp, 'other.safetensors');
  const bytes = Buffer.alloc(WORKER_MIN_BYTES, 3);
  fs.writeFileSync(big, bytes);
  const want = expected('cfg4', bytes);
  const notADir = path.join(tmp, 'a-file');
  fs.writeFileSync(notADir, '');
  const unusable = [path.join(notADir, 'cache'), ...(fs.existsSync('/proc/self') ? ['/proc/llmc-digest-test/cache'] : [])];
  try {
    for (const dir of unusable) {
      process.env.LLMC_DIGEST_CACHE = dir;
      expect(await cachedSha256Files([big], 'cfg4')).toBe(want);
    }
  } finally {
    process.env.LLMC_DIGEST_CACHE = path.join(tmp, 'cache');
  }
}, 30_000);
