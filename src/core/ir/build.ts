/**
 * The transformer, written once: Llama-family decoder (llama, mistral, qwen2) and its MoE
 * variants (mixtral, qwen2_moe) as an IR graph (see ir.ts) built from the normalized ArchSpec.
 */
import { EMBED, FINAL_NORM, LM_HEAD, layerNames, moeNames } from '../arch/names.js';
import { isMoeLayer, type ArchSpec } from '../arch/spec.js';
import type { GraphInput, ModelGraph, Op, TapPoint, V } from './ir.js';

/** Graph input/output names every lowering and the engine agree on. */
export const IO = {
  ids: 'input_ids',
  cos: 'cos',
  sin: 'sin',
  logitPositions: 'logit_positions',
  logits: 'logits',
  pastKey: (l: number) => `past_key_${l}`,
  pastValue: (l: number) => `past_value_${l}`,
  presentKey: (l: number) => `present_key_${l}`,
  presentValue: (l: number) => `present_value_${l}`,
} as const;

const bias = (weight: string) => weight.replace(/\.weight$/, '.bias');

export function buildModel(spec: ArchSpec): ModelGraph {
  const ops: Op[] = [];
  const taps: TapPoint[] = [];
  const D = spec.hiddenSize;
  const hd = spec.headDim;
  const inputs: GraphInput[] = [
    { name: IO.ids, dtype: 'int64', dims: ['B', 'T'] },
    { name: IO.cos, dtype: 'float32', dims: ['T', hd / 2] },
    { name: IO.sin, dtype: 'float32', dims: ['T', hd / 2] },
    { name: IO.logitPositions, dtype: 'int64', dims: ['N'] },
  ];
  const outputs: V[] = [IO.logits];

  const linear = (out: V, x: V, weight: string, inF: number, outF: number, hasBias: boolean) => {
    ops.push({ op: 'linear', out, x, weight, bias: hasBias ? bias(weight) : null, inFeatures: inF, outFeatures: outF });
    return out;
  };
  const tapLinear = (layer: number, weight: string, x: V, channels: number, mask: V | null) =>
    taps.push({ kind: 'linear-input', layer, key: weight, value: x, channels, mask });

  /** SwiGLU MLP: down(silu(gate(x)) · up(x)); `mask` marks the tokens routed to it (experts). */
  const mlp = (p: string, names: { gate: string; up: string; down: string }, x: V, I: number, layer: number, mask: V | null): V => {
    const mb = spec.mlpBias;
    tapLinear(layer, names.gate, x, D, mask);
    tapLinear(layer, names.up, x, D, mask);
    linear(`${p}.gate`, x, names.gate, D, I, mb);
    linear(`${p}.up`, x, names.up, D, I, mb);
    ops.push({ op: 'silu', out: `${p}.act`, x: `${p}.gate` });
    ops.push({ op: 'mul', out: `${p}.h`, a: `${p}.act`, b: `${p}.up` });
    taps.push({ kind: 'mlp-act', layer, key: p, value: `${p}.h`, channels: I, mask });
    tapLinear(layer, names.down, `${p}.h`, I, mask);
    return linear(`${p}.down`, `${p}.h`, names.down, I, D, mb);
  };

  ops.push({ op: 'embed', out: 'h0', ids: IO.ids, table: EMBED });
  let h: V = 'h0';
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerNames(l);
    const p = `l${l}`;
    inputs.push(
      { name: IO.pastKey(l), dtype: 'float32', dims: ['B', spec.numKvHeads, 'P', hd] },
      { name: IO.pastValue(l), dtype: 'float32', dims: ['B', spec.numKvHeads, 'P', hd] },
    );
    outputs.push(IO.presentKey(l), IO.presentValue(l));

    // Attention block.
    ops.push({ op: 'rmsnorm', out: `${p}.attn_in`, x: h, weight: n.inputNorm, eps: spec.rmsNormEps, dim: D });
    const xa = `${p}.attn_in`;
    for (const w of [n.q, n.k, n.v]) tapLinear(l, w, xa, D, null);
    linear(`${p}.q`, xa, n.q, D, spec.numHeads * hd, spec.qkvBias);
    linear(`${p}.k`, xa, n.k, D, spec.numKvHeads * hd, spec.qkvBias);
    linear(`${p}.v`, xa, n.v, D, spec.numKvHeads * hd, spec.qkvBias);
    ops.push({ op: 'rope', out: `${p}.q_rot`, x: `${p}.q`, cos: IO.cos, sin: IO.sin, heads: spec.numHeads, headDim: hd });
    ops.push({ op: 'rope', out: `${p}.k_rot`, x: `${p}.k`, cos: IO.cos, sin: IO.sin, heads: spec.numKvHeads, headDim: hd });
    ops.push({
      op: 'attention',
      out: `${p}.attn`,
      presentK: IO.presentKey(l),
      presentV: IO.presentValue(l),
      q: `${p}.q_rot`,
      k: `${p}.k_rot`,
      v: `${p}.v`,
      pastK: IO.pastKey(l),
      pastV: IO.pastValue(l),
      heads: spec.numHeads,
      kvHeads: spec.numKvHeads,
      headDim: hd,
      slidingWindow: spec.slidingWindow,
    });
    taps.push({ kind: 'head-output', layer: l, key: `model.layers.${l}.self_attn`, value: `${p}.attn`, channels: spec.numHeads * hd, mask: null, heads: spec.numHeads });
    tapLinear(l, n.o, `${p}.attn`, spec.numHeads * hd, null);
    linear(`${p}.o`, `${p}.attn`, n.o, spec.numHeads * hd, D, spec.oBias);
    ops.push({ op: 'add', out: `${p}.resid1`, a: h, b: `${p}.o` });

    // MLP block.
    ops.push({ op: 'rmsnorm', out: `${p}.mlp_in`, x: `${p}.resid1`, weight: n.postNorm, eps: spec.rmsNormEps, dim: D });
    const xm = `${p}.mlp_in`;
    let mlpOut: V;
    if (!isMoeLayer(spec, l)) {
      mlpOut = mlp(`model.layers.${l}.mlp`, n.mlp, xm, spec.intermediateSize, l, null);
    } else {
      const moe = spec.moe!;
      const names = moeNames(spec, l);
      tapLinear(l, names.router, xm, D, null);
      linear(`${p}.router_logits`, xm, names.router, D, moe.numExperts, false);
      taps.push({ kind: 'router-logits', layer: l, key: names.router, value: `${p}.router_logits`, channels: moe.numExperts, mask: null });
      ops.push({ op: 'router', weights: `${p}.route_w`, mask: `${p}.route_mask`, logits: `${p}.router_logits`, numExperts: moe.numExperts, topK: moe.topK, mode: moe.routing });
      // Every expert runs on every token and is scaled by its routing weight (0 when not
      // selected): static shapes for every lowering; the sum runs in expert order as HF's does.
      let acc: V | null = null;
      names.experts.forEach((e, i) => {
        const ep = e.gate.replace(/\.(gate_proj|w1)\.weight$/, '');
        ops.push({ op: 'column', out: `${ep}.sel`, x: `${p}.route_mask`, index: i });
        const y = mlp(ep, e, xm, moe.expertIntermediateSize, l, `${ep}.sel`);
        ops.push({ op: 'column', out: `${ep}.w`, x: `${p}.route_w`, index: i });
        ops.push({ op: 'mul', out: `${ep}.out`, a: y, b: `${ep}.w` });
        if (acc === null) acc = `${ep}.out`;
        else {
          ops.push({ op: 'add', out: `${ep}.acc`, a: acc, b: `${ep}.out` });
          acc = `${ep}.acc`;
        }
      });
      mlpOut = acc!;
      if (names.shared) {
        const sp = `model.layers.${l}.mlp.shared_expert`;
        const ys = mlp(sp, names.shared, xm, moe.sharedExpertIntermediateSize!, l, null);
        tapLinear(l, names.sharedGate!, xm, D, null);
        linear(`${p}.shared_gate`, xm, names.sharedGate!, D, 1, false);
        ops.push({ op: 'sigmoid', out: `${p}.shared_scale`, x: `${p}.shared_gate` });
        ops.push({ op: 'mul', out: `${p}.shared_out`, a: ys, b: `${p}.shared_scale` });
        ops.push({ op: 'add', out: `${p}.moe_out`, a: mlpOut, b: `${p}.shared_out` });
        mlpOut = `${p}.moe_out`;
      }
    }
    ops.push({ op: 'add', out: `${p}.out`, a: `${p}.resid1`, b: mlpOut });
    h = `${p}.out`;
  }
  ops.push({ op: 'gatherPositions', out: 'h_last', x: h, positions: IO.logitPositions });
  ops.push({ op: 'rmsnorm', out: 'h_final', x: 'h_last', weight: FINAL_NORM, eps: spec.rmsNormEps, dim: D });
  const head = spec.tieEmbeddings ? EMBED : LM_HEAD;
  taps.push({ kind: 'linear-input', layer: spec.numLayers, key: head, value: 'h_final', channels: D, mask: null });
  ops.push({ op: 'linear', out: IO.logits, x: 'h_final', weight: head, bias: null, inFeatures: D, outFeatures: spec.vocabSize });
  return { spec, inputs, ops, outputs, taps };
}
