/**
 * llmc-manifest.json: the one self-describing manifest every target writes.
 * Same inputs give the same bytes: keys are written in a fixed order and no timestamps.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import type { ArchSpec } from '../../core/arch/spec.js';
import { knownSha256, writeFileAtomic } from '../../core/util/atomic.js';
import { sha256Files } from '../../core/util/sha256.js';
import { LLMC_VERSION } from '../../core/version.js';

// One definition, in the browser-safe runtime format module that also reads manifests.
import { MANIFEST_FILE, MANIFEST_FORMAT, MANIFEST_VERSION } from '../../exec/runtime/format.js';

export { MANIFEST_FILE, MANIFEST_FORMAT, MANIFEST_VERSION };

export interface ManifestFile {
  path: string;
  size: number;
  sha256: string;
}

/** What one pass recorded: its name, options and metadata for the runtime. */
export interface PassRecord {
  name: string;
  options: Record<string, unknown>;
  metadata: Record<string, unknown>;
}

export interface Manifest {
  format: typeof MANIFEST_FORMAT;
  version: number;
  llmcVersion: string;
  target: string;
  source: { path: string; sha256: string };
  arch: ArchSpec;
  /** Target-specific section (the ts target's tensor table lives here, GGUF's quant choices ...). */
  targetInfo: Record<string, unknown>;
  passes: PassRecord[];
  files: ManifestFile[];
}

export async function describeFiles(dir: string, relPaths: string[]): Promise<ManifestFile[]> {
  const out: ManifestFile[] = [];
  for (const rel of [...relPaths].sort()) {
    const abs = path.join(dir, rel);
    // Big artifacts were hashed while being written (AtomicFile); the rest are read here.
    out.push({ path: rel, size: (await fsp.stat(abs)).size, sha256: (await knownSha256(abs)) ?? (await sha256Files([abs])) });
  }
  return out;
}

/** Serialize with sorted object keys so equal manifests are equal bytes. */
export function stableJson(value: unknown): string {
  const sort = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(sort);
    if (v && typeof v === 'object' && !ArrayBuffer.isView(v)) {
      return Object.fromEntries(
        Object.keys(v as object)
          .sort()
          .map((k) => [k, sort((v as Record<string, unknown>)[k])]),
      );
    }
    return v;
  };
  return JSON.stringify(sort(value), null, 2) + '\n';
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
