/**
 * A runnable Model straight from f32 tensors (a compile unit's weights), without writing an
 * artifact: passes that measure the model the way the TS runtime runs it use this. Every tensor the
 * architecture expects is read once (f32) into the kernels' memory. Browser-safe.
 */
import { expectedTensors } from '../../core/arch/names.js';
import type { ArchSpec } from '../../core/arch/spec.js';
import { LlmcError } from '../../core/errors.js';
import { alignUp } from './format.js';
import { Weight } from './kernels.js';
import { Model, weightTable } from './model.js';
import { WasmArena } from './wasm.js';

export interface TensorReader {
  readonly spec: ArchSpec;
  readF32(name: string): Promise<Float32Array>;
}

export async function modelFromTensors(source: TensorReader, opts: { wasm?: boolean } = {}): Promise<Model> {
  const spec = source.spec;
  const expected = expectedTensors(spec);
  let size = 0;
  const offsets = new Map<string, number>();
  for (const t of expected) {
    offsets.set(t.name, size);
    size += alignUp(t.shape.reduce((a, b) => a * b, 1) * 4);
  }
  const maxDim = Math.max(...expected.flatMap((t) => t.shape));
  const arena = opts.wasm === false ? null : WasmArena.create(size, maxDim);
  const memory = arena ? arena.weights(size) : new Uint8Array(size);
  const weights = new Map<string, Weight>();
  for (const t of expected) {
    const data = await source.readF32(t.name);
    const numel = t.shape.reduce((a, b) => a * b, 1);
    if (data.length !== numel) throw new LlmcError(`tensor "${t.name}" has ${data.length} values, the architecture needs ${numel}`);
    const at = offsets.get(t.name)!;
    const bytes = memory.subarray(at, at + numel * 4);
    new Float32Array(bytes.buffer, bytes.byteOffset, numel).set(data);
    const cols = t.shape[t.shape.length - 1];
    weights.set(t.name, new Weight(t.name, 'F32', numel / cols, cols, bytes, arena));
  }
  const weight = (name: string) => {
    const w = weights.get(name);
    if (!w) throw new LlmcError(`tensor "${name}" is not part of the model`);
    return w;
  };
  return new Model(spec, weightTable((name) => weights.has(name), weight, opts.wasm === false));
}
