/**
 * Node-only helpers: a file as a ByteSource, and loading an artifact directory. The only runtime
 * file that imports node:fs (the core stays browser-safe).
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { LlmcError } from '../../core/errors.js';
import type { ByteSource } from './bytes.js';
import { MANIFEST_FILE, WEIGHTS_FILE } from './format.js';
import { load, parseManifest, type ArtifactSource, type LoadOptions } from './load.js';
import type { Model } from './model.js';

/** A file read with positioned reads; the handle opens lazily and closes with `close()`. */
export function fileSource(file: string): ByteSource & { close(): Promise<void> } {
  let handle: fsp.FileHandle | null = null;
  const open = async () => {
    try {
      return (handle ??= await fsp.open(file, 'r'));
    } catch (e) {
      throw new LlmcError(`cannot open: ${(e as Error).message}`, file);
    }
  };
  return {
    name: file,
    size: async () => (await (await open()).stat()).size,
    async read(offset, length) {
      const h = await open();
      const out = new Uint8Array(length); // its own aligned buffer (not Buffer's shared pool)
      let done = 0;
      while (done < length) {
        const { bytesRead } = await h.read(out, done, length - done, offset + done);
        if (bytesRead === 0) throw new LlmcError(`short read: wanted ${length} bytes at ${offset}, the file ends first`, file);
        done += bytesRead;
      }
      return out;
    },
    async close() {
      await handle?.close();
      handle = null;
    },
  };
}

/** The ArtifactSource for a directory written by `llmc compile --target ts`. */
export async function artifactDirSource(dir: string): Promise<ArtifactSource & { close(): Promise<void> }> {
  const mfile = path.join(dir, MANIFEST_FILE);
  let manifest: string;
  try {
    manifest = await fsp.readFile(mfile, 'utf8');
  } catch (e) {
    throw new LlmcError(`cannot read the manifest: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, mfile);
  }
  const wname = parseManifest(manifest, mfile).targetInfo.weights || WEIGHTS_FILE;
  const weights = fileSource(path.join(dir, wname));
  return { manifest, weights, name: dir, close: () => weights.close() };
}

/** Load an artifact directory into a Model (weights are read into memory; the file is closed after). */
export async function loadDir(dir: string, opts: LoadOptions = {}): Promise<Model> {
  const src = await artifactDirSource(dir);
  if (opts.experts) {
    // Experts are read from the file as the model runs: it stays open until model.close().
    try {
      const model = await load(src, opts);
      model.onClose(() => src.close());
      return model;
    } catch (err) {
      await src.close();
      throw err;
    }
  }
  try {
    return await load(src, opts);
  } finally {
    await src.close();
  }
}

/** `llmc run` on an artifact directory: the TS runtime behind the same shape as the engine's TokenGenerator. */
export async function openArtifactGenerator(dir: string, opts: LoadOptions = {}) {
  const model = await loadDir(dir, opts);
  const tokenizerJson = await fsp.readFile(path.join(dir, 'tokenizer.json'), 'utf8').catch(() => undefined);
  const tokenizerConfigJson = await fsp.readFile(path.join(dir, 'tokenizer_config.json'), 'utf8').catch(() => undefined);
  return {
    spec: model.spec,
    tokenizerJson,
    tokenizerConfigJson,
    model,
    async generate(promptIds: number[], o: { maxTokens: number; temperature?: number; topP?: number; seed?: number }): Promise<number[]> {
      const out: number[] = [];
      for await (const id of model.generate(promptIds, o)) out.push(id);
      return out;
    },
    close: () => model.close(),
    expertStats: () => (model.experts ? { ...model.experts.stats, capacity: model.experts.capacity, policy: model.experts.policy, preload: model.experts.fanout } : null),
  };
}
