/**
 * The transformer, written once: Llama-family decoder (llama, mistral, qwen2) and its MoE
 * variants (mixtral, qwen2_moe) as an IR graph (see ir.ts) built from the normalized ArchSpec.
 */
import { biasOf, EMBED, FINAL_NORM, LM_HEAD, layerNames, moeNames } from '../arch/names.js';
import { mlpsOf } from '../arch/units.js';
import { isMoeLayer, windowOf, type ArchSpec } from '../arch/spec.js';
import { mlpOps, moeOutput } from './expand.js';
import { LlmcError } from '../errors.js';
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

  if (spec.localRope) throw new LlmcError(`${spec.modelType}: a rotary base of the sliding layers (${spec.localRope.theta}) other than the full layers' (${spec.ropeTheta}) is not implemented yet`);
  const offset = spec.rmsNormOffset;
  const norm = (out: V, x: V, weight: string): V => {
    ops.push({ op: 'rmsnorm', out, x, weight, eps: spec.rmsNormEps, dim: D, ...(offset ? { offset } : {}) });
    return out;
  };
  ops.push({ op: 'embed', out: spec.embeddingScale === null ? 'h0' : 'embed', ids: IO.ids, table: EMBED });
  if (spec.embeddingScale !== null) ops.push({ op: 'scale', out: 'h0', x: 'embed', by: spec.embeddingScale });
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

    // Attention block (olmo2's 'post' placement normalizes only the block's output).
    const xa = spec.normPlacement === 'post' ? h : norm(`${p}.attn_in`, h, n.inputNorm);
    for (const w of [n.q, n.k, n.v]) tapLinear(l, w, xa, D, null);
    linear(`${p}.q`, xa, n.q, D, spec.numHeads * hd, spec.qkvBias, { rows: qHeads });
    linear(`${p}.k`, xa, n.k, D, spec.numKvHeads * hd, spec.qkvBias, { rows: kvHeads });
    linear(`${p}.v`, xa, n.v, D, spec.numKvHeads * hd, spec.qkvBias, { rows: kvHeads });
    tapOutput(l, n.q, `${p}.q`, spec.numHeads * hd, null);
    tapOutput(l, n.k, `${p}.k`, spec.numKvHeads * hd, null);
    tapOutput(l, n.v, `${p}.v`, spec.numKvHeads * hd, null);
    let [q, k] = [`${p}.q`, `${p}.k`];
    if (spec.qkNorm) {
      const qn = spec.qkNorm;
      const perHead = qn.scope === 'head';
      const qkn = (out: V, x: V, weight: string, heads: number) =>
        ops.push({ op: 'rmsnorm', out, x, weight, eps: spec.rmsNormEps, dim: perHead ? hd : heads * hd, ...(perHead ? { heads } : {}), ...(qn.offset ? { offset: qn.offset } : {}) });
      qkn(`${p}.q_norm`, q, n.qNorm, spec.numHeads);
      qkn(`${p}.k_norm`, k, n.kNorm, spec.numKvHeads);
      [q, k] = [`${p}.q_norm`, `${p}.k_norm`];
    }
    ops.push({ op: 'rope', out: `${p}.q_rot`, x: q, cos: IO.cos, sin: IO.sin, heads: spec.numHeads, headDim: hd });
    ops.push({ op: 'rope', out: `${p}.k_rot`, x: k, cos: IO.cos, sin: IO.sin, heads: spec.numKvHeads, headDim: hd });
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
      slidingWindow: windowOf(spec, l),
      ...(spec.queryPreAttnScalar !== null ? { scale: spec.queryPreAttnScalar ** -0.5 } : {}),
      ...(spec.attnSoftcap !== null ? { softcap: spec.attnSoftcap } : {}),
    });
    taps.push({ kind: 'head-output', layer: l, key: `model.layers.${l}.self_attn`, value: `${p}.attn`, channels: spec.numHeads * hd, mask: null, heads: spec.numHeads });
    tapLinear(l, n.o, `${p}.attn`, spec.numHeads * hd, null);
    linear(`${p}.o`, `${p}.attn`, n.o, spec.numHeads * hd, D, spec.oBias, { cols: qHeads });
    tapOutput(l, n.o, `${p}.o`, D, null);
    const attnOut = spec.normPlacement === 'pre' ? `${p}.o` : norm(`${p}.o_norm`, `${p}.o`, n.postNorm);
    ops.push({ op: 'add', out: `${p}.resid1`, a: h, b: attnOut });

    // MLP block.
    const xm =
      spec.normPlacement === 'post' ? `${p}.resid1` : norm(`${p}.mlp_in`, `${p}.resid1`, spec.normPlacement === 'sandwich' ? n.preFfnNorm : n.postNorm);
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
    if (spec.normPlacement !== 'pre') mlpOut = norm(`${p}.mlp_norm`, mlpOut, n.postFfnNorm);
    ops.push({ op: 'add', out: `${p}.out`, a: `${p}.resid1`, b: mlpOut });
    h = `${p}.out`;
  }
  ops.push({ op: 'gatherPositions', out: 'h_last', x: h, positions: IO.logitPositions });
  norm('h_final', 'h_last', FINAL_NORM);
  const head = spec.tieEmbeddings ? EMBED : LM_HEAD;
  taps.push({ kind: 'linear-input', layer: spec.numLayers, key: head, value: 'h_final', channels: D, mask: null });
  const capped = spec.finalSoftcap !== null;
  ops.push({ op: 'linear', out: capped ? 'logits_raw' : IO.logits, x: 'h_final', weight: head, bias: null, inFeatures: D, outFeatures: spec.vocabSize });
  if (capped) ops.push({ op: 'softcap', out: IO.logits, x: 'logits_raw', cap: spec.finalSoftcap! });
  return { spec, inputs, ops, outputs, taps };
}
