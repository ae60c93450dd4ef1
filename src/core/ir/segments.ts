/**
 * The IR cut into the pieces a layer-streaming executor runs one at a time: the embedding, each
 * decoder layer, the head. Each piece is a ModelGraph of its own (the whole model's ops, not a copy of
 * their definition), so any lowering of the IR runs it; values crossing a cut (the residual stream)
 * become float32 [B, T, C] inputs and outputs of the pieces either side. Taps go with the piece
 * that writes the value they observe. Browser-safe.
 */
import { IO } from './build.js';
import type { GraphInput, ModelGraph, Op, V } from './ir.js';
import { layerOfOp } from './subgraphs.js';
import { primitiveOps } from './expand.js';
import { opInputs, opOutputs, valueChannels } from './values.js';
import { LlmcError } from '../errors.js';

export interface Segment {
  /** `embed`, `l<ℓ>`, `head`. */
  id: string;
  /** Decoder layer; −1 for the embedding, numLayers for the head. */
  layer: number;
  /** The piece as a graph: its inputs are graph inputs of the model and carried values. */
  graph: ModelGraph;
  /** Values it reads from earlier pieces (the residual stream), [B, T, C]. */
  carriedIn: V[];
  /** Values it writes that later pieces read. */
  carriedOut: V[];
}

/** The model's graph as pieces in execution order: embed, l0 … l(L−1), head. */
export function streamSegments(graph: ModelGraph): Segment[] {
  const L = graph.spec.numLayers;
  const groups: { id: string; layer: number; ops: Op[] }[] = [{ id: 'embed', layer: -1, ops: [] }];
  for (let l = 0; l < L; l++) groups.push({ id: `l${l}`, layer: l, ops: [] });
  groups.push({ id: 'head', layer: L, ops: [] });
  let at = 0; // ops stay in order: a piece never goes back to an earlier one
  for (const op of graph.ops) {
    const l = layerOfOp(op);
    const g = l !== null ? l + 1 : at === 0 && op.op === 'embed' ? 0 : L + 1;
    if (g < at) throw new LlmcError(`internal: op writing "${opOutputs(op)[0]}" belongs to an earlier piece than the op before it`);
    at = g;
    groups[g].ops.push(op);
  }
  const channels = valueChannels(graph);
  const declared = new Map(graph.inputs.map((i) => [i.name, i]));
  const writes = groups.map((g) => new Set(g.ops.flatMap(opOutputs)));
  const reads = groups.map((g) => new Set(g.ops.flatMap(opInputs)));
  // the model's outputs but its KV cache (the pieces run whole sequences, with no past)
  const kv = new Set(Array.from({ length: L }, (_, l) => [IO.presentKey(l), IO.presentValue(l)]).flat());
  const wanted = new Set<V>(graph.outputs.filter((v) => !kv.has(v)));
  return groups.map((g, i) => {
    const inputs: GraphInput[] = [];
    const carriedIn: V[] = [];
    for (const v of reads[i]) {
      if (writes[i].has(v)) continue;
      const d = declared.get(v);
      if (d) inputs.push(d);
      else {
        const C = channels.get(v);
        if (C === undefined) throw new LlmcError(`internal: piece ${g.id} reads "${v}", which nothing writes`);
        inputs.push({ name: v, dtype: 'float32', dims: ['B', 'T', C] });
        carriedIn.push(v);
      }
    }
    const later = new Set(reads.slice(i + 1).flatMap((r) => [...r]));
    const carriedOut = [...writes[i]].filter((v) => later.has(v));
    const outputs = [...carriedOut, ...[...writes[i]].filter((v) => wanted.has(v))];
    // a MoE op's router logits are a value inside it (expandMoe), observed by router-logits taps
    const inner = primitiveOps({ ...graph, ops: g.ops }).flatMap((o) => (o.op === 'router' ? [o.logits] : []));
    const observed = new Set([...writes[i], ...inner]);
    const taps = graph.taps.filter((t) => observed.has(t.value));
    return { id: g.id, layer: g.layer, graph: { spec: graph.spec, inputs, ops: g.ops, outputs, taps }, carriedIn, carriedOut };
  });
}
