/**
 * A family at its transformers config class's defaults, at a small size: what `llmc list architectures`
 * asks the targets' and passes' own checks about. Sizes are made up; the features that depend on no
 * size (q/k norms, norm placement, soft-caps, the sliding / global layout of 8 layers, as many KV heads as
 * heads where the class defaults to that) are the class's.
 */
import { ARCHITECTURES, type ModelType } from './registry.js';
import { normalizeConfig } from './spec.js';
import type { ArchSpec } from './types.js';

const SIZES = { hidden_size: 64, intermediate_size: 128, num_hidden_layers: 8, num_attention_heads: 4, vocab_size: 256 };
/** Expert counts and widths, under whichever of these keys the family reads (they have no class default). */
const EXPERTS: Record<string, number> = { num_experts: 4, num_local_experts: 4, num_experts_per_tok: 2, moe_intermediate_size: 64, shared_expert_intermediate_size: 64 };

export function exampleSpec(modelType: ModelType): ArchSpec {
  const keys = ARCHITECTURES[modelType].keys;
  const experts = Object.fromEntries(Object.entries(EXPERTS).filter(([k]) => keys.includes(k)));
  return normalizeConfig({ model_type: modelType, ...SIZES, ...experts }, `${modelType} at its config class's defaults`);
}
