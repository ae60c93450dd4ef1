/**
 * Per-layer widths in one GGUF: llama.cpp's `deci` architecture (DeciLM / Llama-Nemotron) reads
 * `attention.head_count`, `attention.head_count_kv` and `feed_forward_length` as per-layer arrays
 * (llama_hparams n_head_arr / n_head_kv_arr / n_ff_arr) and builds every layer at its own widths
 * (src/models/deci.cpp); its tensors are named and laid out as llama's (q/k permuted, normal RoPE).
 * A reorder level with per-layer widths (reorder.widths=search, anchors) of a llama model is written
 * as deci; other families have no per-layer form in llama.cpp and are refused in one line.
 */
import { layerNames, isMoeLayer, type ArchSpec, type ModelSource } from '../../src/core/checkpoint/index.js';
import { LlmcError } from '../../src/core/errors.js';
import type { GgufFamily } from '../../src/core/arch/registry.js';

/** One layer's widths as the tensors have them: query heads, KV heads, FFN neurons. */
export interface LayerCounts {
  heads: number;
  kvHeads: number;
  ffn: number;
}

/**
 * Each layer's widths read off its tensors' shapes, or null when every layer has the spec's widths
 * (an ordinary model or a uniform slice: written as its own family).
 */
export function perLayerCounts(source: ModelSource): LayerCounts[] | null {
  const spec = source.spec;
  if (spec.moe) return null; // experts are sliced uniformly (elastic.ts): the spec holds their width
  const rows = (name: string) => source.meta(name)?.shape[0];
  const counts: LayerCounts[] = [];
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerNames(l);
    const q = rows(n.q);
    const k = rows(n.k);
    const f = isMoeLayer(spec, l) ? spec.intermediateSize : rows(n.mlp.gate) ?? rows(n.mlp.up);
    if (q === undefined || k === undefined || f === undefined) return null; // fused or unusual layouts: the family's own writer checks them
    counts.push({ heads: q / spec.headDim, kvHeads: k / spec.headDim, ffn: f });
  }
  const same = counts.every((c) => c.heads === spec.numHeads && c.kvHeads === spec.numKvHeads && c.ffn === spec.intermediateSize);
  return same ? null : counts;
}

/** Why `family` cannot be written with per-layer widths, or null (llama without q/k norms: deci). */
export function deciRefusal(spec: ArchSpec, family: GgufFamily): string | null {
  if (family.arch !== 'llama') return `llama.cpp's ${family.arch} has one head count and one FFN width for all layers (only llama models have a per-layer form here, llama.cpp's deci)`;
  if (spec.qkNorm) return "llama.cpp's deci has no q/k norms";
  if (spec.multipliers) return "llama.cpp's deci has no Granite multipliers";
  if (spec.mlpBias) return "llama.cpp's deci has no MLP biases";
  return null;
}

/** The deci family for a llama model at per-layer widths (its tensors are llama's). */
export function deciFamily(spec: ArchSpec, family: GgufFamily, source: string): GgufFamily {
  const why = deciRefusal(spec, family);
  if (why) throw new LlmcError(`per-layer widths cannot be written as one GGUF: ${why}; compile the levels for --target ts or cuda, or with reorder.widths=uniform`, source);
  return { ...family, arch: 'deci', type70B: false };
}
