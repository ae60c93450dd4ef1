/**
 * Record `spec-tree/2`: the verification tree(s) the `tree-search` pass chose for speculative
 * decoding, with the runtime artifacts of each (SPEC verification-tree-search §7): bit-packed tree
 * mask, position ids, tree indices, retrieve indices, the draft's expansion plan, KV keep lists, and
 * the predicted tokens per target step and tokens/s. Read by the TS runtime (`llmc run
 * --speculative`) and by targets; every artifact is re-derived from the tree and compared when the
 * record is read, so a consumer can trust them. Browser-safe.
 *
 * Version 2: `predicted.acceptedPerStep` is what the runtime achieves (its own trajectory replayed
 * over the calibration sequences: the plan is chosen by it), the per-position formula moved to
 * `predicted.perPositionAcceptedPerStep`; `validation` holds a 95% interval on the calibration
 * figure and the same figure on held-out prompts. Version 1 records are still read.
 */
import { LlmcError, summarize } from '../errors.js';
import { stableJson } from '../util/stable-json.js';
import { Checker } from '../util/check.js';
import {
  checkTreeShape,
  depthsOf,
  expansionPlan,
  fromBase64,
  leafPaths,
  maskNnz,
  maskWords,
  packedMask,
  toBase64,
  type ExpansionLevel,
  type TreeShape,
} from './tree.js';
import { defineRecord } from './types.js';

export * from './tree.js';

/** What drafts the tree. */
export type DraftSpec =
  /** An elastic level of the target itself (record `elastic-prefix/1`), by id. */
  | { kind: 'level'; level: string; nominal: number }
  /** The target with these decoder layers skipped (self-speculative). */
  | { kind: 'skip'; layers: number[] }
  /** Another checkpoint with the same vocabulary: `sha256` is its identity (a ts artifact's `source.sha256`). */
  | { kind: 'checkpoint'; path: string; sha256: string; modelType: string; vocabSize: number };

export interface Predicted {
  /** Tokens per target step when the runtime's own trajectory is replayed over the calibration sequences (what `--speculative` reports). */
  acceptedPerStep: number;
  /** E[L] averaged uniformly over calibration positions: 1 + Σ_{v≠root} count(v)/N (SPEC §5.1); overweights deep branches. */
  perPositionAcceptedPerStep: number;
  /** Draft + verification time of one step under the record's latency model. */
  stepMs: number;
  tokensPerSecond: number;
}

export interface TreePlan extends TreeShape {
  /** Nodes, the root included. */
  n: number;
  depth: number;
  /** Which candidate feeds each node: [draft step (= depth − 1), rank]; the root [-1, -1]. */
  treeIndices: [number, number][];
  /** RoPE position offsets: the node's depth (the runtime adds the context length). */
  positionIds: number[];
  /** `packedMask`: n rows of maskWords(n) little-endian u64 words, base64. */
  mask: { words: number; base64: string };
  /** One row per leaf: its root-to-leaf node indices, padded with -1 to depth + 1. */
  retrieveIndices: number[][];
  /** KV compaction: per leaf path, the tree nodes whose KV rows are kept when the whole path is accepted. */
  keep: number[][];
  expansion: ExpansionLevel[];
  /** Non-zeros of the tree mask (the sparse attention work). */
  nnz: number;
  predicted: Predicted;
}

export interface ParetoRow {
  /** The context bucket. */
  ctx: number;
  /** Budget (nodes) and depth cap searched; `nodes` is the size of the tree found. */
  n: number;
  D: number;
  nodes: number;
  acceptedPerStep: number;
  stepMs: number;
  tokensPerSecond: number;
}

/** Ghidorah §5.4: a column split of every linear layer between two units, and the attention split. */
export interface PartitionPlan {
  units: [string, string];
  /** Share of output columns on the first unit. */
  share: number;
  tile: number;
  linear: { weight: string; outFeatures: number; first: [number, number]; second: [number, number] }[];
  /** Per context bucket: the dense part (n × ctx) on `dense`, the tree part (n × n, `nnz`) on `sparse`. */
  attention: { ctx: number; dense: string; sparse: string; denseShare: number }[];
  barriersPerLayer: number;
  stepMs: number;
  /** Step time on the first unit alone, for comparison. */
  singleUnitMs: number;
}

/** LLMCad's dynamic tree policy (§1.2–1.4): branch threshold, fallback α and its update rule. */
export interface FallbackPolicy {
  branchThresh: number;
  alpha0: number;
  decay: number;
  update: 'eq3' | 'prose';
  /** Draft tokens per tree at most. */
  maxTokens: number;
}

/** Tokens per target step of one plan over a set of prompts: Σ tokens / Σ steps, with a 95% interval (prompts as clusters). */
export interface AcceptanceEstimate {
  prompts: number;
  steps: number;
  acceptedPerStep: number;
  ci95: [number, number];
}

export interface SpecTree {
  format: 'spec-tree/2';
  draft: DraftSpec;
  verify: 'greedy';
  mode: 'optimal' | 'sequoia' | 'ghidorah' | 'llmcad';
  profile: {
    /** The calibration profile key and the trace geometry. */
    key: string;
    prompts: number;
    /** Held-out prompts the plan was checked on (version 2). */
    heldOut?: number;
    generated: number;
    positions: number;
    depth: number;
    topK: number;
  };
  /** Derived acceptance models: a[h][i] = P(rank at depth h+1 = i); p[i] pooled over depths, given the parent accepted. */
  acceptance: { marginal: number[][]; positional: number[] };
  latency: { source: string; device: string; ctx: number[]; verifyN: number[]; verifyMs: number[][]; draftBatch: number[]; draftMs: number[][]; perNodeMs: number };
  plans: TreePlan[];
  /** Plan per context length: the first bucket whose ctx ≥ the current context (else the last). */
  buckets: { ctx: number; plan: number }[];
  pareto: ParetoRow[];
  partition: PartitionPlan | null;
  fallback: FallbackPolicy | null;
  /** Other trees on the same traces (chain, Medusa's 63-node tree, the other modes): predicted figures. */
  comparison: Record<string, { nodes: number; acceptedPerStep: number; stepMs: number; tokensPerSecond: number }>;
  /** The first bucket's plan on the calibration prompts (chosen there) and on held-out prompts (disjoint; null without any). */
  validation: { calibration: AcceptanceEstimate; heldOut: AcceptanceEstimate | null } | null;
  notes: string[];
}

/** The artifacts of a tree (the record's TreePlan without predictions). */
export function planArtifacts(t: TreeShape): Omit<TreePlan, 'predicted'> {
  checkTreeShape(t);
  const depth = depthsOf(t.parent);
  const D = Math.max(...depth);
  const paths = leafPaths(t.parent);
  return {
    parent: [...t.parent],
    rank: [...t.rank],
    n: t.parent.length,
    depth: D,
    treeIndices: t.parent.map((_, i) => (i === 0 ? [-1, -1] : [depth[i] - 1, t.rank[i]])),
    positionIds: depth,
    mask: { words: maskWords(t.parent.length), base64: toBase64(packedMask(t.parent)) },
    retrieveIndices: paths.map((p) => [...p, ...new Array<number>(D + 1 - p.length).fill(-1)]),
    keep: paths,
    expansion: expansionPlan(t.parent),
    nnz: maskNnz(t.parent),
  };
}

/** Equal as JSON values (key order aside: manifests are written with sorted keys). */
const same = (a: unknown, b: unknown) => stableJson(a) === stableJson(b);

function readPlan(c: Checker, v: unknown, path: string, v1: boolean): TreePlan {
  const o = c.obj(v, path);
  const parent = c.arr(o.parent, `${path}.parent`).map((x, i) => (i === 0 && x === -1 ? -1 : c.int(x, `${path}.parent[${i}]`)));
  const rank = c.arr(o.rank, `${path}.rank`).map((x, i) => (i === 0 && x === -1 ? -1 : c.int(x, `${path}.rank[${i}]`)));
  try {
    checkTreeShape({ parent, rank });
  } catch (e) {
    c.fail(path, (e as Error).message);
  }
  const want = planArtifacts({ parent, rank });
  for (const k of ['n', 'depth', 'treeIndices', 'positionIds', 'retrieveIndices', 'keep', 'expansion', 'nnz'] as const) {
    if (!same(o[k], want[k])) c.fail(`${path}.${k}`, `disagrees with the tree (parent/rank): expected ${summarize(want[k])}`);
  }
  const m = c.obj(o.mask, `${path}.mask`);
  const bytes = fromBase64(c.str(m.base64, `${path}.mask.base64`));
  if (m.words !== want.mask.words || !bytes || !same(Array.from(bytes), Array.from(packedMask(parent)))) {
    c.fail(`${path}.mask`, 'is not the ancestor-or-self mask of the tree');
  }
  const p = c.obj(o.predicted, `${path}.predicted`);
  for (const k of ['acceptedPerStep', v1 ? 'replayAcceptedPerStep' : 'perPositionAcceptedPerStep', 'stepMs', 'tokensPerSecond']) c.num(p[k], `${path}.predicted.${k}`);
  // Version 1 predicted by the per-position formula; its replayed figure is what the runtime achieves.
  if (v1) return { ...(o as unknown as TreePlan), predicted: { acceptedPerStep: p.replayAcceptedPerStep as number, perPositionAcceptedPerStep: p.acceptedPerStep as number, stepMs: p.stepMs as number, tokensPerSecond: p.tokensPerSecond as number } };
  return o as unknown as TreePlan;
}

const readEstimate = (c: Checker, v: unknown, path: string) => {
  const e = c.obj(v, path);
  c.int(e.prompts, `${path}.prompts`, 1);
  c.int(e.steps, `${path}.steps`, 1);
  c.num(e.acceptedPerStep, `${path}.acceptedPerStep`);
  const ci = c.arr(e.ci95, `${path}.ci95`);
  if (ci.length !== 2) c.fail(`${path}.ci95`, 'must be [low, high]');
  ci.forEach((x, i) => c.num(x, `${path}.ci95[${i}]`));
};

export const SPEC_TREE = defineRecord<SpecTree>('spec-tree/2', 'a speculative verification tree (tree-search)', (v, c) => {
  const o = c.obj(v, 'spec-tree');
  const v1 = o.format === 'spec-tree/1';
  const d = c.obj(o.draft, 'draft');
  if (d.kind === 'level') c.str(d.level, 'draft.level');
  else if (d.kind === 'skip') c.ints(d.layers, 'draft.layers');
  else if (d.kind === 'checkpoint') {
    c.str(d.sha256, 'draft.sha256');
    c.int(d.vocabSize, 'draft.vocabSize', 1);
  } else c.fail('draft.kind', `must be level, skip or checkpoint, got ${summarize(d.kind)}`);
  if (o.verify !== 'greedy') c.fail('verify', `must be "greedy", got ${summarize(o.verify)}`);
  const plans = c.arr(o.plans, 'plans').map((p, i) => readPlan(c, p, `plans[${i}]`, v1));
  if (!plans.length) c.fail('plans', 'is empty');
  const buckets = c.arr(o.buckets, 'buckets');
  if (!buckets.length) c.fail('buckets', 'is empty');
  buckets.forEach((b, i) => {
    const x = c.obj(b, `buckets[${i}]`);
    c.int(x.ctx, `buckets[${i}].ctx`);
    if (c.int(x.plan, `buckets[${i}].plan`) >= plans.length) c.fail(`buckets[${i}].plan`, `names plan ${x.plan}; there are ${plans.length}`);
  });
  if (o.fallback !== null && o.fallback !== undefined) {
    const f = c.obj(o.fallback, 'fallback');
    for (const k of ['branchThresh', 'alpha0', 'decay'] as const) c.num(f[k], `fallback.${k}`);
    c.int(f.maxTokens, 'fallback.maxTokens', 1);
  }
  if (!v1 && o.validation !== null) {
    const val = c.obj(o.validation, 'validation');
    readEstimate(c, val.calibration, 'validation.calibration');
    if (val.heldOut !== null) readEstimate(c, val.heldOut, 'validation.heldOut');
  }
  return (v1 ? { ...o, plans, validation: null } : { ...o, plans }) as unknown as SpecTree;
}, ['spec-tree/1']);

/** The plan for a context of `ctx` tokens. */
export function planForContext(rec: SpecTree, ctx: number): TreePlan {
  const b = rec.buckets.find((x) => x.ctx >= ctx) ?? rec.buckets[rec.buckets.length - 1];
  return rec.plans[b.plan];
}

/** A record's draft, described for messages. */
export function describeDraft(d: DraftSpec): string {
  if (d.kind === 'level') return `elastic level ${d.level} (${d.nominal}) of the target`;
  if (d.kind === 'skip') return `the target without layers ${d.layers.join(',')}`;
  return `checkpoint ${d.path}`;
}

/** The spec-tree record of a manifest's passes or a clear error. */
export function requireSpecTree(rec: SpecTree | null, where?: string): SpecTree {
  if (!rec) throw new LlmcError('--speculative needs an artifact compiled with --passes tree-search (no spec-tree record in its manifest)', where);
  return rec;
}
