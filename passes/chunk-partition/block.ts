/**
 * Costs from one decoder block: a large model's static subgraphs are the same shape in every layer,
 * and its costs are per-layer means per subgraph kind, so layer 0 of the model cut to its first two
 * layers (with its embedding and head) gives the same table without building the whole model (the
 * TS runtime holds every weight as float32; onnxruntime refuses graphs above 2 GiB). Layer 0, not
 * the last: the runtime computes the last layer after attention only at the logit rows. Used where
 * the model streams (src/exec/stream: float32 weights above 1 GiB) and every layer has the same ops.
 */
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import { firstLayers, uniformLayers } from '../../src/core/checkpoint/layers.js';
import { buildModel } from '../../src/core/ir/build.js';
import type { ModelGraph } from '../../src/core/ir/ir.js';

/** Layers the cut model keeps: layer 0 (timed) and layer 1 (the last, computed at the logit rows only). */
export const CUT_LAYERS = 2;

/** The one-block model for costing `graph` (the unedited model of a large, uniform `source`), or null: cost the whole graph. */
export function costBlock(source: ModelSource, graph: ModelGraph, shadowLayers: readonly number[]): { source: ModelSource; graph: ModelGraph } | null {
  if (source.spec.numLayers <= CUT_LAYERS || shadowLayers.length || !uniformLayers(source.spec)) return null;
  // a pass's edit of the graph (another op count than the plain model's) may differ per layer
  if (graph.ops.length !== buildModel(source.spec).ops.length) return null;
  const block = firstLayers(source, CUT_LAYERS); // the tensors of later layers are never read
  return { source: block, graph: buildModel(block.spec) };
}
