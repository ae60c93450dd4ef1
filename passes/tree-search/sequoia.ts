/**
 * `sequoia` (SPEC §5.2): the best tree under the positional acceptance model, where the rank-i child
 * of an accepted node is accepted with probability p[i] whatever the context, so
 * E[L](T) = Σ_{v∈T} Π_{ranks on v's path} p[rank]. Children of a node are the top-b candidates
 * (ranks 0..b−1), as Sequoia's trees. Dynamic program, with ranks 0-based:
 *   T[m][l][b] = best value with m nodes, at most l levels, a root with b children;
 *   T[1][l][0] = 1;
 *   T[m][l][b] = max_{b ≤ y < m} T[y][l][b−1] + p[b−1] · max_{b'} T[m−y][l−1][b'].
 * O(M²·L·B).
 */
import { treeFromPaths, type TreeShape } from '../../src/core/records/tree.js';

export interface SequoiaTable {
  /** best[m][l]: E[L] of the best tree of exactly m nodes and at most l levels (−∞ if none). */
  best: Float64Array[];
  tree(m: number, l: number): TreeShape;
}

export function sequoiaDP(p: readonly number[], M: number, L: number): SequoiaTable {
  const B = p.length;
  const NEG = -Infinity;
  // T[m][l][b], arg[m][l][b] = y; bestB[m][l] = b'
  const idx = (m: number, l: number, b: number) => (m * (L + 1) + l) * (B + 1) + b;
  const T = new Float64Array((M + 1) * (L + 1) * (B + 1)).fill(NEG);
  const arg = new Int32Array(T.length).fill(-1);
  const best = Array.from({ length: M + 1 }, () => new Float64Array(L + 1).fill(NEG));
  const bestB = Array.from({ length: M + 1 }, () => new Int32Array(L + 1).fill(-1));
  for (let l = 1; l <= L; l++) {
    for (let m = 1; m <= M; m++) {
      if (m === 1) T[idx(1, l, 0)] = 1;
      for (let b = 1; b <= Math.min(B, m - 1) && l >= 2; b++) {
        let bv = NEG;
        let by = -1;
        for (let y = b; y < m; y++) {
          const left = T[idx(y, l, b - 1)];
          const sub = best[m - y][l - 1];
          if (left === NEG || sub === NEG) continue;
          const v = left + p[b - 1] * sub;
          if (v > bv) {
            bv = v;
            by = y;
          }
        }
        T[idx(m, l, b)] = bv;
        arg[idx(m, l, b)] = by;
      }
      for (let b = 0; b <= B; b++) {
        if (T[idx(m, l, b)] > best[m][l]) {
          best[m][l] = T[idx(m, l, b)];
          bestB[m][l] = b;
        }
      }
    }
  }
  const paths = (m: number, l: number, b: number, prefix: number[], out: number[][]): void => {
    // The root (prefix) with b children: children 0..b−2 in the left part, child b−1 holds m−y nodes.
    for (; b > 0; ) {
      const y = arg[idx(m, l, b)];
      const child = [...prefix, b - 1];
      out.push(child);
      paths(m - y, l - 1, bestB[m - y][l - 1], child, out);
      m = y;
      b--;
    }
  };
  return {
    best,
    tree(m, l) {
      if (best[m]?.[l] === undefined || best[m][l] === NEG) throw new Error(`sequoia: no tree of ${m} nodes in ${l} levels`);
      const out: number[][] = [];
      paths(m, l, bestB[m][l], [], out);
      return treeFromPaths(out);
    },
  };
}

/** E[L] of a tree under the positional model (ranks beyond p count 0). */
export function positionalValue(t: TreeShape, p: readonly number[]): number {
  const val: number[] = [];
  let s = 0;
  for (let i = 0; i < t.parent.length; i++) {
    val[i] = i === 0 ? 1 : val[t.parent[i]] * (p[t.rank[i]] ?? 0);
    s += val[i];
  }
  return s;
}
