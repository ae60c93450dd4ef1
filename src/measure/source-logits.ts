/**
 * A source checkpoint's logits on a fixed set of windows, for comparisons (the compile's quality
 * evaluation, `llmc check`): from the whole-model Engine while its float32 graph is small, else
 * layer-streamed (src/exec/stream/engine.ts), which needs one layer's weights plus the windows' hidden states
 * and has no 2 GiB limit. Both give the same logits (bit-identical on dense-28M; test/stream.test.ts).
 * Streamed logits are computed for every window up front (in a child process when it can) and kept in
 * a temporary file (V floats per position: 2.1 GB for 16,384 tokens of a 32k vocabulary), removed by close().
 */
import type { ModelSource } from '../core/checkpoint/source.js';
import { LlmcError } from '../core/errors.js';
import type { Progress } from '../core/util/progress.js';
import { Engine } from '../exec/engine/index.js';
import { StreamEngine } from '../exec/stream/engine.js';
import { aboveStreamThreshold, float32Bytes } from '../exec/stream/size.js';
import { streamDevice, type Device } from '../exec/stream/device.js';
import { streamSettings, type StreamSettings } from '../exec/stream/spill.js';
import { onInterrupt } from '../core/util/interrupt.js';
import { pieceCache } from './stream-cache.js';
import { fork } from 'node:child_process';
import { existsSync, promises as fsp, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import os from 'node:os';
import path from 'node:path';

export interface SourceLogits {
  /** 'onnxruntime' (the whole graph) or 'onnxruntime, layer-streamed'. */
  executor: string;
  /** Row-major [T, V] logits at every position of one of the windows given. */
  logits(ids: number[]): Promise<Float32Array>;
  /** Streamed: bytes of the windows' hidden states held (0 for the whole graph). */
  activationBytes: number;
  close(): Promise<void>;
}

export interface SourceLogitsOptions {
  threads?: number;
  /** true / false forces an executor; default: streamed above STREAM_ABOVE_BYTES. */
  stream?: boolean;
  /** Streamed: one tick per layer and window. */
  progress?: Progress;
  /** Streamed: compute in a child process when the source is a checkpoint directory (default true). */
  child?: boolean;
  /**
   * Streamed: the profile cache directory each piece's carried states go to as it finishes, so a
   * stopped evaluation resumes at the next piece and a second one reads them all (src/measure/stream-cache.ts).
   */
  cacheDir?: string;
}

/**
 * Every window's logits, streamed, into `file` (row-major [T, V] per window, one after the other):
 * the pieces up to the head, then the head window by window, released before returning. Returns
 * the byte offset of each window (and the end) and the hidden states' bytes.
 */
export async function writeStreamedLogits(source: ModelSource, windows: readonly number[][], file: string, opts: { threads?: number; progress?: Progress; cacheDir?: string } = {}): Promise<{ offsets: number[]; activationBytes: number }> {
  const pieces = opts.cacheDir ? await pieceCache(source, opts.cacheDir) : undefined;
  const engine = new StreamEngine(source, { threads: opts.threads, progress: opts.progress, pieces });
  const prefilled = await engine.prefill(windows as number[][]);
  const offsets: number[] = [];
  const fh = await fsp.open(file, 'w');
  try {
    let at = 0;
    opts.progress?.start(`quality: the source's head, ${windows.length} windows`, windows.length);
    for (let i = 0; i < windows.length; i++) {
      const l = await prefilled.logits(i);
      opts.progress?.tick();
      offsets.push(at);
      await fh.write(new Uint8Array(l.buffer, l.byteOffset, l.byteLength), 0, l.byteLength, at);
      at += l.byteLength;
    }
    offsets.push(at);
    opts.progress?.done();
  } finally {
    await fh.close();
    await prefilled.close();
  }
  return { offsets, activationBytes: prefilled.activationBytes };
}

/** The source's logits on `windows` (streamed: computed onto disk now, read back per window on demand). */
export async function sourceLogits(source: ModelSource, windows: readonly number[][], opts: SourceLogitsOptions = {}): Promise<SourceLogits> {
  const stream = opts.stream ?? aboveStreamThreshold(float32Bytes(source.spec));
  if (!stream) {
    const engine = await Engine.open(source, { threads: opts.threads });
    return { executor: 'onnxruntime', logits: (ids) => engine.logits(ids), activationBytes: 0, close: () => engine.close() };
  }
  // Every window's logits now, onto disk, and the head released: the caller's candidate model (a
  // llama.cpp runner) then runs beside one window's logits, not beside the head's session. In a child
  // process where it can (a checkpoint directory, llmc built): what onnxruntime and the allocator keep
  // of the freed pieces (≈ 600 MB at 1.1B) goes back with the child, before the candidate loads.
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-source-logits-'));
  const file = path.join(dir, 'logits.f32');
  const unregister = onInterrupt(() => rmSync(dir, { recursive: true, force: true }));
  const remove = async () => {
    unregister();
    await fsp.rm(dir, { recursive: true, force: true });
  };
  let written: { offsets: number[]; activationBytes: number };
  try {
    // a checkpoint itself (not a pass's view of one): the child reopens its directory and checks the identity
    const child = (opts.child ?? true) && source.description === source.dir ? childScript() : null;
    written = child ? await inChild(child, source, windows, file, opts) : await writeStreamedLogits(source, windows, file, opts);
  } catch (e) {
    await remove();
    throw e;
  }
  const { offsets } = written;
  const byIds = new Map(windows.map((w, i) => [w.join(), i]));
  return {
    executor: 'onnxruntime, layer-streamed',
    logits: async (ids) => {
      const i = windows.indexOf(ids);
      const at = i >= 0 ? i : byIds.get(ids.join());
      if (at === undefined) throw new LlmcError('internal: streamed source logits asked for a window it was not given');
      const fh = await fsp.open(file, 'r');
      try {
        const out = new Float32Array((offsets[at + 1] - offsets[at]) / 4);
        await fh.read(new Uint8Array(out.buffer), 0, out.byteLength, offsets[at]);
        return out;
      } finally {
        await fh.close();
      }
    },
    activationBytes: written.activationBytes,
    close: remove,
  };
}

/** ./source-child.js beside this module, when running from llmc's build (not from TypeScript sources under a test runner). */
function childScript(): string | null {
  if (!import.meta.url.endsWith('/src/measure/source-logits.js')) return null;
  const script = fileURLToPath(new URL('./source-child.js', import.meta.url));
  return existsSync(script) ? script : null;
}

/** writeStreamedLogits in a child process (./source-child.ts) reading the checkpoint directory itself; its progress drawn here. */
async function inChild(script: string, source: ModelSource, windows: readonly number[][], file: string, opts: SourceLogitsOptions): Promise<{ offsets: number[]; activationBytes: number }> {
  const identity = await source.identity();
  return new Promise((resolve, reject) => {
    const child = fork(script, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], execArgv: [], serialization: 'advanced' });
    let result: { offsets: number[]; activationBytes: number } | undefined;
    let failure: LlmcError | undefined;
    child.on('message', (m: ChildMessage) => {
      if (m.kind === 'start') opts.progress?.start(m.label, m.total);
      else if (m.kind === 'tick') opts.progress?.tick(m.units);
      else if (m.kind === 'status') opts.progress?.status?.(m.text);
      else if (m.kind === 'done') opts.progress?.done();
      else if (m.kind === 'result') result = m.result;
      else if (m.kind === 'error') failure = new LlmcError(m.message, m.file, m.exitCode);
    });
    child.on('error', (e) => reject(new LlmcError(`cannot start the process that streams the source's logits: ${e.message}`)));
    child.on('exit', (code, signal) => {
      if (result) resolve(result);
      else reject(failure ?? new LlmcError(`the process streaming the source's logits ended (${signal ?? `exit ${code}`}) before it finished`, source.dir));
    });
    const job: ChildJob = { dir: source.dir, identity, device: streamDevice(), settings: streamSettings(), allowNonFinite: source.allowNonFinite, windows: windows as number[][], file, threads: opts.threads, cacheDir: opts.cacheDir };
    child.send(job);
  });
}

/** What the parent sends the child: everything writeStreamedLogits needs, the checkpoint by its directory. */
export interface ChildJob {
  dir: string;
  /** The source's identity: the child refuses a directory whose checkpoint differs. */
  identity: string;
  /** The parent's --device. */
  device: Device;
  /** The parent's memory budget and spill directory. */
  settings: StreamSettings;
  allowNonFinite: boolean;
  windows: number[][];
  file: string;
  threads?: number;
  cacheDir?: string;
}

/** What the child answers: its progress, then its result or the one-line error. */
export type ChildMessage =
  | { kind: 'start'; label: string; total: number }
  | { kind: 'tick'; units?: number }
  | { kind: 'status'; text: string }
  | { kind: 'done' }
  | { kind: 'result'; result: { offsets: number[]; activationBytes: number } }
  | { kind: 'error'; message: string; file?: string; exitCode: 1 | 2 };
