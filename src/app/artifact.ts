/**
 * What a path given to `llmc run` / `llmc inspect` is: a Hugging Face checkpoint, or an llmc artifact
 * (a directory with llmc-manifest.json, or a single file with NAME.llmc-manifest.json beside it), or
 * any other GGUF file (its manifest made from its own header: backends/gguf/bare.ts); and whether an
 * artifact's files are the ones its manifest lists.
 */
import { createReadStream, promises as fsp } from 'node:fs';
import path from 'node:path';
import { TARGETS } from '../../backends/index.js';
import { LlmcError } from '../core/errors.js';
import type { Artifact, ForeignFile, TargetDescriptor } from '../core/pipeline/target.js';
import { MANIFEST_FILE } from '../core/records/manifest.js';
import { parseManifestText } from './compile/manifest.js';

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

async function sha256File(file: string): Promise<string> {
  // node:crypto loads only for --verify: it costs `llmc run` ~10 ms of start-up.
  const h = (await import('node:crypto')).createHash('sha256');
  for await (const chunk of createReadStream(file)) h.update(chunk as Buffer);
  return h.digest('hex');
}

/**
 * Every file the manifest lists is there with its size (and, with `hash`, its sha256); the first that
 * is not is one error naming it.
 */
export async function verifyFiles(a: Artifact, opts: { hash: boolean }): Promise<void> {
  for (const f of a.manifest.files) {
    const file = path.join(a.dir, f.path);
    const st = await fsp.stat(file).catch(() => null);
    if (!st?.isFile()) throw new LlmcError('missing: the artifact\'s manifest lists it; compile again', file);
    if (st.size !== f.size) throw new LlmcError(`${st.size} bytes, the manifest says ${f.size}: the artifact is damaged or from another compile; compile again`, file);
    if (opts.hash) {
      const got = await sha256File(file);
      if (got !== f.sha256) throw new LlmcError(`sha256 ${got} differs from the manifest's ${f.sha256}: the file was changed; compile again`, file);
    }
  }
}
