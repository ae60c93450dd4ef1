/**
 * Ratio-optimal trees for costs with additive per-node terms (SPEC §5.3): maximize
 *   Θ(T) = (1 + Σ_{v∈T∖r} w(v)) / (F + Σ_{v∈T∖r} κ(v)),   w(v) = count(v)/N,
 * over parent-closed subtrees of the trie (depth ≤ D, optionally at most `cap` nodes), by
 * Dinkelbach's iteration: λ ← Θ(T_k), T_{k+1} = argmax_T Σ (w(v) − λ κ(v)). The inner problem is
 * exact: best(v) = w(v) − λκ(v) + Σ_children max(0, best(child)) without a cap, a tree knapsack
 * (O(|trie| · cap)) with one.
 */
import type { RankTrie } from './trie.js';

export interface RatioProblem {
  D: number;
  /** Fixed cost of a step (e.g. the verification time of the size step). */
  fixed: number;
  /** Per-node cost of non-root node v (≥ 0). */
  nodeCost: (v: number) => number;
  /** At most this many nodes, the root included. */
  cap?: number;
}

export interface RatioResult {
  /** Trie nodes of the tree, root first. */
  nodes: number[];
  ratio: number;
  iterations: number;
}

export function ratioOf(trie: RankTrie, nodes: readonly number[], p: RatioProblem): number {
  let w = 1;
  let c = p.fixed;
  for (const v of nodes) {
    if (v === 0) continue;
    w += trie.count[v] / trie.N;
    c += p.nodeCost(v);
  }
  return w / c;
}

/** argmax Σ_{v≠r}(w(v) − λκ(v)) over parent-closed subtrees (root always in). */
function inner(trie: RankTrie, p: RatioProblem, lambda: number): number[] {
  const n = trie.size;
  const val = (v: number) => trie.count[v] / trie.N - lambda * p.nodeCost(v);
  const inDepth = (v: number) => trie.depth[v] <= p.D;
  if (p.cap === undefined) {
    const best = new Float64Array(n);
    for (let v = n - 1; v > 0; v--) {
      if (!inDepth(v)) continue;
      best[v] += val(v);
      if (best[v] > 0) best[trie.parent[v]] += best[v];
    }
    const out: number[] = [];
    const stack = [0];
    while (stack.length) {
      const v = stack.pop()!;
      out.push(v);
      for (const c of trie.children(v)) if (inDepth(c) && best[c] > 0) stack.push(c);
    }
    return out.sort((a, b) => a - b);
  }
  // Tree knapsack: f[v][s] = best total over s nodes of v's subtree (v included).
  const cap = p.cap;
  const f: Float64Array[] = new Array(n);
  const size = new Int32Array(n);
  const take: Map<number, Int32Array> = new Map(); // child → k per s of its parent's array at merge time
  const kids: number[][] = Array.from({ length: n }, () => []);
  for (let v = 1; v < n; v++) if (inDepth(v)) kids[trie.parent[v]].push(v);
  for (let v = n - 1; v >= 0; v--) {
    if (!inDepth(v)) continue;
    let cur = new Float64Array(2).fill(-Infinity);
    cur[1] = v === 0 ? 0 : val(v);
    let sz = 1;
    for (const c of kids[v]) {
      const g = f[c];
      const gs = size[c];
      const ns = Math.min(cap, sz + gs);
      const next = new Float64Array(ns + 1).fill(-Infinity);
      const choice = new Int32Array(ns + 1);
      for (let s = 1; s <= sz; s++) {
        if (cur[s] === -Infinity) continue;
        if (cur[s] > next[s]) {
          next[s] = cur[s];
          choice[s] = 0;
        }
        for (let k = 1; k <= gs && s + k <= ns; k++) {
          const x = cur[s] + g[k];
          if (x > next[s + k]) {
            next[s + k] = x;
            choice[s + k] = k;
          }
        }
      }
      take.set(c, choice);
      cur = next;
      sz = ns;
    }
    f[v] = cur;
    size[v] = sz;
  }
  let bs = 1;
  for (let s = 1; s <= size[0]; s++) if (f[0][s] > f[0][bs]) bs = s;
  // Unwind the merges of v in reverse child order.
  const out: number[] = [];
  const unwind = (v: number, s: number) => {
    out.push(v);
    for (let i = kids[v].length - 1; i >= 0; i--) {
      const c = kids[v][i];
      const k = take.get(c)![s];
      if (k > 0) unwind(c, k);
      s -= k;
    }
  };
  unwind(0, bs);
  return out.sort((a, b) => a - b);
}

export function dinkelbach(trie: RankTrie, p: RatioProblem, maxIter = 50): RatioResult {
  let nodes = [0];
  let lambda = ratioOf(trie, nodes, p);
  for (let it = 1; it <= maxIter; it++) {
    const next = inner(trie, p, lambda);
    const r = ratioOf(trie, next, p);
    if (r <= lambda * (1 + 1e-12)) return { nodes, ratio: lambda, iterations: it };
    nodes = next;
    lambda = r;
  }
  return { nodes, ratio: lambda, iterations: maxIter };
}
