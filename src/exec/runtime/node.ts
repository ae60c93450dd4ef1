/**
 * Node-only helpers: a file as a ByteSource, and loading an artifact directory. The only runtime
 * file that imports node:fs (the core stays browser-safe).
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import v8 from 'node:v8';
import { Worker } from 'node:worker_threads';
import { LlmcError } from '../../core/errors.js';
import type { ByteSource } from './bytes.js';
import { MANIFEST_FILE, WEIGHTS_FILE } from './format.js';
import { load, parseManifest, type ArtifactSource, type LoadOptions } from './load.js';
import type { Model } from './model.js';
import { installKernelFiles } from './kernel-files.js';
import { WORKER_BODY, type SpawnWorker } from './pool.js';
import { relaxedSimd } from './gemm.js';

installKernelFiles();
enableRelaxedSimd();

/**
 * Node 20 runs WebAssembly relaxed SIMD behind --experimental-wasm-relaxed-simd (on by default from
 * Node 22, and in Chromium): turn it on before the first kernel module is compiled (they are compiled
 * lazily), so the tiled prefill kernels use f32x4.relaxed_madd. The flag only lets modules use the
 * relaxed opcodes; LLMC_RELAXED_SIMD=off keeps it off (the kernels without it are used).
 */
function enableRelaxedSimd(): void {
  if (process.env.LLMC_RELAXED_SIMD === 'off' || relaxedSimd()) return;
  try {
    v8.setFlagsFromString('--experimental-wasm-relaxed-simd');
  } catch {
    // an embedder that refuses flags: the kernels without relaxed SIMD
  }
}

/** A file read with positioned reads; the handle opens lazily and closes with `close()`. */
export function fileSource(file: string): ByteSource & { close(): Promise<void> } {
  let handle: fsp.FileHandle | null = null;
  const open = async () => {
    if (handle) return handle;
    let st;
    try {
      st = await fsp.stat(file);
    } catch (e) {
      throw new LlmcError(`cannot open: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, file);
    }
    // Only regular files (checked before opening: opening a FIFO blocks).
    if (!st.isFile()) throw new LlmcError('not a regular file', file);
    try {
      return (handle = await fsp.open(file, 'r'));
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
  if ((opts.threads ?? 1) > 1 && !opts.pool?.spawn) opts = { ...opts, pool: { ...opts.pool, spawn: nodeWorker } };
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

/** The tokenizer files an artifact directory carries (absent ones are undefined). */
export async function tokenizerFiles(dir: string): Promise<{ tokenizerJson?: string; tokenizerConfigJson?: string }> {
  const read = (f: string) => fsp.readFile(path.join(dir, f), 'utf8').catch(() => undefined);
  return { tokenizerJson: await read('tokenizer.json'), tokenizerConfigJson: await read('tokenizer_config.json') };
}

/**
 * The worker pool's Node adapter (./pool.ts): a worker_threads worker running the pool's code. It
 * does not keep the process alive (a model that is never closed does not hang the exit).
 */
const NODE_WORKER_CODE = `const { parentPort } = require('node:worker_threads');
parentPort.once('message', (m) => (${WORKER_BODY})(m, (x) => parentPort.postMessage(x)));`;

export const nodeWorker: SpawnWorker = () => {
  const w = new Worker(NODE_WORKER_CODE, { eval: true });
  w.unref();
  return {
    postMessage: (m) => w.postMessage(m),
    onReady: (fn) => {
      w.once('message', () => fn());
      w.once('error', (e) => fn(e));
    },
    terminate: () => void w.terminate(),
  };
};
