/**
 * Layer-streamed execution (./engine.ts) and when llmc uses it instead of the whole-model Engine:
 * for models whose float32 graph is above STREAM_ABOVE_BYTES (./size.ts).
 */
import type { ModelSource } from '../../core/checkpoint/source.js';
import type { ArchSpec } from '../../core/arch/spec.js';
import type { ModelGraph } from '../../core/ir/ir.js';
import type { Progress } from '../../core/util/progress.js';
import { Engine, type TapResult, type TapSpec } from '../engine/index.js';
import { StreamEngine, type PieceHook } from './engine.js';
import { aboveStreamThreshold, float32Bytes } from './size.js';

export { StreamEngine, type Branch, type DivergenceBranch, type StreamOptions, type StreamedLogits, type PieceHook, type PieceResult } from './engine.js';
export { StreamDecoder, StreamDecodeSession, DECODE_WEIGHT_BYTES, type DecodeOptions } from './decode.js';
export { aboveStreamThreshold, float32Bytes, STREAM_ABOVE_BYTES } from './size.js';
export { streamSegments, type Segment } from '../../core/ir/segments.js';
export { streamSettings, useStreamSettings, parseBytes, type StreamSettings } from './spill.js';
export { DEVICES, checkDevice, useStreamDevice, streamDevice, type Device } from './device.js';

/** What calibration statistics are measured with: Engine.tap or StreamEngine.tap (the same results). */
export interface Tapper {
  readonly spec: ArchSpec;
  tap(ids: number[][], spec: TapSpec | TapSpec[]): Promise<TapResult>;
}

/** Stream this model's calibration? (its float32 graph is large; `force` decides instead when given). */
export const streams = (spec: ArchSpec, force?: boolean): boolean => force ?? aboveStreamThreshold(float32Bytes(spec));

/** A tapper for `source`: streamed for a large model, else a whole-model Engine; close() releases it. */
export async function openTapper(source: ModelSource, opts: { graph?: ModelGraph; threads?: number; progress?: Progress; stream?: boolean; pieces?: PieceHook } = {}): Promise<Tapper & { close(): Promise<void> }> {
  if (streams(source.spec, opts.stream)) {
    const s = new StreamEngine(source, { graph: opts.graph, threads: opts.threads, progress: opts.progress, pieces: opts.pieces });
    return { spec: s.spec, tap: (ids, spec) => s.tap(ids, spec), close: async () => {} };
  }
  const e = await Engine.open(source, { graph: opts.graph, threads: opts.threads });
  return { spec: e.spec, tap: (ids, spec) => e.tap(ids, spec), close: () => e.close() };
}
