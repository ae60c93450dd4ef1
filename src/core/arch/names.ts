/**
 * Hugging Face tensor names and the shapes config.json implies for them. Everything inside llmc
 * names tensors the Hugging Face way; backends map to their own names at the edge.
 */
import { archOf, mlpNames, type MlpNames, type MoeNames } from './registry.js';
import { isMoeLayer, type ArchSpec } from './spec.js';

export interface ExpectedTensor {
  name: string;
  shape: number[];
  role: TensorRole;
}

const attn = (l: number, p: string) => `model.layers.${l}.self_attn.${p}`;

export { mlpNames, type MlpNames, type MoeNames };

/** The router and expert projections of an MoE layer, in the checkpoint's own naming (from the registry). */
export function moeNames(spec: ArchSpec, l: number): MoeNames {
  return archOf(spec).moe!.names(l, spec.moe!);
}

/** A bias's name from its weight's. */
export const biasOf = (weight: string): string => weight.replace(/\.weight$/, '.bias');

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
  qNorm: attn(l, 'q_norm.weight'),
  kNorm: attn(l, 'k_norm.weight'),
  preFfNorm: `model.layers.${l}.pre_feedforward_layernorm.weight`,
  postFfNorm: `model.layers.${l}.post_feedforward_layernorm.weight`,
  mlp: mlpNames(`model.layers.${l}.mlp`),
});

/** A layer's norms by where they sit (spec.normPlacement): on a block's input, on its output, or absent. */
export interface LayerNorms {
  attnIn: string | null;
  attnOut: string | null;
  mlpIn: string | null;
  mlpOut: string | null;
}

export function layerNorms(spec: Pick<ArchSpec, 'normPlacement'>, l: number): LayerNorms {
  const n = layerNames(l);
  switch (spec.normPlacement) {
    case 'pre':
      return { attnIn: n.inputNorm, attnOut: null, mlpIn: n.postNorm, mlpOut: null };
    // olmo2: post_attention_layernorm normalizes the attention's output.
    case 'post':
      return { attnIn: null, attnOut: n.postNorm, mlpIn: null, mlpOut: n.postFfNorm };
    case 'sandwich':
      return { attnIn: n.inputNorm, attnOut: n.postNorm, mlpIn: n.preFfNorm, mlpOut: n.postFfNorm };
  }
}

/** The widths of layer l's q and k norm weights (none without qkNorm). */
function qkNormWidths(spec: ArchSpec): [number, number] | null {
  if (!spec.qkNorm) return null;
  return spec.qkNorm.scope === 'head' ? [spec.headDim, spec.headDim] : [spec.numHeads * spec.headDim, spec.numKvHeads * spec.headDim];
}

export const EMBED = 'model.embed_tokens.weight';
export const FINAL_NORM = 'model.norm.weight';
export const LM_HEAD = 'lm_head.weight';

/** What a tensor is for: components for inspect, and targets' per-role format rules (norms and routers stay F32). */
export type TensorRole = 'embedding' | 'lm_head' | 'norm' | 'attention' | 'mlp' | 'router' | 'expert' | 'shared_expert' | 'shared_expert_gate';

/**
 * How many tensors expectedTensors lists, in closed form: checked against a file's own tensor count
 * before anything is enumerated, so a config claiming 1e308 layers or 10^7 experts is refused at once.
 */
export function expectedTensorCount(spec: ArchSpec): number {
  const mlp = 3 + (spec.mlpBias ? 3 : 0);
  const attn = 4 + (spec.qkvBias ? 3 : 0) + (spec.oBias ? 1 : 0) + (spec.qkNorm ? 2 : 0);
  const norms = Object.values(layerNorms(spec, 0)).filter((n) => n !== null).length;
  const moe = spec.moe;
  const moeLayers = moe ? spec.numLayers - moe.denseLayers.filter((l) => l < spec.numLayers).length : 0;
  const perMoe = moe ? 1 + moe.numExperts * mlp + (moe.sharedExpertIntermediateSize ? mlp + 1 : 0) : 0;
  return 1 + spec.numLayers * (norms + attn) + (spec.numLayers - moeLayers) * mlp + moeLayers * perMoe + 1 + (spec.tieEmbeddings ? 0 : 1);
}

/** Every tensor the spec requires, with its shape ([out, in] for linears, as HF stores them) and role. */
export function expectedTensors(spec: ArchSpec): ExpectedTensor[] {
  const D = spec.hiddenSize;
  const qDim = spec.numHeads * spec.headDim;
  const kvDim = spec.numKvHeads * spec.headDim;
  const out: ExpectedTensor[] = [{ name: EMBED, shape: [spec.vocabSize, D], role: 'embedding' }];
  const mlp = (names: MlpNames, I: number, role: TensorRole) => {
    out.push({ name: names.gate, shape: [I, D], role }, { name: names.up, shape: [I, D], role }, { name: names.down, shape: [D, I], role });
    if (spec.mlpBias) {
      for (const [n, len] of [[names.gate, I], [names.up, I], [names.down, D]] as const) out.push({ name: biasOf(n), shape: [len], role });
    }
  };
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerNames(l);
    for (const norm of Object.values(layerNorms(spec, l))) if (norm) out.push({ name: norm, shape: [D], role: 'norm' });
    out.push(
      { name: n.q, shape: [qDim, D], role: 'attention' },
      { name: n.k, shape: [kvDim, D], role: 'attention' },
      { name: n.v, shape: [kvDim, D], role: 'attention' },
      { name: n.o, shape: [D, qDim], role: 'attention' },
    );
    if (spec.qkvBias) {
      out.push({ name: n.qBias, shape: [qDim], role: 'attention' }, { name: n.kBias, shape: [kvDim], role: 'attention' }, { name: n.vBias, shape: [kvDim], role: 'attention' });
    }
    if (spec.oBias) out.push({ name: n.oBias, shape: [D], role: 'attention' });
    const qk = qkNormWidths(spec);
    if (qk) out.push({ name: n.qNorm, shape: [qk[0]], role: 'norm' }, { name: n.kNorm, shape: [qk[1]], role: 'norm' });
    if (isMoeLayer(spec, l)) {
      const m = moeNames(spec, l);
      const moe = spec.moe!;
      out.push({ name: m.router, shape: [moe.numExperts, D], role: 'router' });
      for (const e of m.experts) mlp(e, moe.expertIntermediateSize, 'expert');
      if (m.shared) {
        mlp(m.shared, moe.sharedExpertIntermediateSize!, 'shared_expert');
        out.push({ name: m.sharedGate!, shape: [1, D], role: 'shared_expert_gate' });
      }
    } else {
      mlp(n.mlp, spec.intermediateSize, 'mlp');
    }
  }
  out.push({ name: FINAL_NORM, shape: [D], role: 'norm' });
  if (!spec.tieEmbeddings) out.push({ name: LM_HEAD, shape: [spec.vocabSize, D], role: 'lm_head' });
  return out;
}

/** The parts of a model tensors are counted under (inspect, compile summaries, reports). */
export const COMPONENTS = ['embedding', 'attention', 'mlp', 'experts', 'shared_expert', 'router', 'norms', 'lm_head', 'other'] as const;
export type Component = (typeof COMPONENTS)[number];

const COMPONENT_OF_ROLE: Record<TensorRole, Component> = {
  embedding: 'embedding',
  lm_head: 'lm_head',
  norm: 'norms',
  attention: 'attention',
  mlp: 'mlp',
  router: 'router',
  expert: 'experts',
  shared_expert: 'shared_expert',
  shared_expert_gate: 'shared_expert',
};

/** The component a tensor of this role counts under; tensors the architecture does not name are "other". */
export const componentOf = (role: TensorRole | undefined): Component => (role ? COMPONENT_OF_ROLE[role] : 'other');

/** name → role for every tensor the spec requires (tensors it does not know are absent). */
export function tensorRoles(spec: ArchSpec): Map<string, TensorRole> {
  return new Map(expectedTensors(spec).map((t) => [t.name, t.role]));
}
