/**
 * Non-finite weights (Inf, NaN) are refused wherever weights are read, naming the tensor and the
 * element, unless the user allows them (--allow-nonfinite): a model with NaN weights runs, but
 * produces nothing useful, and llama.cpp refuses or propagates them.
 */
import { LlmcError } from '../errors.js';

/** Index of the first Inf/NaN, or -1. An exponent test on the bits is much cheaper than a float compare. */
export function firstNonFinite(d: Float32Array): number {
  const bits = new Int32Array(d.buffer, d.byteOffset, d.length);
  for (let i = 0; i < bits.length; i++) if ((bits[i] & 0x7f800000) === 0x7f800000) return i;
  return -1;
}

export function nonFiniteError(tensor: string, value: number, element: number, file: string): LlmcError {
  return new LlmcError(`tensor "${tensor}" holds a non-finite value (${value}) at element ${element}; pass --allow-nonfinite to keep it`, file);
}
