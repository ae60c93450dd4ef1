/** The values an IR op reads and writes (graph walks: use counts, producers, the chunk partition). */
import type { Op, V } from './ir.js';

/** The values an op reads. */
export function opInputs(op: Op): V[] {
  switch (op.op) {
    case 'embed':
      return [op.ids];
    case 'rope':
      return [op.x, op.cos, op.sin];
    case 'attention':
      return [op.q, op.k, op.v, op.pastK, op.pastV];
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
