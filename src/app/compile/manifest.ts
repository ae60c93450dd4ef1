/**
 * Reading and describing llmc-manifest.json (its shape is defined once, in
 * src/core/records/manifest.ts): the files of an artifact with size and sha256, and a manifest read
 * back from disk, checked field by field before anything relies on it.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { checkArchSpec } from '../../core/arch/check.js';
import { LlmcError, summarize } from '../../core/errors.js';
import { MANIFEST_FILE, MANIFEST_FORMAT, MANIFEST_VERSION, type Manifest, type ManifestFile } from '../../core/records/manifest.js';
import { knownSha256 } from '../../core/util/atomic.js';
import { Checker } from '../../core/util/check.js';
import { readJsonIfPresent } from '../../core/util/json-file.js';
import { sha256Files } from '../../core/util/sha256.js';
import { parseJson } from '../../core/util/json.js';

export async function describeFiles(dir: string, relPaths: string[]): Promise<ManifestFile[]> {
  const out: ManifestFile[] = [];
  for (const rel of [...relPaths].sort()) {
    const abs = path.join(dir, rel);
    // Big artifacts were hashed while being written (AtomicFile); the rest are read here.
    out.push({ path: rel, size: (await fsp.stat(abs)).size, sha256: (await knownSha256(abs)) ?? (await sha256Files([abs])) });
  }
  return out;
}

/** Check a manifest read from disk (untrusted): its format, and every field readers rely on (paths stay inside the artifact). */
export function checkManifest(v: unknown, file: string): Manifest {
  const c = new Checker(file);
  const m = c.obj(v, 'manifest');
  if (m.format !== MANIFEST_FORMAT || m.version !== MANIFEST_VERSION) {
    throw new LlmcError(`unsupported manifest ${summarize(m.format)} version ${summarize(m.version)}; this llmc reads ${MANIFEST_FORMAT} version ${MANIFEST_VERSION}`, file);
  }
  c.str(m.target, 'target');
  const src = c.obj(m.source, 'source');
  c.str(src.path, 'source.path');
  c.str(src.sha256, 'source.sha256');
  checkArchSpec(m.arch, c);
  c.obj(m.targetInfo, 'targetInfo');
  c.arr(m.passes, 'passes').forEach((p, i) => {
    const r = c.obj(p, `passes[${i}]`);
    c.str(r.name, `passes[${i}].name`);
    c.obj(r.metadata, `passes[${i}].metadata`);
  });
  c.arr(m.files, 'files').forEach((f, i) => {
    const e = c.obj(f, `files[${i}]`);
    const p = c.str(e.path, `files[${i}].path`);
    if (path.isAbsolute(p) || p.split(/[\\/]/).includes('..') || p.includes('\0')) c.fail(`files[${i}].path`, `${summarize(p)} leaves the artifact`);
    c.int(e.size, `files[${i}].size`);
    c.str(e.sha256, `files[${i}].sha256`);
  });
  return m as unknown as Manifest;
}

/** JSON text of a manifest, checked. */
export function parseManifestText(text: string, file: string): Manifest {
  return checkManifest(parseJson(text, file), file);
}

/** An artifact directory's manifest, checked; null when the directory has none (it is not an artifact). */
export async function readManifest(dir: string): Promise<Manifest | null> {
  const file = path.join(dir, MANIFEST_FILE);
  const v = await readJsonIfPresent(file);
  return v === null ? null : checkManifest(v, file);
}
