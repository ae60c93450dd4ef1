/**
 * An elastic level as a physically smaller model: prefixes of the REORDERED tensors (q/k/v rows,
 * o columns, gate/up rows, down columns), a gather view of the weights (byte ranges survive).
 * Per-layer widths may differ; when every layer has the same width the spec/config are rewritten
 * too, so targets whose format needs uniform widths (config.json, GGUF's llama keys) can emit it.
 * `mergeAdapters` folds a level's recovery adapters (TensorAnnotation.adapters) into its slice.
 */
import { createHash } from 'node:crypto';
import { biasOf, layerNames } from '../arch/names.js';
import { archOf } from '../arch/registry.js';
import { mlpsOf } from '../arch/units.js';
import { gatherSource, transformSource, type Gather, type ModelSource } from '../checkpoint/source.js';
import { LlmcError } from '../errors.js';
import { mergeLowRank } from '../util/lowrank.js';
import { extentIndices, keptExtent, type Extent, type LevelWidth } from '../ir/width.js';
import type { ArchSpec } from '../arch/spec.js';
import type { LowRankAdapter, TensorAnnotation } from './unit.js';

/** True when all layers share one width (a plain config.json can describe the sub-model). */
export function uniformWidth(widths: LevelWidth[]): LevelWidth | null {
  const w = widths[0];
  return widths.every((x) => x.kvGroups === w.kvGroups && x.qHeadsPerGroup === w.qHeadsPerGroup && x.ffn === w.ffn) ? w : null;
}


/**
 * The prefixes a level keeps, per tensor it narrows: row and/or column counts (the reordered
 * tensors' q/k/v rows, o columns, gate/up rows, down columns, and their biases). Tensors not listed
 * stay whole.
 */
export function levelPrefixes(spec: ArchSpec, widths: readonly LevelWidth[]): Map<string, { rows?: number; cols?: number }> {
  const out = new Map<string, { rows?: number; cols?: number }>();
  const size = (e: Extent | undefined) => e && e.count * e.len;
  for (const [name, k] of levelExtents(spec, widths)) out.set(name, { ...(k.rows ? { rows: size(k.rows) } : {}), ...(k.cols ? { cols: size(k.cols) } : {}) });
  return out;
}

/**
 * The channels a level keeps, per tensor it narrows: prefixes, except the query rows (o columns) of
 * a layer keeping fewer query heads in each of several KV groups (kept heads of each kept group).
 */
function levelExtents(spec: ArchSpec, widths: readonly LevelWidth[]): Map<string, { rows?: Extent; cols?: Extent }> {
  if (widths.length !== spec.numLayers) throw new LlmcError(`slice: ${widths.length} layer widths for ${spec.numLayers} layers`);
  const hd = spec.headDim;
  const pre = (n: number): Extent => ({ count: 1, stride: n, len: n });
  const kept = new Map<string, { rows?: Extent; cols?: Extent }>();
  widths.forEach((w, l) => {
    const n = layerNames(l);
    const q = { rows: keptExtent(spec, { unit: 'q-heads', layer: l }, spec.numHeads * hd, widths) };
    const kv = { rows: keptExtent(spec, { unit: 'kv-heads', layer: l }, spec.numKvHeads * hd, widths) };
    kept.set(n.q, q).set(n.k, kv).set(n.v, kv).set(n.o, { cols: q.rows });
    if (spec.qkvBias) kept.set(n.qBias, q).set(n.kBias, kv).set(n.vBias, kv);
    // A q/k norm over the whole projection has a weight per channel: the kept heads' channels.
    if (spec.qkNorm?.scope === 'all') kept.set(n.qNorm, q).set(n.kNorm, kv);
    for (const m of mlpsOf(spec, l)) {
      const f = m.elastic ? w.ffn : m.width;
      if (f === m.width) continue;
      const ff = { rows: pre(f) };
      kept.set(m.gate, ff).set(m.up, ff).set(m.down, { cols: pre(f) });
      if (spec.mlpBias) kept.set(biasOf(m.gate), ff).set(biasOf(m.up), ff);
    }
  });
  return kept;
}

export function sliceSource(base: ModelSource, widths: LevelWidth[], label: string): ModelSource {
  const spec = base.spec;
  const hd = spec.headDim;
  const gathers = new Map<string, Gather>();
  for (const [name, k] of levelExtents(spec, widths)) {
    gathers.set(name, { ...(k.rows !== undefined ? { rows: extentIndices(k.rows) } : {}), ...(k.cols !== undefined ? { cols: extentIndices(k.cols) } : {}) });
  }
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

/**
 * The weights of adapter set `set` merged in: W + scale·B·A for every tensor annotated with that set
 * (`source` is already the set's slice, so shapes line up). Other tensors keep their stored layout.
 */
export function mergeAdapters(source: ModelSource, annotations: ReadonlyMap<string, TensorAnnotation>, set: string): ModelSource {
  const merged = new Map<string, LowRankAdapter>();
  for (const [name, a] of annotations) {
    const ad = a.adapters?.[set];
    if (!ad) continue;
    const shape = source.meta(name)?.shape;
    if (!shape || shape.length !== 2 || shape[0] !== ad.outFeatures || shape[1] !== ad.inFeatures) {
      throw new LlmcError(`adapter ${set} of "${name}" is [${ad.outFeatures}, ${ad.inFeatures}], the tensor is [${shape ?? 'missing'}]`, source.description);
    }
    merged.set(name, ad);
  }
  if (!merged.size) return source;
  const h = createHash('sha256').update(set);
  for (const [name, ad] of [...merged].sort((x, y) => (x[0] < y[0] ? -1 : 1))) h.update(name).update(new Uint8Array(ad.a.buffer, ad.a.byteOffset, ad.a.byteLength)).update(new Uint8Array(ad.b.buffer, ad.b.byteOffset, ad.b.byteLength));
  return transformSource(source, {
    label: `adapters ${set} merged`,
    paramsHash: h.digest('hex'),
    untouched: (name) => !merged.has(name),
    rewrite: (name, data) => {
      const ad = merged.get(name);
      return ad ? mergeLowRank(data, ad.outFeatures, ad.inFeatures, ad, `adapter ${set} of ${name}`) : data;
    },
  });
}
