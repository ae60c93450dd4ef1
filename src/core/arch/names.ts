/**
 * Hugging Face tensor names and the shapes config.json implies for them. Everything inside llmc
 * names tensors the Hugging Face way; backends map to their own names at the edge.
 */
import { isMoeLayer, type ArchSpec } from './spec.js';

export interface ExpectedTensor {
  name: string;
  shape: number[];
}

const attn = (l: number, p: string) => `model.layers.${l}.self_attn.${p}`;

/** Names of one dense SwiGLU MLP's projections under `prefix`. */
export function mlpNames(prefix: string): { gate: string; up: string; down: string } {
  return { gate: `${prefix}.gate_proj.weight`, up: `${prefix}.up_proj.weight`, down: `${prefix}.down_proj.weight` };
}

/** The router and expert projections of an MoE layer, in the checkpoint's own naming. */
export function moeNames(spec: ArchSpec, l: number) {
  const m = spec.moe!;
  if (spec.modelType === 'mixtral') {
    const p = `model.layers.${l}.block_sparse_moe`;
    return {
      router: `${p}.gate.weight`,
      experts: Array.from({ length: m.numExperts }, (_, e) => ({
        gate: `${p}.experts.${e}.w1.weight`,
        down: `${p}.experts.${e}.w2.weight`,
        up: `${p}.experts.${e}.w3.weight`,
      })),
      shared: null,
      sharedGate: null,
    };
  }
  const p = `model.layers.${l}.mlp`;
  return {
    router: `${p}.gate.weight`,
    experts: Array.from({ length: m.numExperts }, (_, e) => mlpNames(`${p}.experts.${e}`)),
    shared: m.sharedExpertIntermediateSize ? mlpNames(`${p}.shared_expert`) : null,
    sharedGate: m.sharedExpertIntermediateSize ? `${p}.shared_expert_gate.weight` : null,
  };
}

export const layerNames = (l: number) => ({
  inputNorm: `model.layers.${l}.input_layernorm.weight`,
  postNorm: `model.layers.${l}.post_attention_layernorm.weight`,
  q: attn(l, 'q_proj.weight'),
  k: attn(l, 'k_proj.weight'),
  v: attn(l, 'v_proj.weight'),
  o: attn(l, 'o_proj.weight'),
  qBias: attn(l, 'q_proj.bias'),
  kBias: attn(l, 'k_proj.bias'),
  vBias: attn(l, 'v_proj.bias'),
  oBias: attn(l, 'o_proj.bias'),
  mlp: mlpNames(`model.layers.${l}.mlp`),
});

export const EMBED = 'model.embed_tokens.weight';
export const FINAL_NORM = 'model.norm.weight';
export const LM_HEAD = 'lm_head.weight';

/** Every tensor the spec requires, with its shape ([out, in] for linears, as HF stores them). */
export function expectedTensors(spec: ArchSpec): ExpectedTensor[] {
  const D = spec.hiddenSize;
  const qDim = spec.numHeads * spec.headDim;
  const kvDim = spec.numKvHeads * spec.headDim;
  const out: ExpectedTensor[] = [{ name: EMBED, shape: [spec.vocabSize, D] }];
  const mlp = (names: { gate: string; up: string; down: string }, I: number) => {
    out.push({ name: names.gate, shape: [I, D] }, { name: names.up, shape: [I, D] }, { name: names.down, shape: [D, I] });
    if (spec.mlpBias) {
      for (const [n, len] of [[names.gate, I], [names.up, I], [names.down, D]] as const) {
        out.push({ name: n.replace(/\.weight$/, '.bias'), shape: [len] });
      }
    }
  };
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerNames(l);
    out.push(
      { name: n.inputNorm, shape: [D] },
      { name: n.postNorm, shape: [D] },
      { name: n.q, shape: [qDim, D] },
      { name: n.k, shape: [kvDim, D] },
      { name: n.v, shape: [kvDim, D] },
      { name: n.o, shape: [D, qDim] },
    );
    if (spec.qkvBias) out.push({ name: n.qBias, shape: [qDim] }, { name: n.kBias, shape: [kvDim] }, { name: n.vBias, shape: [kvDim] });
    if (spec.oBias) out.push({ name: n.oBias, shape: [D] });
    if (isMoeLayer(spec, l)) {
      const m = moeNames(spec, l);
      const moe = spec.moe!;
      out.push({ name: m.router, shape: [moe.numExperts, D] });
      for (const e of m.experts) mlp(e, moe.expertIntermediateSize);
      if (m.shared) {
        mlp(m.shared, moe.sharedExpertIntermediateSize!);
        out.push({ name: m.sharedGate!, shape: [1, D] });
      }
    } else {
      mlp(n.mlp, spec.intermediateSize);
    }
  }
  out.push({ name: FINAL_NORM, shape: [D] });
  if (!spec.tieEmbeddings) out.push({ name: LM_HEAD, shape: [spec.vocabSize, D] });
  return out;
}
