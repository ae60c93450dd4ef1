/**
 * Elastic widths, defined once: what each elastic axis of the IR (ir.ts `elastic` marks on linears
 * and moe experts) keeps at a level. Every executor applies these rules: levelGraph (level.ts) narrows
 * the graph for exporters, the TS interpreter computes the kept rows/columns over the full weights,
 * sliceSource gathers the kept prefixes of the tensors.
 */
import type { ArchSpec } from '../arch/spec.js';
import { LlmcError } from '../errors.js';
import type { ElasticAxis, MlpSlot } from './ir.js';

/** Width of one layer when running a sub-model made of prefixes of its units (elastic levels). */
export interface LayerWidth {
  /** KV groups kept (prefix of the KV heads; under MHA a group is one head). */
  kvGroups: number;
  /** Query heads kept in each kept group (prefix within the group); default all. */
  qHeadsPerGroup?: number;
  /**
   * Neurons kept (prefix); default all. Dense models: the MLP. MoE models: each routed expert (as the
   * reorder pass's levels say), while their dense layers (qwen2_moe mlp_only_layers) take `denseFfn`.
   */
  ffn?: number;
  /** MoE layers: neurons kept per routed expert, overriding `ffn`. */
  expertFfn?: number[];
  /** Dense layers of an MoE model: neurons kept; default all. */
  denseFfn?: number;
  /** qwen2_moe: neurons kept in the shared expert; default all. */
  sharedFfn?: number;
}

/** A width as the elastic record's levels give it (record `elastic-prefix`): every prefix set. */
export interface LevelWidth extends LayerWidth {
  qHeadsPerGroup: number;
  ffn: number;
}

/** The kept channels of an axis: `count` ranges of `len` channels, one every `stride` (a prefix: count 1). */
export interface Extent {
  count: number;
  stride: number;
  len: number;
}

const prefix = (len: number): Extent => ({ count: 1, stride: len, len });

/** Neurons an MLP keeps at width `w` (undefined: all of them). */
export function keptNeurons(slot: MlpSlot, w: LayerWidth): number | undefined {
  if (slot === 'mlp') return w.ffn;
  if (slot === 'dense') return w.denseFfn;
  if (slot === 'shared') return w.sharedFfn;
  return w.expertFfn?.[slot.expert] ?? w.ffn;
}

/** KV groups and query heads per group a layer keeps (the full counts without a width). */
export function keptHeads(spec: ArchSpec, w: LayerWidth | undefined): { groups: number; perGroup: number } {
  const nrep = spec.numHeads / spec.numKvHeads;
  return w ? { groups: w.kvGroups, perGroup: w.qHeadsPerGroup ?? nrep } : { groups: spec.numKvHeads, perGroup: nrep };
}

/** The kept extent of an elastic axis of `full` channels at `widths` (no axis or no widths: all). */
export function keptExtent(spec: ArchSpec, axis: ElasticAxis | undefined, full: number, widths: readonly LayerWidth[] | undefined): Extent {
  const w = axis ? widths?.[axis.layer] : undefined;
  if (!axis || !w) return prefix(full);
  const hd = spec.headDim;
  switch (axis.unit) {
    case 'kv-heads':
      return prefix(w.kvGroups * hd);
    case 'q-heads': {
      const nrep = spec.numHeads / spec.numKvHeads;
      const qpg = w.qHeadsPerGroup ?? nrep;
      return qpg === nrep ? prefix(w.kvGroups * nrep * hd) : { count: w.kvGroups, stride: nrep * hd, len: qpg * hd };
    }
    case 'neurons':
      return prefix(keptNeurons(axis.mlp, w) ?? full);
  }
}

/** The channels an extent keeps, in order (a sliced tensor's gather: kept heads inside each kept group). */
export function extentIndices(e: Extent): Int32Array {
  const out = new Int32Array(e.count * e.len);
  for (let c = 0; c < e.count; c++) for (let i = 0; i < e.len; i++) out[c * e.len + i] = c * e.stride + i;
  return out;
}

/** keptExtent as a channel count, for executors that need a contiguous prefix (a sliced graph). */
export function keptPrefix(spec: ArchSpec, axis: ElasticAxis | undefined, full: number, widths: readonly LayerWidth[] | undefined): number {
  const e = keptExtent(spec, axis, full, widths);
  if (e.count > 1) {
    const w = widths![axis!.layer];
    throw new LlmcError(`slice: layer ${axis!.layer} keeps ${w.qHeadsPerGroup} of ${spec.numHeads / spec.numKvHeads} query heads per group: not a contiguous prefix (SPEC §4.2)`);
  }
  return e.len;
}

/** Widths an executor accepts for `spec`: one per layer, each count within its unit's range. */
export function checkWidths(spec: ArchSpec, widths: readonly LayerWidth[]): void {
  const s = spec;
  const nrep = s.numHeads / s.numKvHeads;
  if (widths.length !== s.numLayers) throw new LlmcError(`widths: ${widths.length} entries for ${s.numLayers} layers`);
  const within = (v: number | undefined, max: number, what: string, l: number) => {
    if (v !== undefined && (!Number.isInteger(v) || v < 1 || v > max)) throw new LlmcError(`widths[${l}].${what} = ${v} is outside 1..${max}`);
  };
  const moe = s.moe;
  widths.forEach((w, l) => {
    within(w.kvGroups, s.numKvHeads, 'kvGroups', l);
    if (w.kvGroups === undefined) throw new LlmcError(`widths[${l}].kvGroups is missing`);
    within(w.qHeadsPerGroup, nrep, 'qHeadsPerGroup', l);
    const dense = !moe || moe.denseLayers.includes(l);
    if (dense) within(moe ? w.denseFfn : w.ffn, s.intermediateSize, moe ? 'denseFfn' : 'ffn', l);
    else {
      within(w.ffn, moe.expertIntermediateSize, 'ffn', l);
      w.expertFfn?.forEach((f, e) => within(f, e < moe.numExperts ? moe.expertIntermediateSize : 0, `expertFfn[${e}]`, l));
      if (moe.sharedExpertIntermediateSize) within(w.sharedFfn, moe.sharedExpertIntermediateSize, 'sharedFfn', l);
    }
  });
}
