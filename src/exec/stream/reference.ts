/**
 * A source checkpoint's logits on a fixed set of windows, for comparisons (the compile's quality
 * evaluation, `llmc check`): from the whole-model Engine while its float32 graph is small, else
 * layer-streamed (./engine.ts), which needs one layer's weights plus the windows' hidden states
 * and has no 2 GiB limit. Both give the same logits (bit-identical on dense-28M; test/stream.test.ts).
 */
import type { ModelSource } from '../../core/checkpoint/source.js';
import type { ArchSpec } from '../../core/arch/spec.js';
import { expectedTensors } from '../../core/arch/names.js';
import { LlmcError } from '../../core/errors.js';
import type { Progress } from '../../core/util/progress.js';
import { Engine } from '../engine/index.js';
import { StreamEngine } from './engine.js';

/**
 * Above this many bytes of float32 weights the source streams: the whole graph's onnxruntime session
 * holds about twice its weights (2.2 GB resident for a 1 GiB graph), while streaming holds one layer.
 */
export const STREAM_ABOVE_BYTES = 2 ** 30;

/** Bytes of the model's weights as float32 (what the whole-model graph holds). */
export const float32Bytes = (spec: ArchSpec): number => expectedTensors(spec).reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1) * 4, 0);

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
  const prefilled = await new StreamEngine(source, { threads: opts.threads, progress: opts.progress }).prefill(windows as number[][]);
  const byIds = new Map(windows.map((w, i) => [w.join(), i]));
  return {
    executor: 'onnxruntime, layer-streamed',
    logits: (ids) => {
      const i = windows.indexOf(ids);
      const at = i >= 0 ? i : byIds.get(ids.join());
      if (at === undefined) throw new LlmcError('internal: streamed source logits asked for a window it was not given');
      return prefilled.logits(at);
    },
    activationBytes: prefilled.activationBytes,
    close: () => prefilled.close(),
  };
}
