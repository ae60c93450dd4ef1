/**
 * Speculative decoding with a verification tree (greedy). Each target step: the draft builds a tree
 * of candidate continuations after the last committed token (a static plan from record
 * `spec-tree/1`, expanded level by level, or LLMCad's dynamic policy), the target runs all of it in
 * one forward with the tree mask (each node sees the context and its ancestors, at position
 * context + depth), the longest path whose tokens are the target's own greedy choices is
 * committed with the target's next token after it, and both KV caches keep only that path.
 *
 * The target computes every verified row with the one-token kernels and the same keys in the same
 * order as plain decoding does, so the output is plain greedy decoding's, token for token.
 * Browser-safe.
 */
import { depthsOf, childrenOf, type TreeShape } from '../../core/records/tree.js';
import { LlmcError, UsageError } from '../../core/errors.js';
import { ELASTIC_LEVELS, findRecord } from '../../core/records/index.js';
import { describeDraft, planForContext, type SpecTree } from '../../core/records/spec-tree.js';
import type { KvCache, LayerWidth, LevelAdapters, Model, TreeAttention } from './model.js';
import { argmax } from '../../core/sampling.js';
import { buildDynamicTree, nextAlpha, topCandidates, topTokens, type DynamicTree, type FallbackPolicyLike } from './tree-policy.js';

/** The draft: a model (the target itself for an elastic level), at some widths, with the level's recovery adapters. */
export interface Drafter {
  model: Model;
  widths?: LayerWidth[];
  adapters?: LevelAdapters;
}

export interface SpeculativeOptions {
  maxTokens: number;
  /** Default: the target's EOS ids. */
  stopTokens?: readonly number[];
  /** Each token as soon as it is committed (streaming). */
  onToken?: (id: number) => void;
  /** A static tree (canonical order; or one per context length), or LLMCad's dynamic policy. */
  tree: TreeShape | ((context: number) => TreeShape) | { policy: FallbackPolicyLike };
  /** Milliseconds (e.g. performance.now): with it the result says how long decoding took after the first token. */
  clock?: () => number;
}

export interface SpeculativeResult {
  tokens: number[];
  /** Tokens committed by each target step (the first, from the prompt, not counted). */
  acceptedPerStep: number[];
  /** Nodes verified per step. */
  treeNodes: number[];
  draftCalls: number;
  draftTokens: number;
  /** With `clock`: milliseconds from the first token (the prompt's prefill done) to the last; the set-up excluded. */
  decodeMs?: number;
}

/** One draft tree: node tokens and parents (parent[i] < i), the draft slots of its expanded nodes. */
interface Drafted {
  tokens: number[];
  parent: number[];
  depth: number[];
  /** Draft KV slot of each node the draft ran (its internal nodes), else -1. */
  slot: number[];
}

/** Ancestors-or-self of node i, root first. */
function lineage(parent: readonly number[], i: number): number[] {
  const out: number[] = [];
  for (let j = i; j >= 0; j = j === 0 ? -1 : parent[j]) out.push(j);
  return out.reverse();
}

export class SpeculativeDecoder {
  private dcache: KvCache;
  /** Committed tokens the draft has run (its cache length). */
  private dlen = 0;
  private draftCalls = 0;
  private draftTokens = 0;
  private alpha = 0;

  private readonly verifier: Verifier;

  /** `target`: a model (verified by running it) or a known greedy continuation (simulation). */
  constructor(
    target: Model | Verifier,
    readonly draft: Drafter,
  ) {
    this.verifier = 'verify' in target && 'first' in target ? target : new TargetVerifier(target as Model);
    if (draft.model.spec.vocabSize !== this.verifier.vocabSize) {
      throw new LlmcError(`the draft's vocabulary (${draft.model.spec.vocabSize} tokens) is not the target's (${this.verifier.vocabSize})`);
    }
    this.dcache = draft.model.newCache();
  }

  private draftForward(ids: number[], opts: { tree?: TreeAttention; lastOnly?: boolean }): Float32Array {
    this.draftCalls++;
    this.draftTokens += ids.length;
    return this.draft.model.forward(ids, this.dcache, { widths: this.draft.widths, adapters: this.draft.adapters, lastOnly: opts.lastOnly, tree: opts.tree, logitRows: opts.tree ? ids.map((_, i) => i) : undefined });
  }

  /** The draft's run over committed tokens it has not seen (ending with the root): the root's logits. */
  private catchUp(committed: number[]): Float32Array {
    const pending = committed.slice(this.dlen);
    const logits = this.draftForward(pending, { lastOnly: true });
    this.dlen = committed.length;
    return logits;
  }

  /** Tree attention for `nodes` (their draft slots assigned now), positions after the committed context. */
  private draftLayout(t: Drafted, nodes: number[]): TreeAttention {
    const shared = this.dlen;
    const base = this.dcache.length;
    nodes.forEach((v, j) => (t.slot[v] = base + j));
    const end = base + nodes.length;
    const keyPositions = new Int32Array(end - shared);
    t.slot.forEach((s, v) => {
      if (s >= 0) keyPositions[s - shared] = shared - 1 + t.depth[v];
    });
    return {
      shared,
      visible: nodes.map((v) => Int32Array.from(lineage(t.parent, v).slice(1).map((a) => t.slot[a]))),
      positions: Int32Array.from(nodes, (v) => shared - 1 + t.depth[v]),
      keyPositions,
    };
  }

  private staticTree(plan: TreeShape, committed: number[]): Drafted {
    const depth = depthsOf(plan.parent);
    const children = childrenOf(plan.parent);
    const t: Drafted = { tokens: new Array(plan.parent.length).fill(-1), parent: [...plan.parent], depth, slot: new Array(plan.parent.length).fill(-1) };
    t.tokens[0] = committed[committed.length - 1];
    // The root alone is plain decoding: nothing to draft (the draft catches up when a tree comes).
    if (plan.parent.length === 1) return t;
    const assign = (v: number, logits: ArrayLike<number>) => {
      const kids = children[v];
      const top = topTokens(logits, Math.max(...kids.map((c) => plan.rank[c])) + 1);
      for (const c of kids) t.tokens[c] = top[plan.rank[c]];
    };
    assign(0, this.catchUp(committed));
    const maxDepth = Math.max(...depth);
    for (let d = 1; d < maxDepth; d++) {
      const nodes = [];
      for (let v = 0; v < plan.parent.length; v++) if (depth[v] === d && children[v].length) nodes.push(v);
      if (!nodes.length) continue;
      const tree = this.draftLayout(t, nodes);
      const logits = this.draftForward(nodes.map((v) => t.tokens[v]), { tree });
      const V = this.draft.model.spec.vocabSize;
      nodes.forEach((v, j) => assign(v, logits.subarray(j * V, (j + 1) * V)));
    }
    return t;
  }

  private dynamicTree(policy: FallbackPolicyLike, committed: number[]): { t: Drafted; tree: DynamicTree } {
    const V = this.draft.model.spec.vocabSize;
    const K = Math.min(V, Math.max(2, Math.floor(1 / policy.branchThresh) + 1));
    const rootCands = topCandidates(this.catchUp(committed), K);
    const t: Drafted = { tokens: [], parent: [], depth: [], slot: [] };
    const mirror = (dyn: DynamicTree) => {
      for (let i = t.tokens.length; i < dyn.tokens.length; i++) {
        t.tokens.push(dyn.tokens[i]);
        t.parent.push(dyn.parent[i]);
        t.depth.push(dyn.depth[i]);
        t.slot.push(-1);
      }
    };
    const tree = buildDynamicTree(committed[committed.length - 1], rootCands, (node, dyn) => {
      // The growing tree so far, then the draft on this one node.
      mirror(dyn);
      return topCandidates(this.draftForward([t.tokens[node]], { tree: this.draftLayout(t, [node]) }), K);
    }, policy, this.alpha);
    mirror(tree);
    return { t, tree };
  }

  /** Verify a drafted tree; the draft keeps the accepted nodes it ran (a prefix of the path below the root). */
  private verify(t: Drafted): { path: number[]; next: number } {
    const r = this.verifier.verify(t.tokens, t.parent, t.depth);
    const ran: number[] = [];
    for (const v of r.path.slice(1)) {
      if (t.slot[v] < 0) break;
      ran.push(t.slot[v]);
    }
    this.dcache.keep(this.dlen, ran);
    this.dlen += ran.length;
    return r;
  }

  /** Greedy generation after `prompt`: plain greedy decoding's tokens, fewer target steps. */
  generate(prompt: number[], opts: SpeculativeOptions): SpeculativeResult {
    if (!prompt.length) throw new LlmcError('speculative decoding needs a prompt');
    const stop = new Set(opts.stopTokens ?? this.verifier.eosTokenIds);
    const res: SpeculativeResult = { tokens: [], acceptedPerStep: [], treeNodes: [], draftCalls: 0, draftTokens: 0 };
    const dynamic = typeof opts.tree === 'object' && 'policy' in opts.tree ? opts.tree.policy : null;
    const staticPlan = typeof opts.tree === 'function' ? opts.tree : () => opts.tree as TreeShape;
    this.alpha = dynamic?.alpha0 ?? 0;
    this.dcache = this.draft.model.newCache();
    this.dlen = this.draftCalls = this.draftTokens = 0;
    const committed = [...prompt];
    const emit = (id: number): boolean => {
      res.tokens.push(id);
      committed.push(id);
      opts.onToken?.(id);
      return stop.has(id) || res.tokens.length >= opts.maxTokens;
    };
    let done = emit(this.verifier.first(prompt));
    const t0 = opts.clock?.();
    while (!done) {
      let drafted: Drafted;
      let dyn: DynamicTree | null = null;
      if (dynamic) {
        const r = this.dynamicTree(dynamic, committed);
        drafted = r.t;
        dyn = r.tree;
      } else drafted = this.staticTree(staticPlan(committed.length), committed);
      const { path, next: bonus } = this.verify(drafted);
      if (dyn && dynamic) this.alpha = nextAlpha(dyn, path[path.length - 1], this.alpha, dynamic);
      res.treeNodes.push(drafted.tokens.length);
      let step = 0;
      for (const v of [...path.slice(1).map((v) => drafted.tokens[v]), bonus]) {
        step++;
        if ((done = emit(v))) break;
      }
      res.acceptedPerStep.push(step);
    }
    res.draftCalls = this.draftCalls;
    res.draftTokens = this.draftTokens;
    if (opts.clock && t0 !== undefined) res.decodeMs = opts.clock() - t0;
    return res;
  }
}

/** What checks a drafted tree: the target model, or a known continuation (simulation). */
export interface Verifier {
  readonly vocabSize: number;
  readonly eosTokenIds: number[];
  /** The greedy token after the prompt (the prompt is committed context from then on). */
  first(prompt: number[]): number;
  /**
   * A tree (root = the last committed token; parent[i] < i): the accepted node path (root first)
   * and the target's next token after it.
   */
  verify(tokens: number[], parent: number[], depth: number[]): { path: number[]; next: number };
}

/** Verification by the target: one forward over the tree, then its cache keeps the accepted path. */
export class TargetVerifier implements Verifier {
  private cache;
  constructor(readonly target: Model) {
    this.cache = target.newCache();
  }
  get vocabSize(): number {
    return this.target.spec.vocabSize;
  }
  get eosTokenIds(): number[] {
    return this.target.spec.eosTokenIds;
  }

  /** The prompt as plain decoding runs it (the same call, a fresh cache), and its greedy token. */
  first(prompt: number[]): number {
    this.cache = this.target.newCache();
    return argmax(this.target.forward(prompt, this.cache, { lastOnly: true }));
  }

  verify(tokens: number[], parent: number[], depth: number[]): { path: number[]; next: number } {
    // The root alone: a plain one-token step (the same keys, order and kernels as a tree of one).
    if (tokens.length === 1) return { path: [0], next: argmax(this.target.forward(tokens, this.cache, { lastOnly: true })) };
    const base = this.cache.length;
    const tree: TreeAttention = {
      shared: base,
      visible: tokens.map((_, i) => Int32Array.from(lineage(parent, i), (a) => base + a)),
      positions: Int32Array.from(depth, (d) => base + d),
      keyPositions: Int32Array.from(depth, (d) => base + d),
    };
    const logits = this.target.forward(tokens, this.cache, { tree, rowwise: true, logitRows: tokens.map((_, i) => i) });
    const V = this.vocabSize;
    const r = walk(tokens, parent, (v) => argmax(logits.subarray(v * V, (v + 1) * V)));
    this.cache.keep(base, r.path.map((v) => base + v));
    return r;
  }
}

/** Simulated verification against the target's known greedy continuation of the prompt. */
export class OracleVerifier implements Verifier {
  private at = 0;
  constructor(
    /** Prompt followed by the target's greedy tokens. */
    readonly sequence: readonly number[],
    readonly vocabSize: number,
    readonly eosTokenIds: number[] = [],
  ) {}
  first(prompt: number[]): number {
    this.at = prompt.length;
    return this.token(this.at);
  }
  /** Past the known continuation nothing matches (-1): generation must stop before it. */
  private token(i: number): number {
    return i < this.sequence.length ? this.sequence[i] : -1;
  }
  verify(tokens: number[], parent: number[]): { path: number[]; next: number } {
    // tokens[0] is sequence[at]; node at depth d must be sequence[at + d]
    const r = walk(tokens, parent, (v) => this.token(this.at + depthOf(parent, v) + 1));
    this.at += r.path.length;
    return r;
  }
}

const depthOf = (parent: readonly number[], v: number) => {
  let d = 0;
  for (; v > 0; v = parent[v]) d++;
  return d;
};

/** From the root, follow the child whose token is the greedy choice after the current node. */
function walk(tokens: readonly number[], parent: readonly number[], greedyAfter: (v: number) => number): { path: number[]; next: number } {
  const children = childrenOf(parent);
  const path = [0];
  for (;;) {
    const cur = path[path.length - 1];
    const next = greedyAfter(cur);
    const hit = children[cur].find((c) => tokens[c] === next);
    if (hit === undefined) return { path, next };
    path.push(hit);
  }
}

/** The draft a spec-tree record names: the target at a level's widths, without some layers, or another model. */
export function drafterFor(target: Model, rec: SpecTree, draft?: Model): Drafter {
  const d = rec.draft;
  if (d.kind === 'level') {
    const level = findRecord(target.manifest?.passes, ELASTIC_LEVELS)?.levels.find((l) => l.id === d.level);
    if (!level) throw new LlmcError(`the spec-tree record drafts with elastic level ${d.level}, which the manifest's elastic-prefix record does not have`);
    // The level as shipped: its widths and its recovery adapters (what the tree was searched with).
    const { widths, adapters } = target.level(level.id);
    return { model: target, widths, ...(adapters ? { adapters } : {}) };
  }
  if (d.kind === 'skip') return { model: target.withoutLayers(d.layers) };
  if (!draft) throw new UsageError(`this artifact drafts with ${describeDraft(d)}: give that checkpoint's ts artifact with --draft DIR`);
  const sha = draft.manifest?.source?.sha256;
  if (sha !== d.sha256) {
    throw new UsageError(`--draft: that artifact was compiled from checkpoint ${sha?.slice(0, 12) ?? '(unknown)'}, the tree was searched for draft ${d.sha256.slice(0, 12)} (${d.path})`);
  }
  if (draft.spec.vocabSize !== target.spec.vocabSize) throw new UsageError(`--draft: its vocabulary (${draft.spec.vocabSize}) is not the model's (${target.spec.vocabSize})`);
  return { model: draft };
}

/** What the decoder drafts with: the record's dynamic policy (llmcad) or its static plan per context. */
export function treeFor(rec: SpecTree): SpeculativeOptions['tree'] {
  if (rec.mode === 'llmcad' && rec.fallback) return { policy: rec.fallback };
  return (context: number) => planForContext(rec, context);
}
