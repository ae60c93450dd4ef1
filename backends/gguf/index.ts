/**
 * Target `gguf`: one GGUF v3 file llama.cpp loads as is (model.gguf), byte-identical to llama.cpp's
 * own converter and quantizer. This is its descriptor; ./emit.ts writes the file.
 */
import type { FormatRequest, TargetCapabilities, TargetDescriptor } from '../../src/core/pipeline/target.js';
import { blockAlongRow, QUANT_TYPES } from '../../src/core/quant/types.js';
import { archOf } from '../../src/core/arch/registry.js';
import { DEFAULT_QUANT, validChoices } from './presets.js';
import { GGUF_INFO, type GgufInfo } from './info.js';
import { GGUF_OPTIONS, type GgufOptions } from './options.js';

/** GGUF's formats: llama.cpp's presets and plain ggml types for --quant, ggml types per tensor. */
export const GGUF_FORMATS = { quant: validChoices(), default: DEFAULT_QUANT, tensorTypes: Object.keys(QUANT_TYPES) };

/**
 * Block along a row of the widest-blocked format the request can write. Without --quant the file is
 * F16, but levels stay 32-aligned so a later llama-quantize of it to a block type keeps whole blocks.
 */
export function ggufQuantBlock(r: FormatRequest): number {
  return Math.max(r.quant === undefined ? 32 : blockAlongRow(r.quant), ...r.tensorTypes.map((t) => blockAlongRow(t.type)));
}

/** What a GGUF carries of the graph: llama.cpp writes sliding-window models without their window (metadata.ts notes it). */
export const GGUF_LOWERS: TargetCapabilities['lowers'] = {
  moe: true,
  'sliding-window': { approximates: "llama.cpp's llama architecture attends to the whole context" },
  'tree-mask': false,
  'chunk-graphs': false,
  'shadow-outliers': false,
};

export const gguf: TargetDescriptor<GgufOptions, GgufInfo> = {
  name: 'gguf',
  description: 'GGUF v3 for llama.cpp (F32/F16/BF16, Q8_0, Q4_0..Q5_1, K-quants, IQ4_NL/IQ4_XS, llama.cpp presets like Q4_K_M; --imatrix)',
  formats: GGUF_FORMATS,
  options: GGUF_OPTIONS,
  capabilities: { elasticWidths: { kind: 'none' }, perTensorFormats: true, perExpertFormats: false, qdq: false, lowers: GGUF_LOWERS, speculative: false, expertCache: false, kvTypes: ['f16', 'f32', 'q8_0'] },
  quantBlock: ggufQuantBlock,
  requires: [],
  info: GGUF_INFO,
  singleFile: { extension: '.gguf', file: 'model.gguf' },
  writesAs: (spec) => archOf(spec).gguf.arch,
  load: async () => (await import('./emit.js')).ggufTarget,
  open: async (a, o) => (await import('./run.js')).openGguf(a, o),
  foreign: { extension: '.gguf', open: async (file) => (await import('./bare.js')).openBareGguf(file) },
};
