/** The compile targets. The CLI only looks targets up here; add a backend by adding a line. */
import type { Backend } from './types.js';

export const BACKENDS: Record<string, Backend> = {
  // gguf: ggufBackend,
  // ts: tsBackend,
  // hf: hfBackend,
};
