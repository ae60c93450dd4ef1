/**
 * A source checkpoint's logits on a fixed set of windows, for comparisons (the compile's quality
 * evaluation, `llmc check`): from the whole-model Engine while its float32 graph is small, else
 * layer-streamed (./engine.ts), which needs one layer's weights plus the windows' hidden states
 * and has no 2 GiB limit. Both give the same logits (bit-identical on dense-28M; test/stream.test.ts).
 * Streamed logits are computed for every window up front and kept in a temporary file (V floats per
 * position: 2.1 GB for 16,384 tokens of a 32k vocabulary), removed by close().
 */
import type { ModelSource } from '../../core/checkpoint/source.js';
import { numel } from '../../core/checkpoint/safetensors.js';
import type { ArchSpec } from '../../core/arch/spec.js';
import { expectedTensors } from '../../core/arch/names.js';
import { LlmcError } from '../../core/errors.js';
import type { Progress } from '../../core/util/progress.js';
import { Engine } from '../engine/index.js';
import { StreamEngine } from './engine.js';
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/**
 * Above this many bytes of float32 weights the source streams: the whole graph's onnxruntime session
 * holds about twice its weights (2.2 GB resident for a 1 GiB graph), while streaming holds one layer.
 */
export const STREAM_ABOVE_BYTES = 2 ** 30;

/** Bytes of the model's weights as float32 (what the whole-model graph holds). */
export const float32Bytes = (spec: ArchSpec): number => expectedTensors(spec).reduce((a, t) => a + numel(t.shape) * 4, 0);

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
}

/** The source's logits on `windows` (streamed: computed up to the head now, the head per window on demand). */
export async function sourceLogits(source: ModelSource, windows: readonly number[][], opts: SourceLogitsOptions = {}): Promise<SourceLogits> {
  const stream = opts.stream ?? float32Bytes(source.spec) > STREAM_ABOVE_BYTES;
  if (!stream) {
    const engine = await Engine.open(source, { threads: opts.threads });
    return { executor: 'onnxruntime', logits: (ids) => engine.logits(ids), activationBytes: 0, close: () => engine.close() };
  }
  // Every window's logits now, onto disk, and the head released: the caller's candidate model (a
  // llama.cpp runner) then runs beside one window's logits, not beside the head's session.
  const engine = new StreamEngine(source, { threads: opts.threads, progress: opts.progress });
  const prefilled = await engine.prefill(windows as number[][]);
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-source-logits-'));
  const file = path.join(dir, 'logits.f32');
  const offsets: number[] = [];
  try {
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
  } catch (e) {
    await fsp.rm(dir, { recursive: true, force: true });
    throw e;
  }
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
    activationBytes: prefilled.activationBytes,
    close: () => fsp.rm(dir, { recursive: true, force: true }),
  };
}
