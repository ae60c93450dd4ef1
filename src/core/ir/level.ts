/**
 * The IR of an elastic level: the same ops with the widths a level keeps (prefixes of KV groups, of
 * the query heads in each group, of each elastic MLP's neurons), read off the ops' elastic marks by
 * the one definition of what a width keeps (width.ts). An exporter lowers it over the level's sliced weights (src/core/pipeline/elastic.ts sliceSource) to
 * get a physically smaller graph; per-layer widths may differ, and so may the query heads kept per group. Level graphs carry no tap points
 * (profiling observes the full model).
 */
import { LlmcError } from '../errors.js';
import type { ElasticAxis, GraphInput, ModelGraph, MoeMlp, Op } from './ir.js';
import { keptExtent, keptHeads, keptNeurons, type LayerWidth } from './width.js';

export function levelGraph(graph: ModelGraph, widths: readonly LayerWidth[]): ModelGraph {
  const spec = graph.spec;
  if (widths.length !== spec.numLayers) throw new LlmcError(`level: ${widths.length} layer widths for ${spec.numLayers} layers`);
  // Channels kept: a sliced tensor gathers them in order (sliceSource), kept heads inside a group included.
  const extent = (axis: ElasticAxis | undefined, full: number): number => {
    const e = keptExtent(spec, axis, full, widths);
    return e.count * e.len;
  };
  const rowsOf = new Map<string, ElasticAxis | undefined>();
  const ops = graph.ops.map((op): Op => {
    switch (op.op) {
      case 'linear': {
        rowsOf.set(op.out, op.elastic?.rows);
        return { ...op, outFeatures: extent(op.elastic?.rows, op.outFeatures), inFeatures: extent(op.elastic?.cols, op.inFeatures) };
      }
      case 'rmsnorm': {
        const axis = rowsOf.get(op.x);
        if (!axis) return op;
        // Per-head q/k norms keep the heads the projection kept; a norm over the whole projection (olmo2)
        // normalizes the kept heads' channels with their weights, as the narrower model does.
        rowsOf.set(op.out, axis);
        return op.heads === undefined ? { ...op, dim: extent(axis, op.dim) } : { ...op, heads: extent(axis, op.heads * op.dim) / op.dim };
      }
      case 'rope':
        rowsOf.set(op.out, rowsOf.get(op.x));
        return { ...op, heads: extent(rowsOf.get(op.x), op.heads * op.headDim) / op.headDim };
      case 'attention': {
        const { groups, perGroup } = keptHeads(spec, widths[op.layer]);
        return { ...op, heads: groups * perGroup, kvHeads: groups };
      }
      case 'moe': {
        const w = widths[op.layer];
        const narrow = (m: MoeMlp): MoeMlp => ({ ...m, width: keptNeurons(m.slot, w) ?? m.width });
        return { ...op, experts: op.experts.map(narrow), shared: op.shared && { ...op.shared, mlp: narrow(op.shared.mlp) } };
      }
      default:
        return op;
    }
  });
  const inputs = graph.inputs.map((i): GraphInput => {
    const at = graph.ops.find((o): o is Extract<Op, { op: 'attention' }> => o.op === 'attention' && (o.pastK === i.name || o.pastV === i.name));
    return at ? { ...i, dims: [i.dims[0], keptHeads(spec, widths[at.layer]).groups, ...i.dims.slice(2)] } : i;
  });
  return { ...graph, ops, inputs, taps: [] };
}
