/**
 * The IR of an elastic level: the same ops with the widths a level keeps (prefixes of KV groups, of
 * the query heads in each group, of each elastic MLP's neurons), read off the ops' elastic marks. An
 * exporter lowers it over the level's sliced weights (src/core/pipeline/elastic.ts sliceSource) to
 * get a physically smaller graph; per-layer widths may differ. Level graphs carry no tap points
 * (profiling observes the full model).
 */
import { LlmcError } from '../errors.js';
import type { LayerWidth } from '../records/elastic.js';
import type { ElasticAxis, GraphInput, MlpSlot, ModelGraph, Op } from './ir.js';

const elasticMlp = (slot: MlpSlot) => slot === 'mlp' || typeof slot === 'object';

export function levelGraph(graph: ModelGraph, widths: readonly LayerWidth[]): ModelGraph {
  const spec = graph.spec;
  if (widths.length !== spec.numLayers) throw new LlmcError(`level: ${widths.length} layer widths for ${spec.numLayers} layers`);
  const hd = spec.headDim;
  const extent = (axis: ElasticAxis | undefined, full: number): number => {
    if (!axis) return full;
    const w = widths[axis.layer];
    switch (axis.unit) {
      case 'kv-heads':
        return w.kvGroups * hd;
      case 'q-heads':
        return w.kvGroups * w.qHeadsPerGroup * hd;
      case 'neurons':
        return elasticMlp(axis.mlp) ? w.ffn : full;
    }
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
        // Per-head q/k norms keep the heads the projection kept; one norm over a whole projection would change with them.
        if (op.heads === undefined) throw new LlmcError(`level: ${op.weight} normalizes a whole projection, so it has no narrower levels`);
        rowsOf.set(op.out, axis);
        return { ...op, heads: extent(axis, op.heads * op.dim) / op.dim };
      }
      case 'rope':
        rowsOf.set(op.out, rowsOf.get(op.x));
        return { ...op, heads: extent(rowsOf.get(op.x), op.heads * op.headDim) / op.headDim };
      case 'attention': {
        const w = widths[op.layer];
        return { ...op, heads: w.kvGroups * w.qHeadsPerGroup, kvHeads: w.kvGroups };
      }
      case 'moe': {
        const w = widths[op.layer];
        return { ...op, experts: op.experts.map((m) => (elasticMlp(m.slot) ? { ...m, width: w.ffn } : m)) };
      }
      default:
        return op;
    }
  });
  const inputs = graph.inputs.map((i): GraphInput => {
    const at = graph.ops.find((o): o is Extract<Op, { op: 'attention' }> => o.op === 'attention' && (o.pastK === i.name || o.pastV === i.name));
    return at ? { ...i, dims: [i.dims[0], widths[at.layer].kvGroups, ...i.dims.slice(2)] } : i;
  });
  return { ...graph, ops, inputs, taps: [] };
}
