/**
 * How big a model's whole float32 graph is, and above what size llmc streams it layer by layer
 * instead of building the whole-model Engine.
 */
import { numel } from '../../core/checkpoint/safetensors.js';
import type { ArchSpec } from '../../core/arch/spec.js';
import { expectedTensors } from '../../core/arch/names.js';
import { streamSettings } from './spill.js';

/**
 * Above this many bytes of float32 weights the source streams: the whole graph's onnxruntime session
 * holds about twice its weights (2.2 GB resident for a 1 GiB graph), while streaming holds one layer.
 */
export const STREAM_ABOVE_BYTES = 2 ** 30;

/** Bytes of the model's weights as float32 (what the whole-model graph holds). */
export const float32Bytes = (spec: ArchSpec): number => expectedTensors(spec).reduce((a, t) => a + numel(t.shape) * 4, 0);

/** Whether this many bytes of weights stream: above `--stream-above` when given, else STREAM_ABOVE_BYTES. */
export const aboveStreamThreshold = (bytes: number): boolean => bytes > (streamSettings().aboveBytes ?? STREAM_ABOVE_BYTES);
