/**
 * A profile directory (`llmc profile -o DIR`): the profile store of one checkpoint (every stage a
 * `<kind>-<key>.json/.bin` pair, written atomically, JSON last: see ./store.ts) plus an index,
 * llmc-profile.json, naming the checkpoint, its architecture and tensors, the passes profiled with
 * their options, and the stages. `llmc compile --profile DIR` and `llmc report DIR` read it.
 */
import path from 'node:path';
import type { ArchSpec } from '../../core/arch/spec.js';
import { LlmcError, summarize } from '../../core/errors.js';
import { Checker } from '../../core/util/check.js';
import { readJsonIfPresent } from '../../core/util/json-file.js';
import { ensureOutputDir, writeFileAtomic } from '../../core/util/atomic.js';
import type { ModelSource } from '../../core/checkpoint/source.js';
import type { CachePolicy, StageEvent } from '../../core/pipeline/pass.js';
import type { Progress } from '../../core/util/progress.js';
import { stableJson } from '../../core/util/stable-json.js';
import { LLMC_VERSION } from '../../core/version.js';
import type { PlannedPass } from '../compile/plan.js';

export const PROFILE_INDEX = 'llmc-profile.json';
export const PROFILE_INDEX_FORMAT = 'llmc-profile-dir';
export const PROFILE_INDEX_VERSION = 1;

export interface ProfileStage {
  /** The pass that asked for it. */
  pass: string;
  kind: string;
  key: string;
}

export interface ProfileIndex {
  format: typeof PROFILE_INDEX_FORMAT;
  version: number;
  llmcVersion: string;
  checkpoint: { path: string; sha256: string };
  arch: ArchSpec;
  tensors: { name: string; dtype: string; shape: number[] }[];
  /** The passes profiled, with their options as given (`--opt pass.key=value`) and the record type each will write. */
  passes: { name: string; options: Record<string, string>; record: string }[];
  stages: ProfileStage[];
  /** False while a run is under way or after one was interrupted (rerun to finish). */
  complete: boolean;
}

/** The directory's index, or null when it has none (it is not a profile directory). */
export async function readProfileIndex(dir: string): Promise<ProfileIndex | null> {
  const file = path.join(dir, PROFILE_INDEX);
  const v = await readJsonIfPresent(file);
  if (v === null) return null;
  const c = new Checker(file);
  const o = c.obj(v, 'profile');
  if (o.format !== PROFILE_INDEX_FORMAT) c.fail('format', `must be "${PROFILE_INDEX_FORMAT}", got ${summarize(o.format)}`);
  if (o.version !== PROFILE_INDEX_VERSION) c.fail('version', `this llmc reads version ${PROFILE_INDEX_VERSION}, got ${summarize(o.version)}`);
  const ck = c.obj(o.checkpoint, 'checkpoint');
  c.str(ck.path, 'checkpoint.path');
  c.str(ck.sha256, 'checkpoint.sha256');
  c.obj(o.arch, 'arch');
  c.arr(o.tensors, 'tensors').forEach((t, i) => {
    const x = c.obj(t, `tensors[${i}]`);
    c.str(x.name, `tensors[${i}].name`);
    c.str(x.dtype, `tensors[${i}].dtype`);
    c.ints(x.shape, `tensors[${i}].shape`);
  });
  c.arr(o.passes, 'passes').forEach((p, i) => {
    const x = c.obj(p, `passes[${i}]`);
    c.str(x.name, `passes[${i}].name`);
    c.obj(x.options, `passes[${i}].options`);
  });
  c.arr(o.stages, 'stages').forEach((s, i) => c.str(c.obj(s, `stages[${i}]`).kind, `stages[${i}].kind`));
  return o as unknown as ProfileIndex;
}

/**
 * A profile directory's checkpoint against `source`: a profile of another checkpoint is refused
 * (its measurements would be keyed by the other hash and silently recomputed, or worse, mistaken).
 */
export async function checkProfileOf(dir: string, index: ProfileIndex, source: ModelSource): Promise<void> {
  const have = await source.identity();
  if (index.checkpoint.sha256 !== have) {
    throw new LlmcError(
      `is a profile of another checkpoint (${index.checkpoint.path}, sha256 ${index.checkpoint.sha256.slice(0, 12)}…), not of ${source.description} (sha256 ${have.slice(0, 12)}…); profile this model with llmc profile`,
      dir,
    );
  }
}

export interface ProfileRun {
  source: ModelSource;
  outDir: string;
  passes: PlannedPass[];
  policy: CachePolicy;
  progress: Progress;
  note: (message: string) => void;
  /** Told of every stage as it completes (read from the store or computed). */
  onStage?: (pass: string, e: StageEvent) => void;
}

/**
 * `llmc profile`: every measurement the passes will need, into `outDir`, each stage its own atomic
 * file pair. The index is written first as incomplete and last as complete, so an interrupted run
 * leaves its finished stages, and the next run (policy `on`) reads them and computes the rest.
 */
export async function runProfile(r: ProfileRun): Promise<ProfileIndex> {
  const sha256 = await r.source.identity();
  const writes = r.policy === 'on' || r.policy === 'redo';
  const existing = await readProfileIndex(r.outDir);
  if (existing && r.policy !== 'redo') await checkProfileOf(r.outDir, existing, r.source);
  const index: ProfileIndex = {
    format: PROFILE_INDEX_FORMAT,
    version: PROFILE_INDEX_VERSION,
    llmcVersion: LLMC_VERSION,
    checkpoint: { path: r.source.description, sha256 },
    arch: r.source.spec,
    tensors: r.source.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: [...t.shape] })),
    passes: r.passes.map((p) => ({ name: p.descriptor.name, options: p.raw, record: p.descriptor.produces.id })),
    stages: [],
    complete: false,
  };
  const save = async () => {
    if (writes) await writeFileAtomic(path.join(r.outDir, PROFILE_INDEX), stableJson(index));
  };
  if (writes) await ensureOutputDir(r.outDir);
  await save();
  for (const p of r.passes) {
    const pass = await p.descriptor.load();
    if (!pass.profile) {
      r.note(`pass ${p.descriptor.name} measures nothing ahead of a compile`);
      continue;
    }
    const onStage = (e: StageEvent) => {
      if (!index.stages.some((s) => s.kind === e.kind && s.key === e.key)) index.stages.push({ pass: p.descriptor.name, kind: e.kind, key: e.key });
      r.onStage?.(p.descriptor.name, e);
    };
    await pass.profile(r.source, p.options, { progress: r.progress, note: r.note, cacheDir: { dir: r.outDir, policy: r.policy, onStage } });
    await save(); // stages so far: a resumed run lists them too
  }
  index.complete = true;
  await save();
  return index;
}
