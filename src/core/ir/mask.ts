/**
 * Attention masks, defined once (ir.ts AttentionMask): the mask of a layer as the architecture says
 * it, the first key a query sees, the graph with speculative-tree masks, and which mask kinds a graph
 * uses, so a target that cannot lower one (ONNX: tree, chunk) refuses it by a declared set instead of
 * failing inside its lowering.
 */
import { windowOf, type ArchSpec } from '../arch/spec.js';
import { LlmcError } from '../errors.js';
import type { AttentionMask, ModelGraph, Op } from './ir.js';

export type MaskKind = AttentionMask['kind'];

/** The graph input listing each new token's visible new slots when its attention masks are trees. */
export const TREE_ANCESTORS = 'tree_ancestors';

/** Layer l's mask as the architecture defines it: a sliding window where it has one, else causal. */
export function layerMask(spec: ArchSpec, l: number): AttentionMask {
  const w = windowOf(spec, l);
  return w === null ? { kind: 'causal' } : { kind: 'sliding', window: w };
}

/**
 * The first position a query at position p sees (keys from there to p, intersected with the tree's
 * ancestors for a tree mask); below 0 means from the start.
 */
export function firstVisible(mask: AttentionMask, p: number): number {
  switch (mask.kind) {
    case 'causal':
      return 0;
    case 'sliding':
      return p - mask.window + 1;
    case 'chunk':
      return p - (p % mask.size);
    case 'tree':
      return firstVisible(mask.base, p);
  }
}

/**
 * A causal or sliding mask as the window of the lowerings that build one from the shapes (ONNX,
 * tfjs): null = causal. Other kinds are refused, naming the executor.
 */
export function causalWindow(mask: AttentionMask, executor: string): number | null {
  if (mask.kind === 'causal') return null;
  if (mask.kind === 'sliding') return mask.window;
  throw new LlmcError(`${executor} cannot lower a ${mask.kind} attention mask`);
}

/** The mask kinds a graph's attention ops use (tree masks count as 'tree' and as their base). */
export function maskKinds(graph: ModelGraph): Set<MaskKind> {
  const kinds = new Set<MaskKind>();
  for (const op of graph.ops) {
    if (op.op !== 'attention') continue;
    kinds.add(op.mask.kind);
    if (op.mask.kind === 'tree') kinds.add(op.mask.base.kind);
  }
  return kinds;
}

/** Mask kinds of `graph` outside `lowered` (what a target declares it lowers): empty when it can run the graph. */
export function unloweredMasks(graph: ModelGraph, lowered: ReadonlySet<MaskKind>): MaskKind[] {
  return [...maskKinds(graph)].filter((k) => !lowered.has(k));
}

/** The graph whose attention takes speculative trees (every layer's mask becomes a tree over it). */
export function withTreeMasks(graph: ModelGraph): ModelGraph {
  if (graph.inputs.some((i) => i.name === TREE_ANCESTORS)) return graph;
  const ops = graph.ops.map((op): Op => (op.op === 'attention' && op.mask.kind !== 'tree' ? { ...op, mask: { kind: 'tree', ancestors: TREE_ANCESTORS, base: op.mask } } : op));
  return { ...graph, ops, inputs: [...graph.inputs, { name: TREE_ANCESTORS, dtype: 'int64', dims: ['T', 'S'] }] };
}
