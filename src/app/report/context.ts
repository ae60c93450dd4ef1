/**
 * What a report is made from: an artifact directory (its manifest, records and tensors, and the
 * quality of the artifact against its source when the source can be run) or a profile directory
 * (its index and stored measurements). Cached profiles are looked up in the profile directory and
 * in the cache directories given, so an artifact's report finds the measurements its passes made.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { locate, verifyFiles } from '../artifact.js';
import type { ArchSpec } from '../../core/arch/spec.js';
import type { Checkpoint } from '../../core/checkpoint/checkpoint.js';
import { LlmcError } from '../../core/errors.js';
import { MANIFEST_FILE, type Manifest, type PassRecord } from '../../core/records/manifest.js';
import { readManifest } from '../compile/manifest.js';
import { checkProfileOf, PROFILE_INDEX, readProfileIndex, type ProfileIndex } from '../profile/dir.js';
import { planPasses } from '../compile/plan.js';
import { silentProgress } from '../../core/util/progress.js';
import { findProfiles, type Profile } from '../../measure/store.js';
import { DTYPE_BYTES, numel, type DType } from '../../core/checkpoint/safetensors.js';
import { tensorGroups } from '../../core/pipeline/summary.js';
import type { ManifestSummary } from '../../core/records/manifest.js';
import type { HeldOutFacts } from '../evaluate/artifact.js';
import type { QualityFigures } from '../evaluate/quality.js';

/** The quality table's figures (src/app/evaluate: each with its 95% interval in ci95). */
export interface QualityFacts extends Omit<QualityFigures, 'sequences' | 'positions' | 'referencePpl' | 'candidatePpl'> {
  executor: string;
  heldOut: HeldOutFacts;
  positions: number;
  sourcePpl: number;
  artifactPpl: number;
  tokensPerSecond: number | null;
  /** Each decoded token's latency in ms (the first: after the one-token prompt's prefill), from the run that gave tokensPerSecond. */
  tokenMs: number[] | null;
}

export interface ReportContext {
  kind: 'artifact' | 'profile';
  dir: string;
  /** What the user named, when it is not `dir` (a single-file artifact: NAME.gguf). */
  path?: string;
  arch: ArchSpec;
  checkpoint: { path: string; sha256: string };
  manifest: Manifest | null;
  profile: ProfileIndex | null;
  /** The records passes wrote (an artifact's), in pass order; for a profile, those its passes' previews decide from it. */
  records: readonly PassRecord[];
  /** Bytes per tensor group and format: the artifact's manifest summary, or the checkpoint's own tensors for a profile. */
  groups: ManifestSummary['groups'] | null;
  quality: QualityFacts | null;
  /** Stored profiles of `kind` whose key includes `match`, from the profile directory and the cache directories. */
  profiles(kind: string, match: Record<string, unknown>): Promise<Profile[]>;
}

export interface OpenOptions {
  /** More directories to find cached profiles in (--profile, --cache-dir). */
  cacheDirs?: string[];
  /** Measures the artifact's quality against its source (null: left out). */
  quality?: (dir: string, manifest: Manifest) => Promise<QualityFacts | null>;
  /** A profile's checkpoint, when it is no longer at the path the profile names (--source). */
  source?: string;
  note?: (message: string) => void;
}

/**
 * The checkpoint the user gave (--source: must open) or else the one a manifest or profile records
 * (null, after `gone(why)`, when it cannot be opened: the report leaves out what needs it).
 */
export async function openNamedSource(given: string | undefined, recorded: string, gone: (why: string) => void): Promise<Checkpoint | null> {
  const { openCheckpoint } = await import('../../core/checkpoint/index.js');
  try {
    return await openCheckpoint(given ?? recorded);
  } catch (e) {
    if (given !== undefined || !(e instanceof LlmcError)) throw e;
    gone(e.line);
    return null;
  }
}

/**
 * The records the profiled passes would write, decided from the profile's own measurements (each
 * pass's `preview`), as pass records: a profile's report then shows every pass's decisions, not only
 * its raw measurements. A pass without `preview`, an incomplete profile, or a checkpoint that cannot
 * be read (said in a note) gives none.
 */
async function previewRecords(dir: string, index: ProfileIndex, o: OpenOptions): Promise<PassRecord[]> {
  const note = o.note ?? (() => {});
  const planned = planPasses({ passes: index.passes.map((p) => ({ name: p.name, options: p.options })) });
  const loaded = (await Promise.all(planned.map(async (p) => ({ p, pass: await p.descriptor.load() })))).filter((x) => x.pass.preview);
  if (!loaded.length) return [];
  const names = loaded.map((x) => x.p.descriptor.name).join(', ');
  if (!index.complete) {
    note(`${names}: decisions left out: the profile is incomplete (rerun llmc profile to finish it)`);
    return [];
  }
  const source = await openNamedSource(o.source, index.checkpoint.path, (why) => note(`${names}: decisions left out: the profile's checkpoint is not readable (${why}); give it with --source DIR`));
  if (!source) return [];
  try {
    await checkProfileOf(dir, index, source);
    const records: PassRecord[] = [];
    for (const { p, pass } of loaded) {
      // the record carries the pass's notes; the report shows them in its section
      const metadata = (await pass.preview!(source, p.options, { progress: silentProgress, note: () => {}, cacheDir: { dir, policy: 'readonly' } })) as Record<string, unknown>;
      records.push({ name: p.descriptor.name, options: p.raw, metadata });
    }
    return records;
  } finally {
    await source.close();
  }
}

const isFile = (p: string) => fsp.stat(p).then((s) => s.isFile(), () => false);

async function fileArtifact(file: string): Promise<{ manifest: Manifest; dir: string }> {
  const where = await locate(file);
  if (where.kind !== 'artifact') throw new LlmcError('not a compiled artifact (no llmc-manifest.json beside it)', file);
  if (where.manifestPath !== null) await verifyFiles(where, { hash: false });
  return { manifest: where.manifest, dir: where.dir };
}

export async function openReportInput(dir: string, o: OpenOptions = {}): Promise<ReportContext> {
  const cacheDirs = [...new Set((o.cacheDirs ?? []).map((d) => path.resolve(d)))];
  const profilesIn = (dirs: string[]) => async (kind: string, match: Record<string, unknown>) => {
    for (const d of dirs) {
      const found = await findProfiles(d, kind, match);
      if (found.length) return found;
    }
    return [];
  };
  // A single-file artifact (NAME.gguf beside its manifest) or a GGUF without one: through locate().
  const single = (await isFile(dir)) ? await fileArtifact(dir) : null;
  const manifest = single ? single.manifest : await readManifest(dir);
  if (manifest) {
    return {
      kind: 'artifact',
      dir: single ? single.dir : dir,
      path: dir,
      arch: manifest.arch,
      checkpoint: manifest.source,
      manifest,
      profile: null,
      records: manifest.passes,
      groups: manifest.summary?.groups ?? null,
      quality: o.quality ? await o.quality(dir, manifest) : null,
      profiles: profilesIn(cacheDirs),
    };
  }
  const index = await readProfileIndex(dir);
  if (index) {
    return {
      kind: 'profile',
      dir,
      arch: index.arch,
      checkpoint: index.checkpoint,
      manifest: null,
      profile: index,
      records: await previewRecords(dir, index, o),
      groups: tensorGroups(index.arch, index.tensors.map((t) => ({ name: t.name, sources: [t.name], format: t.dtype, bytes: numel(t.shape) * (DTYPE_BYTES[t.dtype as DType] ?? 4) }))),
      quality: null,
      profiles: profilesIn([path.resolve(dir), ...cacheDirs]),
    };
  }
  throw new LlmcError(`is neither an llmc profile (${PROFILE_INDEX}, from llmc profile) nor an artifact (${MANIFEST_FILE}, from llmc compile)`, dir);
}
