/**
 * The IR cut into the subgraphs an NPU deployment runs (SPEC-outliers §1.6, mllm-NPU's per-layer
 * split), for targets (qnn) and passes (chunk partitioning) alike:
 *
 *   embed             CPU          token ids → h0 (→ its multiplier, granite)
 *   l<ℓ>_qkv          NPU static   G_{3ℓ}:   RMSNorm → q/k/v linears
 *   l<ℓ>_attn         CPU dynamic  G_{3ℓ+1}: RoPE(q, k) → KV append → attention (depends on the chunk index)
 *   l<ℓ>_mlp          NPU static   G_{3ℓ+2}: o_proj → residual add → RMSNorm → gate/up → SiLU·up → down → residual add
 *   l<ℓ>_shadow_<r>   CPU          the shadow correction of linears `r` (exact outlier terms, SPEC §1.2)
 *   head              CPU          final RMSNorm → lm_head (float, as mllm runs it)
 *
 * A linear with shadow execution needs its output corrected on the CPU before anything reads it, so a
 * static group is cut before the first op that reads a shadowed output (parts l<ℓ>_mlp, l<ℓ>_mlp_p1,
 * …), with the shadow node between; a part with no linear (the residual add after down_proj) runs on
 * the CPU, as mllm moves it there. Static subgraphs depend on the chunk length only and are shared by
 * every chunk; dynamic ones also on the chunk index. Inputs and outputs follow from liveness over the
 * op list: a value crosses a cut when it is produced before and read after it. Browser-safe.
 */
import type { ModelGraph, Op, V } from './ir.js';
import { opInputs, opOutputs } from './values.js';

export type Device = 'NPU' | 'CPU';
export type Share = 'static' | 'dynamic';
export type SubgraphKind = 'embed' | 'static' | 'attention' | 'shadow' | 'head';

export interface Subgraph {
  /** Stable name (file names, graph names): see the table above. */
  id: string;
  kind: SubgraphKind;
  /** Decoder layer; −1 for embed, numLayers for head. */
  layer: number;
  /** SPEC index j of G_{i,j}: 3ℓ, 3ℓ+1, 3ℓ+2 (shadow nodes and later parts keep their group's j); −1 embed, 3L head. */
  j: number;
  /** Part of its group (a static group cut by shadow nodes: 0, 1, …). */
  part: number;
  device: Device;
  share: Share;
  /** The IR ops it runs, in order (none for a shadow node). */
  ops: Op[];
  /** Values it reads from earlier subgraphs or the graph inputs, and values later ones (or the graph outputs) read. */
  inputs: V[];
  outputs: V[];
  /** Shadow nodes: the linears (weight names) whose outputs they correct, and those outputs. */
  shadow?: { weight: string; x: V; y: V }[];
}

const isDynamic = (op: Op) => op.op === 'rope' || op.op === 'attention';

/** Which decoder layer an op belongs to (by the names it writes), or null (embed, head). */
export function layerOfOp(op: Op): number | null {
  if (op.op === 'attention') return op.layer;
  const out = opOutputs(op)[0];
  const m = /^l(\d+)\.|^model\.layers\.(\d+)\./.exec(out);
  return m ? Number(m[1] ?? m[2]) : null;
}

type Draft = Omit<Subgraph, 'inputs' | 'outputs'>;

/** `q`, `down`, `hadamard`: the last name part of a weight, without `_proj`. */
const roleName = (weight: string) => weight.replace(/\.weight$/, '').split('.').pop()!.replace(/_proj$/, '');

/**
 * One static group (G_{3ℓ} or G_{3ℓ+2}) cut at shadowed linears: parts, and shadow nodes placed before
 * the first op reading a corrected output (or after the group when none of its ops does).
 */
function staticGroup(ops: Op[], layer: number, j: number, name: string, shadowed: ReadonlySet<string>): Draft[] {
  const out: Draft[] = [];
  let part: Op[] = [];
  let pending: Extract<Op, { op: 'linear' }>[] = [];
  let n = 0;
  const closePart = () => {
    if (!part.length) return;
    const hasLinear = part.some((o) => o.op === 'linear');
    out.push({ id: n === 0 ? `l${layer}_${name}` : `l${layer}_${name}_p${n}`, kind: 'static', layer, j, part: n, device: hasLinear ? 'NPU' : 'CPU', share: 'static', ops: part });
    n++;
    part = [];
  };
  const flush = () => {
    if (!pending.length) return;
    out.push({
      id: `l${layer}_shadow_${pending.map((l) => roleName(l.weight)).join('_')}`,
      kind: 'shadow',
      layer,
      j,
      part: n,
      device: 'CPU',
      share: 'static',
      ops: [],
      shadow: pending.map((l) => ({ weight: l.weight, x: l.x, y: l.out })),
    });
    pending = [];
  };
  for (const op of ops) {
    if (pending.some((l) => opInputs(op).includes(l.out))) {
      closePart();
      flush();
    }
    part.push(op);
    if (op.op === 'linear' && shadowed.has(op.weight)) pending.push(op);
  }
  closePart();
  flush();
  return out;
}

/** The subgraphs of decoder layer ℓ (inputs and outputs not yet filled: see partitionModel). */
export function layerSubgraphs(layerOps: Op[], layer: number, shadowed: ReadonlySet<string>): Draft[] {
  const first = layerOps.findIndex(isDynamic);
  const last = layerOps.length - 1 - [...layerOps].reverse().findIndex(isDynamic);
  if (first < 0) return staticGroup(layerOps, layer, 3 * layer, 'block', shadowed);
  const dyn = layerOps.slice(first, last + 1);
  if (dyn.some((o) => !isDynamic(o))) throw new Error(`internal: layer ${layer} mixes static ops into its attention`);
  return [
    ...staticGroup(layerOps.slice(0, first), layer, 3 * layer, 'qkv', shadowed),
    { id: `l${layer}_attn`, kind: 'attention', layer, j: 3 * layer + 1, part: 0, device: 'CPU', share: 'dynamic', ops: dyn },
    ...staticGroup(layerOps.slice(last + 1), layer, 3 * layer + 2, 'mlp', shadowed),
  ];
}

/**
 * The whole model as subgraphs in execution order, with each one's inputs and outputs by liveness.
 * `shadowed`: weight names of linears with a shadow correction (either side). Dense models only.
 */
export function partitionModel(graph: ModelGraph, shadowed: ReadonlySet<string> = new Set()): Subgraph[] {
  const L = graph.spec.numLayers;
  const byLayer: Op[][] = Array.from({ length: L }, () => []);
  const embed: Op[] = [];
  const head: Op[] = [];
  for (const op of graph.ops) {
    if (op.op === 'moe') throw new Error('internal: partitionModel takes dense models');
    const l = layerOfOp(op);
    if (l !== null) byLayer[l].push(op);
    // Before the first layer: the embedding and what scales it (granite's embedding multiplier).
    else if (op.op === 'embed' || byLayer.every((ops) => !ops.length)) embed.push(op);
    else head.push(op);
  }
  const drafts: Draft[] = [
    { id: 'embed', kind: 'embed', layer: -1, j: -1, part: 0, device: 'CPU', share: 'static', ops: embed },
    ...byLayer.flatMap((ops, l) => layerSubgraphs(ops, l, shadowed)),
    { id: 'head', kind: 'head', layer: L, j: 3 * L, part: 0, device: 'CPU', share: 'static', ops: head },
  ];
  // Liveness: what each reads (shadow nodes read the linear's input and output), what each writes.
  const reads = drafts.map((d) => (d.shadow ? d.shadow.flatMap((s) => [s.x, s.y]) : d.ops.flatMap(opInputs)));
  const writes = drafts.map((d) => (d.shadow ? d.shadow.map((s) => s.y) : d.ops.flatMap(opOutputs)));
  const graphOutputs = new Set(graph.outputs);
  return drafts.map((d, i) => {
    const own = new Set(d.shadow ? [] : writes[i]);
    const inputs = [...new Set(reads[i].filter((v) => !own.has(v)))];
    const later = new Set(reads.slice(i + 1).flat());
    const outputs = [...new Set(writes[i].filter((v) => later.has(v) || graphOutputs.has(v)))];
    return { ...d, inputs, outputs };
  });
}

/** Device switches along one forward pass (each is a CPU↔NPU synchronization). */
export function deviceSwitches(subgraphs: readonly Subgraph[]): number {
  let n = 0;
  for (let i = 1; i < subgraphs.length; i++) if (subgraphs[i].device !== subgraphs[i - 1].device) n++;
  return n;
}

/**
 * Dependency templates (SPEC §2 deps.json): `intra` edges producer → consumer within a chunk (by the
 * values they pass), and `cross`: an attention subgraph of chunk i reads the KV its own qkv subgraph
 * wrote for every chunk k ≤ i (Eq. 2).
 */
export function subgraphDeps(subgraphs: readonly Subgraph[]): { intra: [string, string][]; cross: { subgraph: string; needs: string; chunks: 'k<=i' }[] } {
  const producer = new Map<V, string>();
  const intra: [string, string][] = [];
  for (const s of subgraphs) {
    for (const v of s.inputs) {
      const p = producer.get(v);
      if (p && !intra.some(([a, b]) => a === p && b === s.id)) intra.push([p, s.id]);
    }
    for (const v of s.outputs) producer.set(v, s.id);
  }
  const cross = subgraphs
    .filter((s) => s.kind === 'attention')
    .map((s) => ({ subgraph: s.id, needs: intra.filter(([, b]) => b === s.id).map(([a]) => a)[0], chunks: 'k<=i' as const }));
  return { intra, cross };
}
