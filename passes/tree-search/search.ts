/**
 * The hardware-aware search (SPEC §5.3): for every context bucket, depth cap D ≤ Dmax and size n
 * (the right edges of the verification steps, GH's powers of two, or every n), the mode's tree and
 * its step time; the Pareto table over (n, D), and the other trees on the same traces for comparison.
 * With additive per-node costs, `optimal` also solves the ratio exactly per step edge (Dinkelbach).
 *
 * The exact search (§5.1) maximizes E[L] averaged uniformly over positions, but the runtime visits a
 * position only when the previous step ended there, so deep branches count for less than the formula
 * says (SPEC §5.1 bias caveat: predicted 1.72, replayed 1.46 on stories260K). The exact search is the
 * inner step that proposes candidates; the plan is the candidate of most tokens/s when the runtime's
 * own trajectory is replayed over the calibration sequences (ties: larger n, then smaller D). Plain
 * decoding (the root alone) is always a candidate, so the plan is never slower than it on this model.
 */
import { chainTree, depthsOf, treeFromPaths, type TreeShape } from '../../src/core/records/tree.js';
import { bucketOf, hillClimb, partitionTime, splitColumns, stepAt, stepEdges, stepMs, verifyMs, type LatencyModel } from './cost.js';
import { dinkelbach } from './dinkelbach.js';
import { GHIDORAH_WIDTHS, ghidorahGreedy, localSearch } from './ghidorah.js';
import { frontierOrder, gains, treeOfNodes } from './optimal.js';
import { positionalValue, sequoiaDP, type SequoiaTable } from './sequoia.js';
import { marginalTable, mean, positionalVector, replayLengths, trajectoryAcceptedPerStep, type RankTrie } from './trie.js';

export type SearchMode = 'optimal' | 'sequoia' | 'ghidorah' | 'llmcad';
export type WidthPolicy = 'any' | 'stepEdges' | 'pow2';

export interface SearchOptions {
  mode: SearchMode;
  nMax: number;
  dMax: number;
  widths: WidthPolicy;
}

export interface Candidate {
  n: number;
  D: number;
  tree: TreeShape;
  /** The mode's own estimate of E[L] (what it chose by). */
  estimate: number;
  /** Trace-exact E[L] (every position weighted alike). */
  acceptedPerStep: number;
  /** Tokens per target step along the runtime's trajectory over the calibration sequences (what it chooses by). */
  replay: number;
  stepMs: number;
  tokensPerSecond: number;
}

export interface BucketResult {
  ctx: number;
  chosen: Candidate;
  candidates: Candidate[];
}

/** Medusa's `mc_sim_7b_63` (FasterDecoding/Medusa, medusa_choices.py): 63 rank paths + the root. */
export const MEDUSA_63: number[][] = [[0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0], [0, 5], [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0], [0, 9], [8], [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5], [0, 0, 0, 0], [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2], [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0], [0, 0, 0, 1], [1, 6], [0, 7, 0]];

/** Sizes to search in bucket b. */
export function searchSizes(policy: WidthPolicy, mode: SearchMode, m: LatencyModel, nMax: number, b: number): number[] {
  if (mode === 'ghidorah' || policy === 'pow2') return GHIDORAH_WIDTHS.filter((w) => w <= nMax); // 1 (plain) included
  if (policy === 'any') return Array.from({ length: nMax }, (_, i) => i + 1);
  // The root alone (plain decoding) drafts nothing: a candidate even where it is not a step edge.
  return [...new Set([1, ...stepEdges(m, nMax, b)])];
}

const better = <C extends Pick<Candidate, 'n' | 'D'>>(a: C, b: C, score: (c: C) => number) => {
  const sa = score(a);
  const sb = score(b);
  if (Math.abs(sa - sb) > 1e-12 * Math.max(1, Math.abs(sb))) return sa > sb;
  return a.n !== b.n ? a.n > b.n : a.D < b.D;
};

/** The trees a mode proposes, independent of cost (cached across buckets). */
export class TreeSource {
  private readonly cache = new Map<string, { tree: TreeShape; estimate: number }>();
  private readonly orders = new Map<number, number[]>();
  private seq: SequoiaTable | null = null;
  readonly marginal: number[][];
  readonly positional: number[];

  constructor(
    readonly trie: RankTrie,
    readonly nMax: number,
    readonly dMax: number,
    /** First trace of each calibration sequence (the runtime's trajectories); absent: every position starts one (replay = E[L]). */
    readonly starts?: readonly number[],
  ) {
    this.marginal = marginalTable(trie.trace);
    this.positional = positionalVector(trie.trace);
  }

  private order(D: number): number[] {
    let o = this.orders.get(D);
    if (!o) this.orders.set(D, (o = frontierOrder(this.trie, D, this.nMax)));
    return o;
  }

  tree(mode: SearchMode, n: number, D: number): { tree: TreeShape; estimate: number } {
    const key = `${mode}/${n}/${D}`;
    let hit = this.cache.get(key);
    if (hit) return hit;
    if (mode === 'sequoia') {
      this.seq ??= sequoiaDP(this.positional, this.nMax, this.dMax + 1);
      let m = n;
      while (m > 1 && this.seq.best[m][D + 1] === -Infinity) m--;
      const tree = this.seq.tree(m, D + 1);
      hit = { tree, estimate: positionalValue(tree, this.positional) };
    } else if (mode === 'ghidorah') {
      const tree = localSearch(this.trie, ghidorahGreedy(this.marginal, n, D), D);
      hit = { tree, estimate: this.trie.acceptedPerStep(tree) };
    } else {
      const order = this.order(D).slice(0, n);
      hit = { tree: treeOfNodes(this.trie, order), estimate: gains(this.trie, order, n)[n - 1] };
    }
    this.cache.set(key, hit);
    return hit;
  }
}

function evaluate(src: TreeSource, m: LatencyModel, b: number, n: number, D: number, tree: TreeShape, estimate: number): Candidate {
  const ms = stepMs(m, tree, b);
  const al = src.trie.acceptedPerStep(tree);
  const replay = src.starts ? replayAcceptedPerStep(src.trie, tree, src.starts) : al;
  return { n, D, tree, estimate, acceptedPerStep: al, replay, stepMs: ms, tokensPerSecond: (1000 * replay) / ms };
}

/** Every candidate of one mode in bucket b and the chosen one. */
export function searchBucket(src: TreeSource, m: LatencyModel, b: number, o: SearchOptions): BucketResult {
  const mode = o.mode === 'llmcad' ? 'optimal' : o.mode;
  const trie = src.trie;
  const candidates: Candidate[] = [];
  const sizes = searchSizes(o.widths, mode, m, o.nMax, b);
  if (!sizes.includes(1)) sizes.unshift(1);
  for (let D = 1; D <= o.dMax; D++) {
    for (const n of sizes) {
      if (n === 1 && D > 1) continue;
      const { tree, estimate } = src.tree(mode, n, D);
      candidates.push(evaluate(src, m, b, n, D, tree, estimate));
    }
  }
  // Additive per-node costs: the exact ratio optimum under each size cap (Dinkelbach, §5.3).
  if (mode === 'optimal' && (m.perNodeMs > 0 || m.perNnzMs > 0)) {
    for (let D = 1; D <= o.dMax; D++) {
      for (const cap of sizes) {
        if (cap === 1) continue;
        const fixed = verifyMs(m, cap, b) + D * stepAt(m.draftBatch, m.draftMs[b], 1);
        const r = dinkelbach(trie, { D, fixed, cap, nodeCost: (v) => m.perNodeMs + m.perNnzMs * (trie.depth[v] + 1) });
        const tree = treeOfNodes(trie, r.nodes);
        candidates.push(evaluate(src, m, b, cap, D, tree, trie.acceptedPerStep(tree)));
      }
    }
  }
  return { ctx: m.ctx[b], chosen: choose(candidates), candidates };
}

/** The candidate of most tokens/s as replayed (else by its mode's estimate; ties: larger n, then smaller D). */
export function choose<C extends Pick<Candidate, 'n' | 'D' | 'estimate' | 'stepMs'> & { replay?: number }>(cands: readonly C[]): C {
  const score = (c: C) => (c.replay ?? c.estimate) / c.stepMs;
  let chosen = cands[0];
  for (const c of cands) if (better(c, chosen, score)) chosen = c;
  return chosen;
}

/** Rows not dominated in (replayed tokens per step ↑, step time ↓), by step time. */
export function paretoFront(cands: readonly Candidate[]): Candidate[] {
  const sorted = [...cands].sort((a, b) => a.stepMs - b.stepMs || b.replay - a.replay || a.n - b.n || a.D - b.D);
  const out: Candidate[] = [];
  let bestAl = -Infinity;
  for (const c of sorted) {
    if (c.replay > bestAl + 1e-12) {
      out.push(c);
      bestAl = c.replay;
    }
  }
  return out;
}

/** Tokens per step along the runtime's trajectory over the calibration sequences. */
export function replayAcceptedPerStep(trie: RankTrie, tree: TreeShape, starts: readonly number[]): number {
  return trajectoryAcceptedPerStep(replayLengths(tree, trie.trace), starts);
}

/** The chain of n nodes and Medusa's 63-node tree (ranks beyond K never hit), for comparison. */
export function referenceTrees(n: number): Record<string, TreeShape> {
  return { [`chain-${n}`]: chainTree(n), 'medusa-63': treeFromPaths(MEDUSA_63) };
}

export { bucketOf, mean, depthsOf, partitionTime, hillClimb, splitColumns };
