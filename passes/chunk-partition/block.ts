/**
 * Costs from one decoder block: a large model's static subgraphs are the same shape in every layer,
 * and its costs are per-layer means per subgraph kind, so layer 0 of the model cut to its first two
 * layers (with its embedding and head) gives the same table without building the whole model (the
 * TS runtime holds every weight as float32; onnxruntime refuses graphs above 2 GiB). Layer 0, not
 * the last: the runtime computes the last layer after attention only at the logit rows. Used where
 * the model streams (src/exec/stream: float32 weights above 1 GiB) and every layer has the same ops.
 */
import { createHash } from 'node:crypto';
import { transformSource, type ModelSource } from '../../src/core/checkpoint/source.js';
import { buildModel } from '../../src/core/ir/build.js';
import type { ModelGraph } from '../../src/core/ir/ir.js';
import { isMoeLayer } from '../../src/core/arch/spec.js';

/** Do all layers compute the same ops (no per-layer windows, rotary or MoE/dense choice)? */
export function uniformLayers(spec: ModelSource['spec']): boolean {
  const L = spec.numLayers;
  const all = (ls: number[] | null) => ls === null || ls.length === L;
  const none = (ls: number[] | null) => ls !== null && ls.length === 0;
  const windows = spec.slidingWindow === null || all(spec.slidingLayers) || none(spec.slidingLayers);
  const rope = all(spec.ropeLayers) || none(spec.ropeLayers);
  const moe = Array.from({ length: L }, (_, l) => isMoeLayer(spec, l)).every((m, _, a) => m === a[0]);
  return windows && rope && moe;
}

/** Layers the cut model keeps: layer 0 (timed) and layer 1 (the last, computed at the logit rows only). */
export const CUT_LAYERS = 2;

/** `source` cut to its first CUT_LAYERS layers (and its embedding and head); the tensors of later layers are never read. */
export function firstBlockSource(source: ModelSource): ModelSource {
  const spec = source.spec;
  const keep = Array.from({ length: CUT_LAYERS }, (_, l) => l);
  const cutList = (ls: number[] | null) => (ls === null ? null : ls.length ? keep : []);
  const moe = spec.moe ? { ...spec.moe, denseLayers: spec.moe.denseLayers.length ? keep : [] } : null;
  const cut = { ...spec, numLayers: CUT_LAYERS, slidingLayers: cutList(spec.slidingLayers), ropeLayers: cutList(spec.ropeLayers), moe };
  const s = transformSource(source, { label: 'first block', paramsHash: createHash('sha256').update(`numLayers=${CUT_LAYERS}`).digest('hex'), spec: cut, rewrite: (_, d) => d, untouched: () => true });
  const later = /^model\.layers\.(\d+)\./;
  return { ...s, tensors: source.tensors.filter((t) => Number(later.exec(t.name)?.[1] ?? 0) < CUT_LAYERS) };
}

/** The one-block model for costing `graph` (the unedited model of a large, uniform `source`), or null: cost the whole graph. */
export function costBlock(source: ModelSource, graph: ModelGraph, shadowLayers: readonly number[]): { source: ModelSource; graph: ModelGraph } | null {
  if (source.spec.numLayers <= CUT_LAYERS || shadowLayers.length || !uniformLayers(source.spec)) return null;
  // a pass's edit of the graph (another op count than the plain model's) may differ per layer
  if (graph.ops.length !== buildModel(source.spec).ops.length) return null;
  const block = firstBlockSource(source);
  return { source: block, graph: buildModel(block.spec) };
}
