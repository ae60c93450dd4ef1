/** The compile targets. The CLI only looks targets up here; add a backend by adding a line. */
import type { Backend } from './types.js';
import { ggufBackend } from './gguf/index.js';
import { tsBackend } from './ts/index.js';
import { hfBackend } from './hf/index.js';
import { ggufLevelsBackend } from './gguf-levels/index.js';

export const BACKENDS: Record<string, Backend> = {
  gguf: ggufBackend,
  ts: tsBackend,
  hf: hfBackend,
  'gguf-levels': ggufLevelsBackend,
};
