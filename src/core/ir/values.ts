/** The values an IR op reads and writes (graph walks: use counts, producers, the chunk partition). */
import type { ModelGraph, Op, V } from './ir.js';

/** The values an op reads. */
export function opInputs(op: Op): V[] {
  switch (op.op) {
    case 'embed':
      return [op.ids];
    case 'rope':
      return [op.x, op.cos, op.sin];
    case 'attention':
      return op.mask.kind === 'tree' ? [op.q, op.k, op.v, op.pastK, op.pastV, op.mask.ancestors] : [op.q, op.k, op.v, op.pastK, op.pastV];
    case 'mul':
    case 'add':
      return [op.a, op.b];
    case 'router':
      return [op.logits];
    case 'gatherPositions':
      return [op.x, op.positions];
    default:
      return [op.x];
  }
}

/** The values an op writes. */
export function opOutputs(op: Op): V[] {
  if (op.op === 'attention') return [op.out, op.presentK, op.presentV];
  if (op.op === 'router') return [op.weights, op.mask];
  return [op.out];
}

/** Channels of every value the ops write (the last axis of its [B, T, C] shape). */
export function valueChannels(graph: ModelGraph): Map<V, number> {
  const ch = new Map<V, number>();
  const of = (v: V) => ch.get(v) ?? 0;
  const spec = graph.spec;
  for (const op of graph.ops) {
    switch (op.op) {
      case 'embed':
        ch.set(op.out, spec.hiddenSize);
        break;
      case 'rmsnorm':
        ch.set(op.out, op.dim * (op.heads ?? 1));
        break;
      case 'linear':
        ch.set(op.out, op.outFeatures);
        break;
      case 'rope':
        ch.set(op.out, op.heads * op.headDim);
        break;
      case 'attention':
        ch.set(op.out, op.heads * op.headDim);
        break;
      case 'silu':
      case 'sigmoid':
      case 'scale':
      case 'gelu_tanh':
      case 'softcap':
      case 'gatherPositions':
        ch.set(op.out, of(op.x));
        break;
      case 'mul':
      case 'add':
        ch.set(op.out, Math.max(of(op.a), of(op.b)));
        break;
      case 'moe':
        ch.set(op.out, op.hidden);
        break;
      case 'column':
        ch.set(op.out, 1);
        break;
      case 'router':
        ch.set(op.weights, op.numExperts);
        ch.set(op.mask, op.numExperts);
        break;
    }
  }
  return ch;
}
