/**
 * Rank traces and the trie of their rank prefixes (SPEC §4, §5.1).
 *
 * A rank trace holds, for each calibration position t, the ranks r_1..r_D of the target's next D
 * greedy tokens among the draft's candidates (conditioned on the true prefix), -1 = not in the
 * top K. Under greedy verification a static rank-indexed tree accepts exactly the longest prefix of
 * a trace that is one of its paths, so with c(v) = the number of traces starting with rank path v,
 *   E[L](T) = 1 + (1/N) Σ_{v ∈ T, v ≠ root} c(v)            (additive, exact)
 * and since c(child) ≤ c(parent), the n nodes of largest count form the best tree of size n.
 */
import type { TreeShape } from '../../src/core/records/tree.js';

export interface RankTrace {
  /** Positions. */
  N: number;
  /** Ranks per position (depth). */
  D: number;
  /** Candidates considered per draft step; ranks are < K. */
  K: number;
  /** N × D, row-major; -1 = not among the top K. */
  ranks: Int16Array;
}

/** A trace from rows of ranks (tests, examples). */
export function traceOf(rows: readonly (readonly number[])[], K: number): RankTrace {
  const D = rows.length ? rows[0].length : 0;
  const ranks = new Int16Array(rows.length * D);
  rows.forEach((r, i) => r.forEach((x, k) => (ranks[i * D + k] = x < K ? x : -1)));
  return { N: rows.length, D, K, ranks };
}

/** The prefix trie of a trace: node 0 is the root (the empty prefix, count N). */
export class RankTrie {
  readonly parent: Int32Array;
  readonly rank: Int16Array;
  readonly depth: Uint8Array;
  readonly count: Int32Array;
  /** Position of each node's path in lexicographic order among the nodes of its depth. */
  readonly lex: Int32Array;
  readonly size: number;
  private readonly child: Map<number, number>;

  constructor(readonly trace: RankTrace) {
    const { N, D, K, ranks } = trace;
    let cap = 1024;
    let parent = new Int32Array(cap);
    let rank = new Int16Array(cap);
    let depth = new Uint8Array(cap);
    let count = new Int32Array(cap);
    const child = new Map<number, number>();
    parent[0] = -1;
    rank[0] = -1;
    count[0] = N;
    let size = 1;
    for (let t = 0; t < N; t++) {
      let v = 0;
      for (let k = 0; k < D; k++) {
        const r = ranks[t * D + k];
        if (r < 0 || r >= K) break;
        const key = v * K + r;
        let c = child.get(key);
        if (c === undefined) {
          if (size === cap) {
            cap *= 2;
            const grow = <T extends Int32Array | Int16Array | Uint8Array>(a: T, make: (n: number) => T): T => {
              const b = make(cap);
              b.set(a);
              return b;
            };
            parent = grow(parent, (n) => new Int32Array(n));
            rank = grow(rank, (n) => new Int16Array(n));
            depth = grow(depth, (n) => new Uint8Array(n));
            count = grow(count, (n) => new Int32Array(n));
          }
          c = size++;
          parent[c] = v;
          rank[c] = r;
          depth[c] = k + 1;
          child.set(key, c);
        }
        count[c]++;
        v = c;
      }
    }
    this.parent = parent.subarray(0, size);
    this.rank = rank.subarray(0, size);
    this.depth = depth.subarray(0, size);
    this.count = count.subarray(0, size);
    this.size = size;
    this.child = child;
    // Lexicographic order within a depth = order by (parent's lex, rank); nodes are created after their parents.
    const lex = new Int32Array(size);
    const byDepth: number[][] = [];
    for (let i = 0; i < size; i++) (byDepth[this.depth[i]] ??= []).push(i);
    for (const nodes of byDepth) {
      if (!nodes) continue;
      nodes.sort((a, b) => (a === 0 ? -1 : b === 0 ? 1 : lex[parent[a]] - lex[parent[b]] || rank[a] - rank[b]));
      nodes.forEach((v, i) => (lex[v] = i));
    }
    this.lex = lex;
  }

  get N(): number {
    return this.trace.N;
  }

  childOf(v: number, r: number): number {
    if (r < 0 || r >= this.trace.K) return -1;
    return this.child.get(v * this.trace.K + r) ?? -1;
  }

  /** Children of v in rank order. */
  children(v: number): number[] {
    const out: number[] = [];
    for (let r = 0; r < this.trace.K; r++) {
      const c = this.childOf(v, r);
      if (c >= 0) out.push(c);
    }
    return out;
  }

  /** The rank path of node v. */
  path(v: number): number[] {
    const p: number[] = [];
    for (; v > 0; v = this.parent[v]) p.push(this.rank[v]);
    return p.reverse();
  }

  /** The trie node of a rank path, or -1 when no trace starts with it. */
  find(path: readonly number[]): number {
    let v = 0;
    for (const r of path) {
      v = this.childOf(v, r);
      if (v < 0) return -1;
    }
    return v;
  }

  /** E[L] of a tree given as rank paths (nodes no trace reaches count 0). */
  acceptedPerStep(tree: TreeShape): number {
    const paths = pathsOfShape(tree);
    let s = 0;
    for (let i = 1; i < paths.length; i++) {
      const v = this.find(paths[i]);
      if (v > 0) s += this.count[v];
    }
    return 1 + s / this.N;
  }
}

/** Rank paths of a tree's nodes (index order). */
export function pathsOfShape(t: TreeShape): number[][] {
  const out: number[][] = [];
  for (let i = 0; i < t.parent.length; i++) out.push(i === 0 ? [] : [...out[t.parent[i]], t.rank[i]]);
  return out;
}

/**
 * Replay: the tokens one target step commits at each position (accepted depth + 1), walking the
 * tree with the trace's ranks. Independent of the trie (tests compare the two).
 */
export function replayLengths(tree: TreeShape, trace: RankTrace): Int32Array {
  const K = trace.K;
  const kids = new Map<number, number>();
  // ranks ≥ K never match a trace (and would collide in the key)
  for (let i = 1; i < tree.parent.length; i++) if (tree.rank[i] < K) kids.set(tree.parent[i] * K + tree.rank[i], i);
  const out = new Int32Array(trace.N);
  for (let t = 0; t < trace.N; t++) {
    let v = 0;
    let k = 0;
    for (; k < trace.D; k++) {
      const r = trace.ranks[t * trace.D + k];
      const c = r < 0 ? undefined : kids.get(v * K + r);
      if (c === undefined) break;
      v = c;
    }
    out[t] = k + 1;
  }
  return out;
}

export const mean = (a: ArrayLike<number>) => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i];
  return a.length ? s / a.length : 0;
};

/**
 * The runtime's own trajectory over calibration sequences: start at each sequence's first position,
 * commit L tokens, continue at position + L. Tokens per target step = Σ L / steps. `starts[s]` is
 * the first trace index of sequence s (traces of a sequence are consecutive positions).
 */
export function trajectoryAcceptedPerStep(lengths: Int32Array, starts: readonly number[]): number {
  let tokens = 0;
  let steps = 0;
  for (let s = 0; s < starts.length; s++) {
    const end = s + 1 < starts.length ? starts[s + 1] : lengths.length;
    for (let t = starts[s]; t < end; t += lengths[t]) {
      tokens += lengths[t];
      steps++;
    }
  }
  return steps ? tokens / steps : 1;
}

/** a[h][i] = P(r_{h+1} = i) over all positions (Medusa / Ghidorah head accuracies). */
export function marginalTable(trace: RankTrace): number[][] {
  const a = Array.from({ length: trace.D }, () => new Array<number>(trace.K).fill(0));
  for (let t = 0; t < trace.N; t++) {
    for (let h = 0; h < trace.D; h++) {
      const r = trace.ranks[t * trace.D + h];
      if (r >= 0 && r < trace.K) a[h][r]++;
    }
  }
  return a.map((row) => row.map((x) => (trace.N ? x / trace.N : 0)));
}

/**
 * Sequoia's positional vector p[i]: the probability that the rank-i candidate is the accepted one,
 * given its parent was accepted (pooled over depths: counts of r_k = i among positions whose first
 * k-1 ranks all hit).
 */
export function positionalVector(trace: RankTrace): number[] {
  const hit = new Array<number>(trace.K).fill(0);
  let reached = 0;
  for (let t = 0; t < trace.N; t++) {
    for (let k = 0; k < trace.D; k++) {
      reached++;
      const r = trace.ranks[t * trace.D + k];
      if (r < 0 || r >= trace.K) break;
      hit[r]++;
    }
  }
  return hit.map((x) => (reached ? x / reached : 0));
}
