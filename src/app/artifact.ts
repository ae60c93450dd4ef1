/**
 * What a path given to `llmc run` / `llmc inspect` is: a Hugging Face checkpoint, or an llmc artifact
 * (a directory with llmc-manifest.json, or a single file with NAME.llmc-manifest.json beside it), or
 * any other GGUF file (its manifest made from its own header: backends/gguf/bare.ts); and whether an
 * artifact's files are the ones its manifest lists.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { TARGETS } from '../../backends/index.js';
import { PASSES } from '../../passes/index.js';
import type { RunCatalog } from '../core/pipeline/run-usage.js';
import { LlmcError } from '../core/errors.js';
import type { Artifact, ForeignFile, TargetDescriptor } from '../core/pipeline/target.js';
import { MANIFEST_FILE } from '../core/records/manifest.js';
import { sha256Files } from '../core/util/sha256.js';
import { parseManifestText } from './compile/manifest.js';

/** The registries as `llmc run`, eval and check name them when refusing a run option (checkRunOptions). */
export const RUN_CATALOG: RunCatalog = { targets: TARGETS, passes: PASSES };

export { parseManifestText };

/**
 * manifestPath null: a file without llmc's manifest that a target reads (a GGUF from llama.cpp):
 * nothing recorded to verify its bytes or its source against; `description` is what inspect shows.
 */
export type Located =
  | { kind: 'checkpoint'; dir: string }
  | ({ kind: 'artifact'; manifestPath: string; target: TargetDescriptor; description?: undefined } & Artifact)
  | ({ kind: 'artifact'; manifestPath: null; target: TargetDescriptor } & ForeignFile);

const isFile = (p: string) => fsp.stat(p).then((s) => s.isFile(), () => false);

export async function locate(p: string): Promise<Located> {
  const stat = await fsp.stat(p).catch((err: NodeJS.ErrnoException) => {
    throw new LlmcError(err.code === 'ENOENT' ? 'no such file or directory' : `cannot read: ${err.code ?? err.message}`, p);
  });
  const manifestPath = stat.isDirectory() ? path.join(p, MANIFEST_FILE) : `${p}.${MANIFEST_FILE}`;
  if (await isFile(manifestPath)) {
    const manifest = parseManifestText(await fsp.readFile(manifestPath, 'utf8'), manifestPath);
    const target = TARGETS.find((t) => t.name === manifest.target);
    if (!target) throw new LlmcError(`an artifact of target "${manifest.target}", which this llmc does not know (it knows ${TARGETS.map((t) => t.name).join(', ')})`, manifestPath);
    return { kind: 'artifact', path: p, dir: stat.isDirectory() ? p : path.dirname(p), manifestPath, manifest, target };
  }
  if (stat.isDirectory()) return { kind: 'checkpoint', dir: p };
  const foreign = TARGETS.find((t) => t.foreign && p.toLowerCase().endsWith(t.foreign.extension));
  if (foreign) return { kind: 'artifact', ...(await foreign.foreign!.open(p)), manifestPath: null, target: foreign };
  throw new LlmcError('not a checkpoint directory, an llmc artifact directory, or a file with an llmc manifest beside it', p);
}

/** A file of an artifact that is not the one its manifest lists. */
export interface FileProblem {
  file: string;
  problem: string;
}

/** Every file the manifest lists that is missing, of another size or (with `hash`) of another sha256: all of them, in manifest order. */
export async function checkFiles(a: Artifact, opts: { hash: boolean }): Promise<FileProblem[]> {
  const problems: FileProblem[] = [];
  for (const f of a.manifest.files) {
    const file = path.join(a.dir, f.path);
    const st = await fsp.stat(file).catch(() => null);
    if (!st?.isFile()) problems.push({ file, problem: "missing: the artifact's manifest lists it; compile again" });
    else if (st.size !== f.size) problems.push({ file, problem: `${st.size} bytes, the manifest says ${f.size}: the artifact is damaged or from another compile; compile again` });
    else if (opts.hash) {
      // On a worker thread past 64 MB (core/util/sha256.ts): `llmc run` hashes while the model loads.
      const got = await sha256Files([file]);
      if (got !== f.sha256) problems.push({ file, problem: `sha256 ${got} differs from the manifest's ${f.sha256}: the file was changed; compile again` });
    }
  }
  return problems;
}

/** Every file the manifest lists is there with its size (and, with `hash`, its sha256); else one error naming the first bad file and how many more. */
export async function verifyFiles(a: Artifact, opts: { hash: boolean }): Promise<void> {
  const problems = await checkFiles(a, opts);
  if (!problems.length) return;
  const more = problems.length > 1 ? ` (and ${problems.length - 1} more file${problems.length > 2 ? 's' : ''}: llmc verify ${a.path} lists them)` : '';
  throw new LlmcError(problems[0].problem + more, problems[0].file);
}
