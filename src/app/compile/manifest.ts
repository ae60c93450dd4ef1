/**
 * Writing llmc-manifest.json (its shape is defined once, in src/core/records/manifest.ts): every
 * file of the artifact with its size and sha256, written last so a manifest only exists over whole files.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { MANIFEST_FILE, MANIFEST_FORMAT, MANIFEST_VERSION, type Manifest, type ManifestFile } from '../../core/records/manifest.js';
import { stableJson } from '../../core/util/stable-json.js';
import { knownSha256, writeFileAtomic } from '../../core/util/atomic.js';
import { Checker } from '../../core/records/check.js';
import { readJsonIfPresent } from '../../core/util/json-file.js';
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

/**
 * An artifact directory's manifest, checked for the fields every reader relies on; null when the
 * directory has no llmc-manifest.json (it is not an artifact). Errors name the file and the field.
 */
export async function readManifest(dir: string): Promise<Manifest | null> {
  const file = path.join(dir, MANIFEST_FILE);
  const v = await readJsonIfPresent(file);
  if (v === null) return null;
  const c = new Checker(file);
  const m = c.obj(v, 'manifest');
  if (m.format !== MANIFEST_FORMAT) c.fail('format', `must be "${MANIFEST_FORMAT}", got ${JSON.stringify(m.format)}`);
  c.int(m.version, 'version', 1);
  c.str(m.target, 'target');
  const src = c.obj(m.source, 'source');
  c.str(src.path, 'source.path');
  c.str(src.sha256, 'source.sha256');
  c.obj(m.arch, 'arch');
  c.obj(m.targetInfo, 'targetInfo');
  c.arr(m.passes, 'passes').forEach((p, i) => c.obj(c.obj(p, `passes[${i}]`).metadata, `passes[${i}].metadata`));
  c.arr(m.files, 'files').forEach((f, i) => {
    const o = c.obj(f, `files[${i}]`);
    c.str(o.path, `files[${i}].path`);
    c.int(o.size, `files[${i}].size`);
  });
  return m as unknown as Manifest;
}
