/** Target `gguf-levels`: one GGUF per elastic level of the reorder pass (<level>/model.gguf). ./emit.ts writes them. */
import { NO_OPTIONS } from '../../../src/core/pipeline/options.js';
import type { TargetDescriptor } from '../../../src/core/pipeline/target.js';
import { ELASTIC_LEVELS } from '../../../src/core/records/elastic.js';
import { archOf } from '../../../src/core/arch/registry.js';
import { UsageError } from '../../../src/core/errors.js';
import { GGUF_FORMATS, GGUF_LOWERS, ggufQuantBlock } from '../index.js';
import { GGUF_LEVELS_INFO, type GgufLevelsInfo } from './info.js';

export const ggufLevels: TargetDescriptor<unknown, GgufLevelsInfo> = {
  name: 'gguf-levels',
  description: 'one GGUF per elastic level of --passes reorder (uniform widths; reorder.widths=search: per-layer, llama.cpp deci), <level>/model.gguf',
  formats: GGUF_FORMATS,
  options: NO_OPTIONS,
  capabilities: {
    elasticWidths: { kind: 'uniform', why: 'llama GGUF has one head/FFN count for all layers', searchPerLayer: true },
    perTensorFormats: true,
    perExpertFormats: false,
    qdq: false,
    lowers: GGUF_LOWERS,
    adapters: true,
    speculative: false,
    expertCache: false,
  },
  quantBlock: ggufQuantBlock,
  requires: [ELASTIC_LEVELS],
  info: GGUF_LEVELS_INFO,
  writesAs: (spec) => archOf(spec).gguf.arch,
  checkArch(spec) {
    // Levels drop whole KV groups (or, with one group, query heads): where llama.cpp's arch loads the
    // model but not one with fewer heads (sizes fixed to n_embd, ...), refuse before reorder runs.
    const fewer = spec.numKvHeads > 1 ? { numHeads: spec.numHeads - spec.numHeads / spec.numKvHeads, numKvHeads: spec.numKvHeads - 1 } : { numHeads: spec.numHeads - 1, numKvHeads: 1 };
    const family = archOf(spec).gguf;
    const why = fewer.numHeads > 0 && family.refuse(spec) === null ? family.refuse({ ...spec, ...fewer }) : null;
    if (why) throw new UsageError(`--target gguf-levels writes levels with fewer attention heads, which llama.cpp's ${family.arch} does not load (${why}); compile ${spec.modelType} levels for --target ts or cuda`);
  },
  // Each level is its own GGUF file: its size is the level's bytes.
  levelBytes(m, lv) {
    const file = GGUF_LEVELS_INFO.read(m.targetInfo).levels.find((l) => l.id === lv.id)?.file;
    return m.files.find((f) => f.path === file)?.size ?? 0;
  },
  load: async () => (await import('./emit.js')).ggufLevelsTarget,
  open: async (a, o) => (await import('./run.js')).openGgufLevels(a, o),
};
