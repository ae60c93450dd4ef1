/** Target `gguf-levels`: one GGUF per elastic level of the reorder pass (<level>/model.gguf). ./emit.ts writes them. */
import { NO_OPTIONS } from '../../../src/core/pipeline/options.js';
import type { TargetDescriptor } from '../../../src/core/pipeline/target.js';
import { ELASTIC_LEVELS } from '../../../src/core/records/elastic.js';
import { GGUF_FORMATS, ggufQuantBlock } from '../index.js';

export const ggufLevels: TargetDescriptor = {
  name: 'gguf-levels',
  description: 'one GGUF per elastic level of --passes reorder (uniform widths), <level>/model.gguf',
  formats: GGUF_FORMATS,
  options: NO_OPTIONS,
  capabilities: {
    elasticWidths: { kind: 'uniform', why: 'llama GGUF has one head/FFN count for all layers' },
    perTensorFormats: true,
    perExpertFormats: false,
    qdq: false,
    chunkGraphs: false,
    adapters: true,
  },
  quantBlock: ggufQuantBlock,
  requires: [ELASTIC_LEVELS],
  load: async () => (await import('./emit.js')).ggufLevelsTarget,
  open: async (a, o) => (await import('./run.js')).openGgufLevels(a, o),
};
