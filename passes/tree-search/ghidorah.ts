/**
 * `ghidorah` (Ghidorah ARCA §III-C1, SPEC §2.5): greedily add the candidate of highest estimated
 * accuracy — the product of the per-depth rank accuracies a[h][i] along its path (Medusa's
 * product-of-marginals) — until w nodes, then search around that estimate: swap a leaf for a
 * candidate node elsewhere while the real acceptance length (replay on the calibration traces) grows.
 * Widths are GH's powers of two (2..64).
 */
import { treeFromPaths, type TreeShape } from '../../src/core/records/tree.js';
import { Heap } from './optimal.js';
import type { RankTrie } from './trie.js';

export const GHIDORAH_WIDTHS = [1, 2, 4, 8, 16, 32, 64] as const;

interface Cand {
  path: number[];
  value: number;
}

/** Greedy on products of marginals: w nodes (root included), depth ≤ D. */
export function ghidorahGreedy(a: readonly (readonly number[])[], w: number, D: number): TreeShape {
  const K = a[0]?.length ?? 0;
  const cands: Cand[] = [{ path: [], value: 1 }];
  const lexLess = (x: number[], y: number[]) => {
    for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] < y[i];
    return x.length < y.length;
  };
  const heap = new Heap((i, j) => {
    const x = cands[i];
    const y = cands[j];
    if (x.value !== y.value) return x.value > y.value;
    if (x.path.length !== y.path.length) return x.path.length < y.path.length;
    return lexLess(x.path, y.path);
  });
  heap.push(0);
  const chosen: number[][] = [];
  while (heap.size && chosen.length < w) {
    const c = cands[heap.pop()];
    chosen.push(c.path);
    const d = c.path.length;
    if (d >= D || d >= a.length) continue;
    for (let r = 0; r < K; r++) {
      cands.push({ path: [...c.path, r], value: c.value * a[d][r] });
      heap.push(cands.length - 1);
    }
  }
  return treeFromPaths(chosen);
}

/**
 * Local search around a tree with the real acceptance length: repeatedly drop the leaf of least
 * count and add the absent child (of a remaining node, depth ≤ D) of largest count, while that
 * raises E[L]. Counts come from the calibration traces, so E[L] is replayed exactly.
 */
export function localSearch(trie: RankTrie, start: TreeShape, D: number): TreeShape {
  const key = (p: readonly number[]) => p.join(',');
  const paths = new Map<string, number[]>();
  for (let i = 1; i < start.parent.length; i++) {
    const p: number[] = [];
    for (let j = i; j > 0; j = start.parent[j]) p.push(start.rank[j]);
    paths.set(key(p.reverse()), p);
  }
  const count = (p: readonly number[]) => {
    const v = trie.find(p);
    return v > 0 ? trie.count[v] : 0;
  };
  for (let iter = 0; iter < 4 * (paths.size + 1); iter++) {
    const inTree = (p: readonly number[]) => p.length === 0 || paths.has(key(p));
    const leaves = [...paths.values()].filter((p) => ![...paths.values()].some((q) => q.length === p.length + 1 && key(q.slice(0, -1)) === key(p)));
    // Candidates: children (in the trie) of the root or of tree nodes, not in the tree.
    const adds: number[][] = [];
    for (const p of [[], ...paths.values()]) {
      if (p.length >= D) continue;
      const v = trie.find(p);
      if (v < 0) continue;
      for (const c of trie.children(v)) {
        const q = [...p, trie.rank[c]];
        if (!inTree(q)) adds.push(q);
      }
    }
    let bestGain = 0;
    let swap: [number[], number[]] | null = null;
    for (const leaf of leaves) {
      const cl = count(leaf);
      for (const q of adds) {
        if (key(q.slice(0, -1)) === key(leaf)) continue; // its parent would be gone
        const gain = count(q) - cl;
        if (gain > bestGain) {
          bestGain = gain;
          swap = [leaf, q];
        }
      }
    }
    if (!swap) break;
    paths.delete(key(swap[0]));
    paths.set(key(swap[1]), swap[1]);
  }
  return treeFromPaths([...paths.values()]);
}
