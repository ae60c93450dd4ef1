/**
 * An elastic level as a physically smaller model: prefixes of the REORDERED tensors (q/k/v rows,
 * o columns, gate/up rows, down columns), a gather view of the weights (byte ranges survive).
 * Per-layer widths may differ; when every layer has the same width the spec/config are rewritten
 * too, so targets whose format needs uniform widths (config.json, GGUF's llama keys) can emit it.
 */
import { createHash } from 'node:crypto';
import { biasOf, layerNames } from '../arch/names.js';
import { archOf } from '../arch/registry.js';
import { mlpsOf } from '../arch/units.js';
import { gatherSource, type Gather, type ModelSource } from '../checkpoint/source.js';
import { LlmcError } from '../errors.js';
import type { LayerWidth } from '../records/elastic.js';

/** True when all layers share one width (a plain config.json can describe the sub-model). */
export function uniformWidth(widths: LayerWidth[]): LayerWidth | null {
  const w = widths[0];
  return widths.every((x) => x.kvGroups === w.kvGroups && x.qHeadsPerGroup === w.qHeadsPerGroup && x.ffn === w.ffn) ? w : null;
}

const prefix = (n: number) => Int32Array.from({ length: n }, (_, i) => i);

export function sliceSource(base: ModelSource, widths: LayerWidth[], label: string): ModelSource {
  const spec = base.spec;
  if (widths.length !== spec.numLayers) throw new LlmcError(`slice: ${widths.length} layer widths for ${spec.numLayers} layers`);
  const R = spec.numHeads / spec.numKvHeads;
  const hd = spec.headDim;
  const gathers = new Map<string, Gather>();
  widths.forEach((w, l) => {
    if (w.qHeadsPerGroup !== R && w.kvGroups > 1) {
      throw new LlmcError(`slice: layer ${l} keeps ${w.qHeadsPerGroup} of ${R} query heads per group: not a contiguous prefix (SPEC §4.2)`);
    }
    const n = layerNames(l);
    const q = { rows: prefix(w.kvGroups * w.qHeadsPerGroup * hd) };
    const kv = { rows: prefix(w.kvGroups * hd) };
    gathers.set(n.q, q).set(n.k, kv).set(n.v, kv).set(n.o, { cols: q.rows });
    if (spec.qkvBias) gathers.set(n.qBias, q).set(n.kBias, kv).set(n.vBias, kv);
    for (const m of mlpsOf(spec, l)) {
      const f = m.elastic ? w.ffn : m.width;
      if (f === m.width) continue;
      const ff = { rows: prefix(f) };
      gathers.set(m.gate, ff).set(m.up, ff).set(m.down, { cols: ff.rows });
      if (spec.mlpBias) gathers.set(biasOf(m.gate), ff).set(biasOf(m.up), ff);
    }
  });
  // A full-width prefix is no gather at all.
  for (const [name, g] of gathers) {
    const shape = base.meta(name)?.shape;
    if (!shape) throw new LlmcError(`slice: missing tensor "${name}"`, base.description);
    const keep: Gather = {};
    if (g.rows && g.rows.length !== shape[0]) keep.rows = g.rows;
    if (g.cols && g.cols.length !== shape[shape.length - 1]) keep.cols = g.cols;
    if (keep.rows || keep.cols) gathers.set(name, keep);
    else gathers.delete(name);
  }
  const u = uniformWidth(widths);
  let newSpec = spec;
  let config = base.assets.config;
  if (u) {
    const heads = u.kvGroups * u.qHeadsPerGroup;
    newSpec = { ...spec, numHeads: heads, numKvHeads: u.kvGroups };
    config = { ...config, num_attention_heads: heads, num_key_value_heads: u.kvGroups, head_dim: hd };
    if (spec.moe) {
      newSpec.moe = { ...spec.moe, expertIntermediateSize: u.ffn };
      config[archOf(spec).moe!.expertWidthKey] = u.ffn;
    } else {
      newSpec.intermediateSize = u.ffn;
      config.intermediate_size = u.ffn;
    }
  }
  const paramsHash = createHash('sha256').update(JSON.stringify(widths)).digest('hex');
  return gatherSource(base, { label, paramsHash, gathers, spec: newSpec, config });
}
