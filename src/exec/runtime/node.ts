/**
 * Node-only helpers: a file as a ByteSource, and loading an artifact directory. The only runtime
 * file that imports node:fs (the core stays browser-safe).
 */
import { promises as fsp } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { LlmcError } from '../../core/errors.js';
import type { ByteSource } from './bytes.js';
import { MANIFEST_FILE, WEIGHTS_FILE } from './format.js';
import { load, parseManifest, type ArtifactSource, type LoadOptions } from './load.js';
import type { Model } from './model.js';
import { installKernelFiles } from './kernel-files.js';
import { WORKER_BODY, type SpawnWorker } from './pool.js';
import { avoidRelaxedSimd, preferRelaxedSimd, relaxedSimd } from './relaxed.js';

installKernelFiles();
enableRelaxedSimd();

/**
 * LLMC_RELAXED_SIMD (see ./relaxed.ts): unset, the quantized kernels use relaxed SIMD's exact integer
 * dots where it validates (same bits as without); `on` adds relaxed multiply-adds to the tiled F32
 * prefill kernels (logits may then differ in the last bits between machines; 1.06–1.09× on the
 * kernel alone); `off` uses no relaxed instruction. Node 20 admits relaxed SIMD only behind
 * --experimental-wasm-relaxed-simd, set here before the first kernel module is compiled (they
 * compile lazily).
 */
function enableRelaxedSimd(): void {
  const setting = process.env.LLMC_RELAXED_SIMD;
  if (setting === 'off') return avoidRelaxedSimd();
  // A typo ('1', 'yes') would otherwise look like a measured "no gain".
  if (setting && setting !== 'on') process.stderr.write(`llmc: LLMC_RELAXED_SIMD=${setting} is neither on nor off; the default applies (exact relaxed integer dots only)\n`);
  if (!relaxedSimd()) {
    try {
      (createRequire(import.meta.url)('node:v8') as typeof import('node:v8')).setFlagsFromString('--experimental-wasm-relaxed-simd');
    } catch {
      // an embedder that refuses flags: the kernels without relaxed SIMD
    }
  }
  if (setting === 'on') preferRelaxedSimd();
}

/**
 * Keep V8's young generation at its initial size (`--semi-space-growth-factor=1`, the same as
 * `node --max-semi-space-size=1`; settable after start-up, unlike that flag). Decoding leaves a few
 * tens of KB of short-lived objects a token; left alone V8 grows each semi-space towards 16 MB and
 * the peak RSS by ~5 MB, which put llama-100M 0.3–3.2 MB over weights + KV cache + 64 MB. `llmc run`
 * calls this once at start; a library user's process keeps V8's defaults.
 */
export function holdYoungGeneration(): void {
  try {
    (createRequire(import.meta.url)('node:v8') as typeof import('node:v8')).setFlagsFromString('--semi-space-growth-factor=1');
  } catch {
    // an embedder that refuses flags: V8's default sizing
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
  const readInto = async (offset: number, into: Uint8Array): Promise<void> => {
    const h = await open();
    const length = into.length;
    let done = 0;
    while (done < length) {
      const { bytesRead } = await h.read(into, done, length - done, offset + done);
      if (bytesRead === 0) throw new LlmcError(`short read: wanted ${length} bytes at ${offset}, the file ends first`, file);
      done += bytesRead;
    }
  };
  return {
    name: file,
    size: async () => (await (await open()).stat()).size,
    async read(offset, length) {
      const out = new Uint8Array(length); // its own aligned buffer (not Buffer's shared pool)
      await readInto(offset, out);
      return out;
    },
    readInto,
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

/** The tokenizer files, generation_config.json and chat_template.jinja an artifact directory carries (absent ones are undefined). */
export async function tokenizerFiles(dir: string): Promise<{ tokenizerJson?: string; tokenizerConfigJson?: string; generationConfigJson?: string; chatTemplate?: string }> {
  const read = (f: string) => fsp.readFile(path.join(dir, f), 'utf8').catch(() => undefined);
  const [tokenizerJson, tokenizerConfigJson, generationConfigJson, chatTemplate] = await Promise.all(['tokenizer.json', 'tokenizer_config.json', 'generation_config.json', 'chat_template.jinja'].map(read));
  return { tokenizerJson, tokenizerConfigJson, generationConfigJson, chatTemplate };
}

/**
 * The worker pool's Node adapter (./pool.ts): a worker_threads worker running the pool's code. It
 * does not keep the process alive (a model that is never closed does not hang the exit).
 */
const NODE_WORKER_CODE = `const { parentPort } = require('node:worker_threads');
parentPort.once('message', (m) => (${WORKER_BODY})(m, (x) => parentPort.postMessage(x), (fn) => parentPort.on('message', fn)));`;

export const nodeWorker: SpawnWorker = () => {
  // Loaded on first use: worker_threads costs a one-thread `llmc run` several ms of start-up.
  const { Worker } = createRequire(import.meta.url)('node:worker_threads') as typeof import('node:worker_threads');
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
