/**
 * Coarse ops in primitive ops: what an moe op computes, as the ONNX and tfjs lowerings run it
 * (every expert on every token, scaled by its routing weight, 0 when not selected: static shapes;
 * the sum runs in expert order, as Hugging Face's does). The TS runtime dispatches tokens to their
 * top-k experts instead; tests hold the two to the same logits.
 */
import { biasOf } from '../arch/names.js';
import type { ElasticAxis, ModelGraph, MoeMlp, Op, V } from './ir.js';

type MoeOp = Extract<Op, { op: 'moe' }>;

const layerOf = (prefix: string) => Number(/^model\.layers\.(\d+)\./.exec(prefix)![1]);

/** The primitive ops of one gated MLP: down(act(gate(x)) · up(x)) (SwiGLU, or GeGLU with gelu_tanh), values named under its prefix. */
export function mlpOps(m: MoeMlp, x: V, D: number, act: 'silu' | 'gelu_tanh' = 'silu'): Op[] {
  const p = m.prefix;
  const neurons: ElasticAxis = { unit: 'neurons', layer: layerOf(p), mlp: m.slot };
  const lin = (out: V, input: V, weight: string, inF: number, outF: number, elastic: { rows?: ElasticAxis; cols?: ElasticAxis }): Op => ({
    op: 'linear',
    out,
    x: input,
    weight,
    bias: m.bias ? biasOf(weight) : null,
    inFeatures: inF,
    outFeatures: outF,
    elastic,
  });
  return [
    lin(`${p}.gate`, x, m.gate, D, m.width, { rows: neurons }),
    lin(`${p}.up`, x, m.up, D, m.width, { rows: neurons }),
    { op: act, out: `${p}.act`, x: `${p}.gate` },
    { op: 'mul', out: `${p}.h`, a: `${p}.act`, b: `${p}.up` },
    lin(`${p}.down`, `${p}.h`, m.down, m.width, D, { cols: neurons }),
  ];
}

/** The value an moe op's expansion ends in (so its `out` names it). */
export function moeOutput(op: Omit<MoeOp, 'out'>): V {
  if (op.shared) return `l${op.layer}.moe_out`;
  const last = op.experts[op.experts.length - 1].prefix;
  return op.experts.length === 1 ? `${last}.out` : `${last}.acc`;
}

export function expandMoe(op: MoeOp): Op[] {
  const p = `l${op.layer}`;
  const D = op.hidden;
  const ops: Op[] = [
    { op: 'linear', out: op.logits, x: op.x, weight: op.router, bias: null, inFeatures: D, outFeatures: op.experts.length },
    { op: 'router', weights: `${p}.route_w`, mask: `${p}.route_mask`, logits: op.logits, numExperts: op.experts.length, topK: op.topK, mode: op.mode },
  ];
  let acc: V | null = null;
  op.experts.forEach((m, i) => {
    const ep = m.prefix;
    ops.push({ op: 'column', out: `${ep}.sel`, x: `${p}.route_mask`, index: i });
    ops.push(...mlpOps(m, op.x, D));
    ops.push({ op: 'column', out: `${ep}.w`, x: `${p}.route_w`, index: i });
    ops.push({ op: 'mul', out: `${ep}.out`, a: `${ep}.down`, b: `${ep}.w` });
    if (acc === null) acc = `${ep}.out`;
    else {
      ops.push({ op: 'add', out: `${ep}.acc`, a: acc, b: `${ep}.out` });
      acc = `${ep}.acc`;
    }
  });
  if (op.shared) {
    ops.push(...mlpOps(op.shared.mlp, op.x, D));
    ops.push({ op: 'linear', out: `${p}.shared_gate`, x: op.x, weight: op.shared.gate, bias: null, inFeatures: D, outFeatures: 1 });
    ops.push({ op: 'sigmoid', out: `${p}.shared_scale`, x: `${p}.shared_gate` });
    ops.push({ op: 'mul', out: `${p}.shared_out`, a: `${op.shared.mlp.prefix}.down`, b: `${p}.shared_scale` });
    ops.push({ op: 'add', out: `${p}.moe_out`, a: acc!, b: `${p}.shared_out` });
  }
  const last = ops[ops.length - 1];
  if (!('out' in last) || last.out !== op.out) throw new Error(`internal: moe expansion ends in ${'out' in last ? last.out : '?'}, the op says ${op.out}`);
  return ops;
}

/** The graph's ops with coarse ops expanded into primitive ones (what the ONNX and tfjs lowerings run). */
export function primitiveOps(graph: ModelGraph): Op[] {
  return graph.ops.flatMap((op) => (op.op === 'moe' ? expandMoe(op) : [op]));
}
