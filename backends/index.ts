/**
 * The compile targets. The CLI only looks targets up here; add a backend by adding a line.
 * Each loads on use: a target's dependencies (onnx-proto, tokenizer code, ...) would otherwise cost
 * every command their start-up time.
 */
import type { Backend } from './types.js';

export const BACKENDS: Record<string, () => Promise<Backend>> = {
  gguf: async () => (await import('./gguf/index.js')).ggufBackend,
  ts: async () => (await import('./ts/index.js')).tsBackend,
  hf: async () => (await import('./hf/index.js')).hfBackend,
  'gguf-levels': async () => (await import('./gguf-levels/index.js')).ggufLevelsBackend,
};
