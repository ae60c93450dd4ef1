/**
 * A level as a physically smaller model: prefixes of the REORDERED tensors (q/k/v rows, o columns,
 * gate/up rows, down columns), read lazily. Per-layer widths may differ; when every layer has the
 * same width the spec/config are rewritten too, so backends whose format needs uniform widths
 * (Hugging Face config.json) can emit it.
 */
import { createHash } from 'node:crypto';
import { layerNames } from '../../src/core/arch/names.js';
import type { ModelSource, TensorMeta } from '../../src/core/checkpoint/source.js';
import { LlmcError } from '../../src/core/errors.js';
import { mlpsOf } from './permute.js';
import type { LayerWidth } from './planner.js';

interface Slice {
  rows?: number;
  cols?: number;
}

/** True when all layers share one width (a plain config.json can describe the sub-model). */
export function uniformWidth(widths: LayerWidth[]): LayerWidth | null {
  const w = widths[0];
  return widths.every((x) => x.kvGroups === w.kvGroups && x.qHeadsPerGroup === w.qHeadsPerGroup && x.ffn === w.ffn) ? w : null;
}

export function sliceSource(base: ModelSource, widths: LayerWidth[], label: string): ModelSource {
  const spec = base.spec;
  if (widths.length !== spec.numLayers) throw new LlmcError(`slice: ${widths.length} layer widths for ${spec.numLayers} layers`);
  const R = spec.numHeads / spec.numKvHeads;
  const hd = spec.headDim;
  const slices = new Map<string, Slice>();
  widths.forEach((w, l) => {
    if (w.qHeadsPerGroup !== R && w.kvGroups > 1) {
      throw new LlmcError(`slice: layer ${l} keeps ${w.qHeadsPerGroup} of ${R} query heads per group: not a contiguous prefix (SPEC §4.2)`);
    }
    const n = layerNames(l);
    const q = w.kvGroups * w.qHeadsPerGroup * hd;
    const kv = w.kvGroups * hd;
    slices.set(n.q, { rows: q }).set(n.k, { rows: kv }).set(n.v, { rows: kv }).set(n.o, { cols: q });
    if (spec.qkvBias) slices.set(n.qBias, { rows: q }).set(n.kBias, { rows: kv }).set(n.vBias, { rows: kv });
    for (const m of mlpsOf(spec, l)) {
      const f = m.elastic ? w.ffn : m.width;
      if (f === m.width) continue;
      slices.set(m.gate, { rows: f }).set(m.up, { rows: f }).set(m.down, { cols: f });
      if (spec.mlpBias) slices.set(m.gate.replace(/\.weight$/, '.bias'), { rows: f }).set(m.up.replace(/\.weight$/, '.bias'), { rows: f });
    }
  });
  const metaOf = (t: TensorMeta): TensorMeta => {
    const s = slices.get(t.name);
    if (!s) return t;
    const shape = [...t.shape];
    if (s.rows !== undefined) shape[0] = s.rows;
    if (s.cols !== undefined) shape[1] = s.cols;
    return { ...t, shape };
  };
  const tensors = base.tensors.map(metaOf);
  const byName = new Map(tensors.map((t) => [t.name, t]));
  const u = uniformWidth(widths);
  let newSpec = spec;
  let config = base.assets.config;
  if (u) {
    const heads = u.kvGroups * u.qHeadsPerGroup;
    newSpec = { ...spec, numHeads: heads, numKvHeads: u.kvGroups };
    config = { ...config, num_attention_heads: heads, num_key_value_heads: u.kvGroups, head_dim: hd };
    if (spec.moe) {
      newSpec.moe = { ...spec.moe, expertIntermediateSize: u.ffn };
      config[spec.modelType === 'mixtral' ? 'intermediate_size' : 'moe_intermediate_size'] = u.ffn;
    } else {
      newSpec.intermediateSize = u.ffn;
      config.intermediate_size = u.ffn;
    }
  }
  const paramsHash = createHash('sha256').update(JSON.stringify(widths)).digest('hex');
  return {
    spec: newSpec,
    assets: { ...base.assets, config },
    tensors,
    description: `${base.description} | ${label}`,
    dir: base.dir,
    meta: (name) => byName.get(name),
    readF32: async (name) => {
      const data = await base.readF32(name);
      const s = slices.get(name);
      if (!s) return data;
      const full = base.meta(name)!.shape;
      const cols = full.length === 1 ? 1 : full[1];
      if (s.rows !== undefined) return data.slice(0, s.rows * cols);
      const out = new Float32Array(full[0] * s.cols!);
      for (let r = 0; r < full[0]; r++) out.set(data.subarray(r * cols, r * cols + s.cols!), r * s.cols!);
      return out;
    },
    identity: async () => createHash('sha256').update(await base.identity()).update(label).update(paramsHash).digest('hex'),
  };
}
