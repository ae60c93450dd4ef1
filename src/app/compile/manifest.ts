/**
 * The files of an artifact as its manifest lists them (its shape is defined once, in
 * src/core/records/manifest.ts): path, size and sha256 of each.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import type { ManifestFile } from '../../core/records/manifest.js';
import { knownSha256 } from '../../core/util/atomic.js';
import { sha256Files } from '../../core/util/sha256.js';

export async function describeFiles(dir: string, relPaths: string[]): Promise<ManifestFile[]> {
  const out: ManifestFile[] = [];
  for (const rel of [...relPaths].sort()) {
    const abs = path.join(dir, rel);
    // Big artifacts were hashed while being written (AtomicFile); the rest are read here.
    out.push({ path: rel, size: (await fsp.stat(abs)).size, sha256: (await knownSha256(abs)) ?? (await sha256Files([abs])) });
  }
  return out;
}
