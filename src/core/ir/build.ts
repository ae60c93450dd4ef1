/**
 * The transformer, written once: Llama-family decoder (llama, mistral, qwen2) and its MoE
 * variants (mixtral, qwen2_moe) as an IR graph (see ir.ts) built from the normalized ArchSpec.
 */
import { biasOf, EMBED, FINAL_NORM, LM_HEAD, layerNames, moeNames } from '../arch/names.js';
import { mlpsOf } from '../arch/units.js';
import { isMoeLayer, type ArchSpec } from '../arch/spec.js';
import { mlpOps, moeOutput } from './expand.js';
import { layerMask } from './mask.js';
import type { ElasticAxis, GraphInput, MlpSlot, ModelGraph, MoeMlp, Op, TapPoint, V } from './ir.js';


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

  const linear = (out: V, x: V, weight: string, inF: number, outF: number, hasBias: boolean, elastic?: { rows?: ElasticAxis; cols?: ElasticAxis }) => {
    ops.push({ op: 'linear', out, x, weight, bias: hasBias ? biasOf(weight) : null, inFeatures: inF, outFeatures: outF, ...(elastic ? { elastic } : {}) });
    return out;
  };
  const tapLinear = (layer: number, weight: string, x: V, channels: number, mask: V | null) =>
    taps.push({ kind: 'linear-input', layer, key: weight, value: x, channels, mask });
  const tapOutput = (layer: number, weight: string, y: V, channels: number, mask: V | null) =>
    taps.push({ kind: 'linear-output', layer, key: weight, value: y, channels, mask });
  /** The observation points of one MLP (the values mlpOps writes); `mask` marks the tokens routed to it. */
  const tapMlp = (m: MoeMlp, x: V, layer: number, mask: V | null) => {
    tapLinear(layer, m.gate, x, D, mask);
    tapLinear(layer, m.up, x, D, mask);
    taps.push({ kind: 'mlp-act', layer, key: m.prefix, value: `${m.prefix}.h`, channels: m.width, mask });
    tapLinear(layer, m.down, `${m.prefix}.h`, m.width, mask);
    tapOutput(layer, m.gate, `${m.prefix}.gate`, m.width, mask);
    tapOutput(layer, m.up, `${m.prefix}.up`, m.width, mask);
    tapOutput(layer, m.down, `${m.prefix}.down`, D, mask);
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
    const qHeads: ElasticAxis = { unit: 'q-heads', layer: l };
    const kvHeads: ElasticAxis = { unit: 'kv-heads', layer: l };

    // Attention block.
    ops.push({ op: 'rmsnorm', out: `${p}.attn_in`, x: h, weight: n.inputNorm, eps: spec.rmsNormEps, dim: D });
    const xa = `${p}.attn_in`;
    for (const w of [n.q, n.k, n.v]) tapLinear(l, w, xa, D, null);
    linear(`${p}.q`, xa, n.q, D, spec.numHeads * hd, spec.qkvBias, { rows: qHeads });
    linear(`${p}.k`, xa, n.k, D, spec.numKvHeads * hd, spec.qkvBias, { rows: kvHeads });
    linear(`${p}.v`, xa, n.v, D, spec.numKvHeads * hd, spec.qkvBias, { rows: kvHeads });
    tapOutput(l, n.q, `${p}.q`, spec.numHeads * hd, null);
    tapOutput(l, n.k, `${p}.k`, spec.numKvHeads * hd, null);
    tapOutput(l, n.v, `${p}.v`, spec.numKvHeads * hd, null);
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
      layer: l,
      heads: spec.numHeads,
      kvHeads: spec.numKvHeads,
      headDim: hd,
      mask: layerMask(spec, l),
    });
    taps.push({ kind: 'head-output', layer: l, key: `model.layers.${l}.self_attn`, value: `${p}.attn`, channels: spec.numHeads * hd, mask: null, heads: spec.numHeads });
    tapLinear(l, n.o, `${p}.attn`, spec.numHeads * hd, null);
    linear(`${p}.o`, `${p}.attn`, n.o, spec.numHeads * hd, D, spec.oBias, { cols: qHeads });
    tapOutput(l, n.o, `${p}.o`, D, null);
    ops.push({ op: 'add', out: `${p}.resid1`, a: h, b: `${p}.o` });

    // MLP block.
    ops.push({ op: 'rmsnorm', out: `${p}.mlp_in`, x: `${p}.resid1`, weight: n.postNorm, eps: spec.rmsNormEps, dim: D });
    const xm = `${p}.mlp_in`;
    const mlpOf = (m: ReturnType<typeof mlpsOf>[number], slot: MlpSlot): MoeMlp => ({
      prefix: m.prefix,
      gate: m.gate,
      up: m.up,
      down: m.down,
      bias: spec.mlpBias,
      width: m.width,
      slot,
    });
    let mlpOut: V;
    if (!isMoeLayer(spec, l)) {
      const m = mlpOf(mlpsOf(spec, l)[0], spec.moe ? 'dense' : 'mlp');
      tapMlp(m, xm, l, null);
      ops.push(...mlpOps(m, xm, D));
      mlpOut = `${m.prefix}.down`;
    } else {
      const moe = spec.moe!;
      const names = moeNames(spec, l);
      const all = mlpsOf(spec, l);
      tapLinear(l, names.router, xm, D, null);
      taps.push({ kind: 'router-logits', layer: l, key: names.router, value: `${p}.router_logits`, channels: moe.numExperts, mask: null });
      const experts = all.slice(0, moe.numExperts).map((m, e) => mlpOf(m, { expert: e }));
      const shared = names.shared ? { mlp: mlpOf(all[moe.numExperts], 'shared'), gate: names.sharedGate! } : null;
      for (const m of experts) tapMlp(m, xm, l, `${m.prefix}.sel`);
      if (shared) {
        tapMlp(shared.mlp, xm, l, null);
        tapLinear(l, shared.gate, xm, D, null);
      }
      const op: Extract<Op, { op: 'moe' }> = {
        op: 'moe',
        out: '',
        x: xm,
        router: names.router,
        logits: `${p}.router_logits`,
        layer: l,
        hidden: D,
        topK: moe.topK,
        mode: moe.routing,
        experts,
        shared,
      };
      op.out = moeOutput(op);
      ops.push(op);
      mlpOut = op.out;
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
