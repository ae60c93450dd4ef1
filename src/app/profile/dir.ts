/**
 * A profile directory (`llmc profile -o DIR`): the profile store of one checkpoint (every stage a
 * `<kind>-<key>.json/.bin` pair, written atomically, JSON last: see ./store.ts) plus an index,
 * llmc-profile.json, naming the checkpoint, its architecture and tensors, the passes profiled with
 * their options, and the stages. `llmc compile --profile DIR` and `llmc report DIR` read it.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import type { ArchSpec } from '../../core/arch/spec.js';
import { LlmcError } from '../../core/errors.js';
import { Checker } from '../../core/records/check.js';
import { ioError } from '../../core/util/atomic.js';

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
  let text: string;
  try {
    text = await fsp.readFile(file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    throw ioError(e, file, 'read');
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new LlmcError(`not valid JSON (${(e as Error).message})`, file);
  }
  const c = new Checker(file);
  const o = c.obj(v, 'profile');
  if (o.format !== PROFILE_INDEX_FORMAT) c.fail('format', `must be "${PROFILE_INDEX_FORMAT}", got ${JSON.stringify(o.format)}`);
  if (o.version !== PROFILE_INDEX_VERSION) c.fail('version', `this llmc reads version ${PROFILE_INDEX_VERSION}, got ${JSON.stringify(o.version)}`);
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
