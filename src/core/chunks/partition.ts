/**
 * The chunk-sharing partition of the IR (mllm-NPU §3.2, SPEC outliers-chunk-partition §1.6): the
 * model's ops cut into the subgraphs every chunk of a prompt runs, per layer as the SPEC's split
 *   qkv        G_{3ℓ}    static   RMSNorm → q/k/v linears → RoPE (positions are an input)
 *   attention  G_{3ℓ+1}  dynamic  KV append → QKᵀ/√d over the (i+1)·c keys of chunks 0..i with chunk
 *                                 i's causal mask → softmax → ·V (shapes depend on the chunk index)
 *   mlp        G_{3ℓ+2}  static   o_proj → residual → RMSNorm → gate/up → SiLU·up → down → residual
 *   shadow     (optional) a CPU node after a layer's mlp for the outlier shadow of down_proj (no IR
 *              ops in the float model: the outliers pass fills it)
 * plus `embed` (first) and `head` (final norm + lm_head). Static subgraphs depend only on the chunk
 * length c: built once, shared by every chunk. RoPE sits in qkv so that the K/V a chunk appends are
 * its qkv outputs: attention of chunk i then reads what G_{k,3ℓ} produced for k ≤ i, exactly the
 * paper's Eq. 2 (the released code ropes inside the attention node; the data it needs is the same).
 *
 * These functions are the contract other targets build chunk graphs from (docs/chunk-partition.md):
 * `partitionGraph` (which ops, which boundary values, the dependency template), `chunkIo` (every
 * subgraph's inputs and outputs with static shapes for chunk length c and chunk index i) and
 * `squareView` (the [1, a, b, h] view of a c-row activation, SPEC §1.8). Browser-safe.
 */
import { IO } from '../ir/build.js';
import type { ModelGraph, Op, V } from '../ir/ir.js';
import { opInputs, opOutputs, valueChannels } from '../ir/values.js';
import type { Template, TemplateEdge } from './schedule.js';

export const SUBGRAPH_KINDS = ['embed', 'qkv', 'attention', 'mlp', 'shadow', 'head'] as const;
export type SubgraphKind = (typeof SUBGRAPH_KINDS)[number];

/** Where each kind runs unless a cost table says otherwise (the paper's placement, SPEC §1.1). */
export const DEFAULT_DEVICE: Record<SubgraphKind, string> = { embed: 'CPU', qkv: 'NPU', attention: 'CPU', mlp: 'NPU', shadow: 'CPU', head: 'CPU' };

export interface Subgraph {
  /** Position in the chunk's subgraph order (G_{i,j}). */
  j: number;
  /** `embed`, `l<ℓ>.qkv`, `l<ℓ>.attention`, `l<ℓ>.mlp`, `l<ℓ>.shadow`, `head`. */
  id: string;
  kind: SubgraphKind;
  layer: number | null;
  /** static: the same graph for every chunk; dynamic: one per chunk index. */
  share: 'static' | 'dynamic';
  /** The IR ops it runs: graph.ops[from, to) (empty for a shadow node). */
  ops: [number, number];
  /** Activations it reads from other subgraphs, and those it produces that others read. */
  inputs: V[];
  outputs: V[];
  /** Graph inputs it reads: input_ids, the rope tables (cos/sin: positions), logit_positions, the KV cache of its layer. */
  feeds: V[];
}

export interface Partition {
  subgraphs: Subgraph[];
  /** Dependencies between subgraphs (transitively reduced; `cross` = Eq. 2, the rest Eq. 3). */
  edges: TemplateEdge[];
}

export class PartitionError extends Error {}

const GRAPH_INPUTS = (graph: ModelGraph) => new Set(graph.inputs.map((i) => i.name));

/**
 * Cut `graph` (the unit's IR, moe ops whole) into the chunk subgraphs. `shadowLayers`: layers with a
 * shadow node after their mlp. Throws PartitionError when the graph is not a chain of decoder layers
 * of the expected shape (e.g. a self-speculative graph with skipped layers is fine, a graph without
 * attention is not).
 */
export function partitionGraph(graph: ModelGraph, opts: { shadowLayers?: readonly number[] } = {}): Partition {
  const ops = graph.ops;
  const producer = new Map<V, number>();
  ops.forEach((op, k) => opOutputs(op).forEach((v) => producer.set(v, k)));
  const opAt = (v: V, want: Op['op']): number => {
    const k = producer.get(v);
    if (k === undefined || ops[k].op !== want) throw new PartitionError(`value ${v} is not written by a ${want} op`);
    return k;
  };
  const attention = ops.flatMap((op, k) => (op.op === 'attention' ? [k] : []));
  if (!attention.length) throw new PartitionError('the graph has no attention op');
  // A layer's qkv part starts at the input norm feeding its query projection: q ← [rope] ← [q norm] ←
  // linear ← rmsnorm; where norms follow the blocks (olmo2) the projection reads the residual, and
  // the part starts at the projection.
  const qkvStart = attention.map((a) => {
    const op = ops[a] as Extract<Op, { op: 'attention' }>;
    let q = op.q;
    for (const kind of ['rope', 'rmsnorm'] as const) {
      const k = producer.get(q);
      if (k !== undefined && ops[k].op === kind) q = (ops[k] as Extract<Op, { op: typeof kind }>).x;
    }
    const at = opAt(q, 'linear');
    const lin = ops[at] as Extract<Op, { op: 'linear' }>;
    const norm = producer.get(lin.x);
    return norm !== undefined && ops[norm].op === 'rmsnorm' && norm > (attention[attention.indexOf(a) - 1] ?? -1) ? norm : at;
  });
  const head = ops.findIndex((op) => op.op === 'gatherPositions');
  if (head < 0 || head < attention[attention.length - 1]) throw new PartitionError('the graph has no gatherPositions op after its last layer');
  const shadows = new Set(opts.shadowLayers ?? []);

  const parts: Omit<Subgraph, 'j' | 'inputs' | 'outputs' | 'feeds'>[] = [];
  const part = (kind: SubgraphKind, layer: number | null, from: number, to: number, allowed: readonly Op['op'][]) => {
    for (let k = from; k < to; k++) {
      if (!allowed.includes(ops[k].op)) throw new PartitionError(`op ${k} (${ops[k].op}) cannot be in a ${kind} subgraph`);
    }
    const id = layer === null ? kind : `l${layer}.${kind}`;
    parts.push({ id, kind, layer, share: kind === 'attention' ? 'dynamic' : 'static', ops: [from, to] });
  };
  // Elementwise scalings (gemma's embedding scale, granite's multipliers), GELU-tanh and soft-capping sit with their neighbours.
  part('embed', null, 0, qkvStart[0], ['embed', 'scale']);
  attention.forEach((a, n) => {
    const layer = (ops[a] as Extract<Op, { op: 'attention' }>).layer;
    if (qkvStart[n] >= a || (n > 0 && qkvStart[n] <= attention[n - 1])) throw new PartitionError(`layer ${layer}'s projections are not between its attention and the previous one`);
    part('qkv', layer, qkvStart[n], a, ['rmsnorm', 'linear', 'rope']);
    part('attention', layer, a, a + 1, ['attention']);
    part('mlp', layer, a + 1, n + 1 < attention.length ? qkvStart[n + 1] : head, ['linear', 'add', 'rmsnorm', 'silu', 'sigmoid', 'gelu_tanh', 'scale', 'mul', 'moe', 'router', 'column']);
    if (shadows.has(layer)) parts.push({ id: `l${layer}.shadow`, kind: 'shadow', layer, share: 'static', ops: [a + 1, a + 1] });
  });
  for (const l of shadows) if (!parts.some((p) => p.kind === 'mlp' && p.layer === l)) throw new PartitionError(`shadow layer ${l} is not a layer of the graph`);
  part('head', null, head, ops.length, ['gatherPositions', 'rmsnorm', 'linear', 'scale', 'softcap']);

  // Boundary values and data edges.
  const inputs = GRAPH_INPUTS(graph);
  const ownerOf = new Map<V, number>();
  parts.forEach((p, j) => {
    for (let k = p.ops[0]; k < p.ops[1]; k++) for (const v of opOutputs(ops[k])) ownerOf.set(v, j);
  });
  const subgraphs: Subgraph[] = parts.map((p, j) => ({ ...p, j, inputs: [], outputs: [], feeds: [] }));
  const data = new Map<string, TemplateEdge>();
  const addEdge = (from: number, to: number, cross: boolean) => {
    const key = `${from}>${to}`;
    const e = data.get(key);
    if (e) e.cross ||= cross;
    else data.set(key, { from, to, cross });
  };
  subgraphs.forEach((s, j) => {
    for (let k = s.ops[0]; k < s.ops[1]; k++) {
      const op = ops[k];
      for (const v of opInputs(op)) {
        if (inputs.has(v)) {
          if (!s.feeds.includes(v)) s.feeds.push(v);
          continue;
        }
        const from = ownerOf.get(v);
        if (from === undefined) throw new PartitionError(`value ${v} has no producer`);
        if (from === j) continue;
        if (!s.inputs.includes(v)) s.inputs.push(v);
        if (!subgraphs[from].outputs.includes(v)) subgraphs[from].outputs.push(v);
        // Attention reads the keys and values of every chunk up to its own: Eq. 2.
        addEdge(from, j, op.op === 'attention' && (v === op.k || v === op.v));
      }
    }
  });
  // A shadow node sits between its layer's mlp and whatever reads the mlp's outputs.
  for (const s of subgraphs) {
    if (s.kind !== 'shadow') continue;
    const mlp = subgraphs.find((x) => x.kind === 'mlp' && x.layer === s.layer)!;
    addEdge(mlp.j, s.j, false);
    for (const e of [...data.values()]) if (e.from === mlp.j && e.to !== s.j) addEdge(s.j, e.to, false);
  }
  return { subgraphs, edges: reduce([...data.values()], subgraphs.length) };
}

/** Drop intra-chunk edges implied by a path of other edges; cross edges always stay (they say more). */
function reduce(edges: TemplateEdge[], M: number): TemplateEdge[] {
  const succ: number[][] = Array.from({ length: M }, () => []);
  for (const e of edges) succ[e.from].push(e.to);
  const reachableAvoiding = (from: number, to: number): boolean => {
    const seen = new Set<number>();
    const stack = succ[from].filter((x) => x !== to);
    while (stack.length) {
      const x = stack.pop()!;
      if (x === to) return true;
      if (x > to || seen.has(x)) continue;
      seen.add(x);
      stack.push(...succ[x]);
    }
    return false;
  };
  return edges.filter((e) => e.cross || !reachableAvoiding(e.from, e.to)).sort((a, b) => a.to - b.to || a.from - b.from);
}

/** The scheduling template of a partition with each subgraph on `deviceOf(kind)`. */
export function templateOf(p: Partition, deviceOf: (kind: SubgraphKind) => string): Template {
  return { nodes: p.subgraphs.map((s) => ({ id: s.id, device: deviceOf(s.kind) })), edges: p.edges };
}

export interface TensorShape {
  name: string;
  dtype: 'float32' | 'int64';
  dims: number[];
}

/** The I/O names chunk graphs use for the graph inputs a subgraph reads. */
export const CHUNK_IO = {
  inputIds: 'input_ids',
  /** RoPE angles come from the positions of the chunk's tokens (i·c + t). */
  positionIds: 'position_ids',
  pastKey: 'past_key',
  pastValue: 'past_value',
  presentKey: 'present_key',
  presentValue: 'present_value',
  logits: IO.logits,
} as const;

/**
 * Inputs and outputs of subgraph `s` for chunk length `c` and chunk index `i`, with static shapes
 * (batch 1). Activations are [1, c, C]; a qkv subgraph takes `position_ids` [1, c]; attention takes
 * the KV of chunks 0..i−1 as past_key/past_value [1, Hkv, i·c, hd] and gives present_key/value
 * [1, Hkv, (i+1)·c, hd] (the KV append); the head gives logits [1, c, V]. Static subgraphs do not
 * depend on i.
 */
export function chunkIo(graph: ModelGraph, s: Subgraph, c: number, i = 0): { inputs: TensorShape[]; outputs: TensorShape[] } {
  const ch = valueChannels(graph);
  const act = (v: V): TensorShape => ({ name: v, dtype: 'float32', dims: [1, c, ch.get(v)!] });
  const inputs = s.inputs.map(act);
  const outputs = s.outputs.map(act);
  if (s.feeds.includes(IO.ids)) inputs.unshift({ name: CHUNK_IO.inputIds, dtype: 'int64', dims: [1, c] });
  if (s.feeds.includes(IO.cos) || s.feeds.includes(IO.cosLocal)) inputs.push({ name: CHUNK_IO.positionIds, dtype: 'int64', dims: [1, c] });
  if (s.kind === 'attention') {
    const op = graph.ops[s.ops[0]] as Extract<Op, { op: 'attention' }>;
    const kv = (name: string, n: number): TensorShape => ({ name, dtype: 'float32', dims: [1, op.kvHeads, n, op.headDim] });
    inputs.push(kv(CHUNK_IO.pastKey, i * c), kv(CHUNK_IO.pastValue, i * c));
    outputs.push(kv(CHUNK_IO.presentKey, (i + 1) * c), kv(CHUNK_IO.presentValue, (i + 1) * c));
  }
  if (s.kind === 'head') outputs.push({ name: CHUNK_IO.logits, dtype: 'float32', dims: [1, c, graph.spec.vocabSize] });
  return { inputs, outputs };
}

/** The [a, b] with a·b = c and a ≤ b closest to square: linears run on [1, a, b, h] views on NPUs (SPEC §1.8, closestFactors). */
export function squareView(c: number): [number, number] {
  let a = Math.floor(Math.sqrt(c));
  while (c % a) a--;
  return [a, c / a];
}

/** Bytes of the activations a static subgraph keeps for one chunk (every value it writes, [c, C] float32): A_stat of SPEC §1.6. */
export function activationBytes(graph: ModelGraph, s: Subgraph, c: number): number {
  const ch = valueChannels(graph);
  let n = 0;
  for (let k = s.ops[0]; k < s.ops[1]; k++) for (const v of opOutputs(graph.ops[k])) if (!v.startsWith('present_')) n += ch.get(v) ?? 0;
  return 4 * c * n;
}
