/**
 * The transformer, written once: Llama-family decoder (llama, mistral, qwen2) and its MoE
 * variants (mixtral, qwen2_moe) as an IR graph (see ir.ts) built from the normalized ArchSpec.
 */
import { biasOf, EMBED, FINAL_NORM, LM_HEAD, layerNames, layerNorms, moeNames } from '../arch/names.js';
import { mlpsOf } from '../arch/units.js';
import { hasRope, isMoeLayer, windowOf, type ArchSpec } from '../arch/spec.js';
import { mlpOps, moeOutput } from './expand.js';
import { layerMask } from './mask.js';
import type { ElasticAxis, GraphInput, MlpSlot, ModelGraph, MoeMlp, Op, TapPoint, V } from './ir.js';


/** Graph input/output names every lowering and the engine agree on. */
export const IO = {
  ids: 'input_ids',
  cos: 'cos',
  sin: 'sin',
  /** The sliding layers' own tables (spec.localRope: gemma3's rope_local_base_freq), [T, hd/2]. */
  cosLocal: 'cos_local',
  sinLocal: 'sin_local',
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
  if (spec.localRope) inputs.push({ name: IO.cosLocal, dtype: 'float32', dims: ['T', hd / 2] }, { name: IO.sinLocal, dtype: 'float32', dims: ['T', hd / 2] });
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

  const mult = spec.multipliers;
  /** gemma's layer and final norms multiply by (1 + w). */
  const offset = spec.rmsNormOffset ? { offset: spec.rmsNormOffset } : {};
  /** x scaled by `by` (no op when by is 1). */
  const scaled = (out: V, x: V, by: number): V => {
    if (by === 1) return x;
    ops.push({ op: 'scale', out, x, by });
    return out;
  };
  /** x + block, the block normalized (`norm`, post-norm placements) and scaled (granite) first. */
  const residual = (out: V, x: V, block: V, norm: string | null, p: string): void => {
    if (norm) {
      ops.push({ op: 'rmsnorm', out: `${p}_norm`, x: block, weight: norm, eps: spec.rmsNormEps, dim: D, ...offset });
      block = `${p}_norm`;
    }
    ops.push({ op: 'add', out, a: x, b: scaled(`${p}_scaled`, block, mult?.residual ?? 1) });
  };
  /** The block's input: x normalized by `norm`, or x itself. */
  const blockInput = (out: V, x: V, norm: string | null): V => {
    if (!norm) return x;
    ops.push({ op: 'rmsnorm', out, x, weight: norm, eps: spec.rmsNormEps, dim: D, ...offset });
    return out;
  };
  const qk = spec.qkNorm;
  /** q or k after its norm (qkNorm), before rope. */
  const qkNormed = (v: V, weight: string, heads: number): V => {
    if (!qk) return v;
    const off = qk.offset ? { offset: qk.offset } : {};
    if (qk.scope === 'head') ops.push({ op: 'rmsnorm', out: `${v}_norm`, x: v, weight, eps: spec.rmsNormEps, dim: hd, heads, ...off });
    else ops.push({ op: 'rmsnorm', out: `${v}_norm`, x: v, weight, eps: spec.rmsNormEps, dim: heads * hd, ...off });
    return `${v}_norm`;
  };

  ops.push({ op: 'embed', out: 'h0', ids: IO.ids, table: EMBED });
  let h: V = scaled('h0_scaled', 'h0', mult?.embedding ?? 1);
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerNames(l);
    const norms = layerNorms(spec, l);
    const p = `l${l}`;
    inputs.push(
      { name: IO.pastKey(l), dtype: 'float32', dims: ['B', spec.numKvHeads, 'P', hd] },
      { name: IO.pastValue(l), dtype: 'float32', dims: ['B', spec.numKvHeads, 'P', hd] },
    );
    outputs.push(IO.presentKey(l), IO.presentValue(l));
    const qHeads: ElasticAxis = { unit: 'q-heads', layer: l };
    const kvHeads: ElasticAxis = { unit: 'kv-heads', layer: l };

    // Attention block.
    const xa = blockInput(`${p}.attn_in`, h, norms.attnIn);
    for (const w of [n.q, n.k, n.v]) tapLinear(l, w, xa, D, null);
    linear(`${p}.q`, xa, n.q, D, spec.numHeads * hd, spec.qkvBias, { rows: qHeads });
    linear(`${p}.k`, xa, n.k, D, spec.numKvHeads * hd, spec.qkvBias, { rows: kvHeads });
    linear(`${p}.v`, xa, n.v, D, spec.numKvHeads * hd, spec.qkvBias, { rows: kvHeads });
    tapOutput(l, n.q, `${p}.q`, spec.numHeads * hd, null);
    tapOutput(l, n.k, `${p}.k`, spec.numKvHeads * hd, null);
    tapOutput(l, n.v, `${p}.v`, spec.numKvHeads * hd, null);
    let q = qkNormed(`${p}.q`, n.qNorm, spec.numHeads);
    let k = qkNormed(`${p}.k`, n.kNorm, spec.numKvHeads);
    if (hasRope(spec, l)) {
      const local = spec.localRope !== null && windowOf(spec, l) !== null;
      const [cos, sin] = local ? [IO.cosLocal, IO.sinLocal] : [IO.cos, IO.sin];
      ops.push({ op: 'rope', out: `${p}.q_rot`, x: q, cos, sin, heads: spec.numHeads, headDim: hd });
      ops.push({ op: 'rope', out: `${p}.k_rot`, x: k, cos, sin, heads: spec.numKvHeads, headDim: hd });
      q = `${p}.q_rot`;
      k = `${p}.k_rot`;
    }
    ops.push({
      op: 'attention',
      out: `${p}.attn`,
      presentK: IO.presentKey(l),
      presentV: IO.presentValue(l),
      q,
      k,
      v: `${p}.v`,
      pastK: IO.pastKey(l),
      pastV: IO.pastValue(l),
      layer: l,
      heads: spec.numHeads,
      kvHeads: spec.numKvHeads,
      headDim: hd,
      mask: layerMask(spec, l),
      ...(mult?.attention != null ? { scale: mult.attention } : {}),
      ...(spec.attnSoftcap !== null ? { softcap: spec.attnSoftcap } : {}),
    });
    taps.push({ kind: 'head-output', layer: l, key: `model.layers.${l}.self_attn`, value: `${p}.attn`, channels: spec.numHeads * hd, mask: null, heads: spec.numHeads });
    tapLinear(l, n.o, `${p}.attn`, spec.numHeads * hd, null);
    linear(`${p}.o`, `${p}.attn`, n.o, spec.numHeads * hd, D, spec.oBias, { cols: qHeads });
    tapOutput(l, n.o, `${p}.o`, D, null);
    residual(`${p}.resid1`, h, `${p}.o`, norms.attnOut, `${p}.attn_out`);

    // MLP block.
    const xm = blockInput(`${p}.mlp_in`, `${p}.resid1`, norms.mlpIn);
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
      ops.push(...mlpOps(m, xm, D, spec.hiddenAct));
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
    residual(`${p}.out`, `${p}.resid1`, mlpOut, norms.mlpOut, `${p}.mlp_out`);
    h = `${p}.out`;
  }
  ops.push({ op: 'gatherPositions', out: 'h_last', x: h, positions: IO.logitPositions });
  ops.push({ op: 'rmsnorm', out: 'h_final', x: 'h_last', weight: FINAL_NORM, eps: spec.rmsNormEps, dim: D, ...offset });
  const head = spec.tieEmbeddings ? EMBED : LM_HEAD;
  taps.push({ kind: 'linear-input', layer: spec.numLayers, key: head, value: 'h_final', channels: D, mask: null });
  const divide = mult?.logitsDivide ?? 1;
  const cap = spec.finalSoftcap;
  ops.push({ op: 'linear', out: divide === 1 && cap === null ? IO.logits : 'logits_raw', x: 'h_final', weight: head, bias: null, inFeatures: D, outFeatures: spec.vocabSize });
  if (divide !== 1) ops.push({ op: 'scale', out: cap === null ? IO.logits : 'logits_div', x: 'logits_raw', by: 1 / divide });
  if (cap !== null) ops.push({ op: 'softcap', out: IO.logits, x: divide === 1 ? 'logits_raw' : 'logits_div', cap });
  return { spec, inputs, ops, outputs, taps };
}
