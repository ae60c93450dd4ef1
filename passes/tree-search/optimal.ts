/**
 * `optimal` (SPEC §5.1): the trace-exact best tree of every size. Counts only fall along a path, so
 * frontier expansion by count — a max-heap seeded with the root, each pop adding the node and
 * pushing its children — visits the nodes in the order of a top-n selection that is parent-closed
 * for every n. Ties: shallower first, then the lexicographically smaller rank path.
 * Also the Ghidorah greedy (same expansion on a product-of-marginals value) uses this frontier.
 */
import { treeFromPaths, type TreeShape } from '../../src/core/records/tree.js';
import type { RankTrie } from './trie.js';

/** A binary max-heap of node ids under a "better than" order. */
export class Heap {
  private items: number[] = [];
  constructor(private readonly better: (a: number, b: number) => boolean) {}
  get size(): number {
    return this.items.length;
  }
  push(x: number): void {
    const a = this.items;
    a.push(x);
    for (let i = a.length - 1; i > 0; ) {
      const p = (i - 1) >> 1;
      if (!this.better(a[i], a[p])) break;
      [a[i], a[p]] = [a[p], a[i]];
      i = p;
    }
  }
  pop(): number {
    const a = this.items;
    const top = a[0];
    const last = a.pop()!;
    if (a.length) {
      a[0] = last;
      for (let i = 0; ; ) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && this.better(a[l], a[m])) m = l;
        if (r < a.length && this.better(a[r], a[m])) m = r;
        if (m === i) break;
        [a[i], a[m]] = [a[m], a[i]];
        i = m;
      }
    }
    return top;
  }
}

/**
 * Trie nodes in selection order (root first), up to `nMax` nodes of depth ≤ D, by `value`
 * (default: the count). Nodes of value 0 are never selected: they cannot raise E[L].
 */
export function frontierOrder(trie: RankTrie, D: number, nMax: number, value: (v: number) => number = (v) => trie.count[v]): number[] {
  const better = (a: number, b: number) => {
    const va = value(a);
    const vb = value(b);
    if (va !== vb) return va > vb;
    if (trie.depth[a] !== trie.depth[b]) return trie.depth[a] < trie.depth[b];
    return trie.lex[a] < trie.lex[b];
  };
  const heap = new Heap(better);
  const order: number[] = [];
  heap.push(0);
  while (heap.size && order.length < nMax) {
    const v = heap.pop();
    if (v !== 0 && !(value(v) > 0)) break;
    order.push(v);
    if (trie.depth[v] < D) for (const c of trie.children(v)) heap.push(c);
  }
  return order;
}

/** The tree of the first `n` nodes of a selection order. */
export function treeOfNodes(trie: RankTrie, nodes: readonly number[]): TreeShape {
  return treeFromPaths(nodes.slice(1).map((v) => trie.path(v)));
}

/** G_D(n) for n = 1..nMax: E[L] of the best tree of at most n nodes and depth ≤ D (index n−1). */
export function gains(trie: RankTrie, order: readonly number[], nMax: number): Float64Array {
  const g = new Float64Array(nMax);
  let s = 0;
  for (let n = 1; n <= nMax; n++) {
    if (n - 1 < order.length && n > 1) s += trie.count[order[n - 1]];
    g[n - 1] = 1 + s / trie.N;
  }
  return g;
}

/** The optimal tree of at most n nodes and depth ≤ D, and its E[L]. */
export function optimalTree(trie: RankTrie, n: number, D: number): { tree: TreeShape; acceptedPerStep: number } {
  const order = frontierOrder(trie, D, n);
  return { tree: treeOfNodes(trie, order), acceptedPerStep: gains(trie, order, n)[n - 1] };
}
