/**
 * The units of a layer that elastic widths keep or drop: KV groups, query heads inside a group, and
 * the neurons of each MLP. Which MLPs narrow with a level is decided here, once, for the pass that
 * plans levels, the slicer that cuts them and the IR that runs them.
 */
import { layerNames, moeNames } from './names.js';
import { isMoeLayer, type ArchSpec } from './spec.js';

/** One MLP of a layer; `elastic`: it narrows with the level (dense MLPs, routed experts) or stays full. */
export interface LayerMlp {
  prefix: string;
  gate: string;
  up: string;
  down: string;
  width: number;
  elastic: boolean;
}

/**
 * The MLPs of layer l. Dense MLPs and routed experts follow the level; in MoE models the shared
 * expert and the dense layers (qwen2_moe mlp_only_layers) stay full, since a level's `ffn` is an
 * expert width there.
 */
export function mlpsOf(spec: ArchSpec, l: number): LayerMlp[] {
  if (!isMoeLayer(spec, l)) {
    const n = layerNames(l).mlp;
    return [{ prefix: `model.layers.${l}.mlp`, ...n, width: spec.intermediateSize, elastic: !spec.moe }];
  }
  const m = moeNames(spec, l);
  const out: LayerMlp[] = m.experts.map((e) => ({
    prefix: e.gate.replace(/\.(gate_proj|w1)\.weight$/, ''),
    ...e,
    width: spec.moe!.expertIntermediateSize,
    elastic: true,
  }));
  if (m.shared) out.push({ prefix: `model.layers.${l}.mlp.shared_expert`, ...m.shared, width: spec.moe!.sharedExpertIntermediateSize!, elastic: false });
  return out;
}

