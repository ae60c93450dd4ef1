/**
 * A checkpoint's decoder layers as a model of their own: `layersOf(source, [0, 3, 5])` reads layer i
 * of the view from layer kept[i] of the checkpoint, embedding and head kept, the other layers' tensors
 * never read. Used where a large model must not be loaded whole: a skip-layer draft of a streamed
 * target, and a model's first layers to measure one block and scale (which needs uniformLayers).
 */
import { isMoeLayer } from '../arch/spec.js';
import { LlmcError } from '../errors.js';
import type { ModelSource } from './source.js';

const LAYER = /^model\.layers\.(\d+)\./;

/** Decoder layers `kept` of `source` (in order), with its embedding and head. */
export function layersOf(source: ModelSource, kept: readonly number[]): ModelSource {
  const spec = source.spec;
  const remap = (list: number[] | null) => (list === null ? null : kept.flatMap((l, i) => (list.includes(l) ? [i] : [])));
  const sub = {
    ...spec,
    numLayers: kept.length,
    slidingLayers: remap(spec.slidingLayers),
    ropeLayers: remap(spec.ropeLayers),
    moe: spec.moe && { ...spec.moe, denseLayers: remap(spec.moe.denseLayers)! },
  };
  // a view's tensor name → the checkpoint's (null: a layer the view does not have)
  const outer = (name: string) => {
    const m = LAYER.exec(name);
    return m ? (Number(m[1]) < kept.length ? name.replace(LAYER, `model.layers.${kept[Number(m[1])]}.`) : null) : name;
  };
  const inner = new Map(kept.map((l, i) => [l, i]));
  return {
    spec: sub,
    assets: source.assets,
    tensors: source.tensors.flatMap((t) => {
      const m = LAYER.exec(t.name);
      if (!m) return [t];
      const i = inner.get(Number(m[1]));
      return i === undefined ? [] : [{ ...t, name: t.name.replace(LAYER, `model.layers.${i}.`) }];
    }),
    description: `${source.description} (layers ${kept.join(',')})`,
    dir: source.dir,
    allowNonFinite: source.allowNonFinite,
    meta: (name) => {
      const o = outer(name);
      const m = o === null ? undefined : source.meta(o);
      return m && { ...m, name };
    },
    readF32: (name) => {
      const o = outer(name);
      if (o === null) throw new LlmcError(`internal: tensor "${name}" is outside the layers kept`);
      return source.readF32(o);
    },
    layout: (name) => {
      const o = outer(name);
      return o === null ? null : source.layout(o);
    },
    identity: async () => `${await source.identity()}:layers-${kept.join(',')}`,
  };
}

/** The first `k` decoder layers of `source` (layersOf). */
export const firstLayers = (source: ModelSource, k: number): ModelSource => layersOf(source, Array.from({ length: k }, (_, i) => i));

/** Do all layers compute the same ops (no per-layer windows, rotary or MoE/dense choice)? What measuring one block and scaling assumes. */
export function uniformLayers(spec: ModelSource['spec']): boolean {
  const L = spec.numLayers;
  const all = (ls: number[] | null) => ls === null || ls.length === L;
  const none = (ls: number[] | null) => ls !== null && ls.length === 0;
  const windows = spec.slidingWindow === null || all(spec.slidingLayers) || none(spec.slidingLayers);
  const rope = all(spec.ropeLayers) || none(spec.ropeLayers);
  const moe = Array.from({ length: L }, (_, l) => isMoeLayer(spec, l)).every((m, _, a) => m === a[0]);
  return windows && rope && moe;
}
