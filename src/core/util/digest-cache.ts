/**
 * sha256Files with a memory across processes: a checkpoint is often compiled several times (F16,
 * Q8_0, Q4_K_M, ...), and hashing a multi-gigabyte checkpoint for the manifest's source identity
 * costs as much as the compile's own reading. The digest is kept as a small file named by a hash of
 * the inputs' paths, sizes, inodes, and modification and change times (ctime cannot be set back, so
 * a rewritten file never matches), in $LLMC_DIGEST_CACHE, else $XDG_CACHE_HOME/llmc/sha256
 * (~/.cache/llmc/sha256). LLMC_DIGEST_CACHE=off disables it. A failure of the cache only means the
 * files are hashed again.
 */
import { createHash } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { mkdirs, writeFileAtomic } from './atomic.js';
import { sha256Files, WORKER_MIN_BYTES } from './sha256.js';

function cacheDir(): string | null {
  const setting = process.env.LLMC_DIGEST_CACHE;
  if (setting === 'off' || setting === '0') return null;
  return setting || path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'llmc', 'sha256');
}

/** The key of the files as they are now (what they are named and every stat field a write changes), and their total size. */
async function keyOf(files: string[], prefix: string): Promise<{ key: string; bytes: number }> {
  const h = createHash('sha256').update(prefix).update('\0');
  let bytes = 0;
  for (const f of files) {
    const st = await fsp.stat(f, { bigint: true });
    h.update([path.resolve(f), st.dev, st.ino, st.size, st.mtimeNs, st.ctimeNs].join('\0')).update('\n');
    bytes += Number(st.size);
  }
  return { key: h.digest('hex'), bytes };
}

/**
 * sha256 over `prefix` then the files' bytes, as sha256Files, from the cache when the files are
 * unchanged. Inputs under WORKER_MIN_BYTES are hashed in less time than a cache costs: never kept.
 */
export async function cachedSha256Files(files: string[], prefix = ''): Promise<string> {
  const dir = cacheDir();
  if (!dir) return sha256Files(files, prefix);
  const { key, bytes } = await keyOf(files, prefix);
  if (bytes < WORKER_MIN_BYTES) return sha256Files(files, prefix);
  const file = path.join(dir, key);
  const known = await fsp.readFile(file, 'utf8').catch(() => '');
  if (/^[0-9a-f]{64}$/.test(known)) return known;
  const digest = await sha256Files(files, prefix);
  // Only if no file changed while it was read. mkdirs, not mkdir's `recursive`, which spins forever
  // under /proc; writeFileAtomic: a temp name of its own (one per call), removed on failure or Ctrl-C.
  if ((await keyOf(files, prefix).catch(() => null))?.key === key) {
    await mkdirs(path.resolve(dir), 0o700).then(() => writeFileAtomic(file, digest)).catch(() => {});
  }
  return digest;
}
