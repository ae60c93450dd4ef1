/** Options of the gguf target (`--opt gguf.key=value`; `llmc compile --imatrix FILE` sets gguf.imatrix). */
import type { OptionSchema, OptionSpec } from '../../src/core/pipeline/options.js';

export interface GgufOptions {
  /** An importance matrix file (llama.cpp's imatrix.gguf) to quantize with, as llama-quantize --imatrix. */
  imatrix: string | null;
}

const SPECS: readonly OptionSpec[] = [
  { key: 'imatrix', help: "quantize with this importance matrix (llama.cpp's imatrix.gguf, from llama-imatrix or an llmc artifact), as llama-quantize --imatrix" },
];

export const GGUF_OPTIONS: OptionSchema<GgufOptions> = {
  specs: SPECS,
  parse: (raw) => ({ imatrix: raw.imatrix?.trim() || null }),
};
