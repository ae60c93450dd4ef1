/**
 * Pass `expert-bits`: a weight format per MoE expert (EdgeMoE's expert-wise bit widths, searched as
 * an exact multiple-choice knapsack or by the paper's procedure), the routing profile, and the
 * predictor and cache inputs the TS runtime's expert offloading reads. This is its descriptor (cheap
 * to import); the work is in ./run.ts. docs/expert-bits.md describes the method.
 */
import { archOf, SUPPORTED_MODEL_TYPES } from '../../src/core/arch/registry.js';
import { UsageError } from '../../src/core/errors.js';
import type { PassDescriptor } from '../../src/core/pipeline/pass.js';
import { EXPERT_TABLE } from '../../src/core/records/expert-table.js';
import { checkExpertBits, EXPERT_BITS_OPTIONS, type ParsedExpertBitsOptions } from './options.js';

export const expertBits: PassDescriptor<ParsedExpertBitsOptions> = {
  name: 'expert-bits',
  description: 'a weight format per MoE expert under a size or loss budget (EdgeMoE; exact knapsack), routing predictor for offloading',
  options: EXPERT_BITS_OPTIONS,
  flags: [],
  after: ['reorder'],
  requires: [],
  produces: EXPERT_TABLE,
  checkArch(spec) {
    if (!spec.moe) throw new UsageError(`expert-bits takes mixture-of-experts models (${SUPPORTED_MODEL_TYPES.filter((t) => archOf({ modelType: t }).moe).join(', ')}); this is a dense ${spec.modelType} model`);
  },
  check: checkExpertBits,
  load: async () => (await import('./run.js')).expertBitsPass,
};
