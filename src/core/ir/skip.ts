/**
 * The model without some decoder layers (a self-speculative draft: the residual stream passes a
 * skipped layer unchanged). A graph transform of the one model definition, so every executor runs
 * it; the KV cache keeps its layer indices (skipped layers' entries stay empty).
 */
import { LlmcError } from '../errors.js';
import type { ModelGraph, Op, V } from './ir.js';

/** Fields of ops that name input values. */
const INPUT_FIELDS = ['x', 'a', 'b', 'q', 'k', 'v', 'pastK', 'pastV', 'ids', 'positions', 'logits', 'cos', 'sin'] as const;

export function skipLayers(graph: ModelGraph, layers: readonly number[]): ModelGraph {
  const L = graph.spec.numLayers;
  const skip = new Set(layers);
  for (const l of skip) if (!Number.isInteger(l) || l < 0 || l >= L) throw new LlmcError(`skip layers: layer ${l} does not exist (the model has ${L})`);
  if (skip.size >= L) throw new LlmcError(`skip layers: skipping all ${L} layers leaves no model`);
  const ops = graph.ops;
  const rename = new Map<V, V>();
  const drop = new Set<number>();
  for (const l of [...skip].sort((a, b) => a - b)) {
    // The layer's first op (its input norm, or q_proj where norms follow the blocks) reads the layer's input.
    const start = ops.findIndex((op) => (op.op === 'rmsnorm' || op.op === 'linear') && op.out.startsWith(`l${l}.`));
    const end = ops.findIndex((op) => op.op === 'add' && op.out === `l${l}.out`);
    if (start < 0 || end < start) throw new LlmcError(`skip layers: layer ${l} is not a block of the graph`);
    const input = (ops[start] as Extract<Op, { op: 'rmsnorm' | 'linear' }>).x;
    rename.set(`l${l}.out`, rename.get(input) ?? input);
    for (let i = start; i <= end; i++) drop.add(i);
  }
  const kept = ops
    .filter((_, i) => !drop.has(i))
    .map((op) => {
      const o = { ...op } as Record<string, unknown>;
      for (const f of INPUT_FIELDS) if (typeof o[f] === 'string' && rename.has(o[f] as V)) o[f] = rename.get(o[f] as V);
      return o as unknown as Op;
    });
  return { ...graph, ops: kept, taps: graph.taps.filter((t) => !skip.has(t.layer)) };
}
