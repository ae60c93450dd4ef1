/**
 * Writing llmc-manifest.json (its shape is defined once, in src/core/records/manifest.ts): every
 * file of the artifact with its size and sha256, written last so a manifest only exists over whole files.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { MANIFEST_FILE, MANIFEST_FORMAT, MANIFEST_VERSION, type Manifest, type ManifestFile } from '../../core/records/manifest.js';
import { stableJson } from '../../core/util/stable-json.js';
import { knownSha256, writeFileAtomic } from '../../core/util/atomic.js';
import { sha256Files } from '../../core/util/sha256.js';
import { LLMC_VERSION } from '../../core/version.js';

export async function describeFiles(dir: string, relPaths: string[]): Promise<ManifestFile[]> {
  const out: ManifestFile[] = [];
  for (const rel of [...relPaths].sort()) {
    const abs = path.join(dir, rel);
    // Big artifacts were hashed while being written (AtomicFile); the rest are read here.
    out.push({ path: rel, size: (await fsp.stat(abs)).size, sha256: (await knownSha256(abs)) ?? (await sha256Files([abs])) });
  }
  return out;
}

export async function writeManifest(
  dir: string,
  m: Omit<Manifest, 'format' | 'version' | 'llmcVersion' | 'files'>,
  files: string[],
): Promise<Manifest> {
  const manifest: Manifest = {
    format: MANIFEST_FORMAT,
    version: MANIFEST_VERSION,
    llmcVersion: LLMC_VERSION,
    ...m,
    files: await describeFiles(dir, files),
  };
  await writeFileAtomic(path.join(dir, MANIFEST_FILE), stableJson(manifest));
  return manifest;
}
