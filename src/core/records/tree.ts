/**
 * Verification trees of speculative decoding and the runtime artifacts derived from them (SPEC
 * verification-tree-search §7), shared by the `tree-search` pass, the TS runtime and targets.
 *
 * A tree is stored in canonical BFS order: by depth, then parent index, then rank, so node 0 is the
 * root (the last committed token), parent[i] < i and the attention mask is lower-triangular.
 * `rank[i]` is node i's 0-based position among its parent's draft candidates (most likely first);
 * the root's rank is -1. Browser-safe, no dependencies.
 */

export interface TreeShape {
  /** parent[0] = -1; parent[i] < i. */
  parent: number[];
  /** rank[0] = -1. */
  rank: number[];
}

/** Depth of every node (root 0). */
export function depthsOf(parent: readonly number[]): number[] {
  const d = new Array<number>(parent.length);
  for (let i = 0; i < parent.length; i++) d[i] = i === 0 ? 0 : d[parent[i]] + 1;
  return d;
}

/** Children of every node, in index order. */
export function childrenOf(parent: readonly number[]): number[][] {
  const ch = parent.map(() => [] as number[]);
  for (let i = 1; i < parent.length; i++) ch[parent[i]].push(i);
  return ch;
}

/** The rank path (ranks from the root's child down) of every node. */
export function pathsOf(t: TreeShape): number[][] {
  const out: number[][] = [];
  for (let i = 0; i < t.parent.length; i++) out.push(i === 0 ? [] : [...out[t.parent[i]], t.rank[i]]);
  return out;
}

/**
 * The canonical tree of a set of rank paths (each a list of ranks from the root down; the root is
 * implied). The set must be parent-closed: every path's prefix is in it too.
 */
export function treeFromPaths(paths: readonly (readonly number[])[]): TreeShape {
  const key = (p: readonly number[]) => p.join(',');
  const byKey = new Map<string, readonly number[]>();
  for (const p of paths) if (p.length) byKey.set(key(p), p);
  for (const p of byKey.values()) {
    if (p.length > 1 && !byKey.has(key(p.slice(0, -1)))) throw new Error(`tree: path [${p}] has no parent [${p.slice(0, -1)}]`);
    if (p.some((r) => !Number.isInteger(r) || r < 0)) throw new Error(`tree: bad rank in path [${p}]`);
  }
  const parent = [-1];
  const rank = [-1];
  let level: { path: readonly number[]; index: number }[] = [{ path: [], index: 0 }];
  const all = [...byKey.values()];
  for (let d = 1; level.length; d++) {
    const next: typeof level = [];
    for (const node of level) {
      const kids = all.filter((p) => p.length === d && key(p.slice(0, -1)) === key(node.path)).sort((a, b) => a[d - 1] - b[d - 1]);
      for (const k of kids) {
        next.push({ path: k, index: parent.length });
        parent.push(node.index);
        rank.push(k[d - 1]);
      }
    }
    level = next;
  }
  return { parent, rank };
}

/** A chain of `n` nodes (root + n-1 top-1 drafts). */
export const chainTree = (n: number): TreeShape => ({ parent: Array.from({ length: n }, (_, i) => i - 1), rank: Array.from({ length: n }, (_, i) => (i ? 0 : -1)) });

/** Throws unless `t` is a valid canonical tree (the runtime relies on it). */
export function checkTreeShape(t: TreeShape): void {
  const n = t.parent.length;
  if (n < 1 || t.rank.length !== n) throw new Error(`tree: parent and rank must be non-empty and of equal length`);
  if (t.parent[0] !== -1 || t.rank[0] !== -1) throw new Error('tree: node 0 must be the root (parent -1, rank -1)');
  const depth = depthsOf(t.parent);
  for (let i = 1; i < n; i++) {
    const p = t.parent[i];
    if (!Number.isInteger(p) || p < 0 || p >= i) throw new Error(`tree: parent[${i}] = ${p} is not an earlier node`);
    if (!Number.isInteger(t.rank[i]) || t.rank[i] < 0) throw new Error(`tree: rank[${i}] = ${t.rank[i]} is not a rank`);
    const q = i - 1;
    // canonical BFS: (depth, parent, rank) strictly increasing
    if (q > 0 && (depth[q] > depth[i] || (depth[q] === depth[i] && (t.parent[q] > p || (t.parent[q] === p && t.rank[q] >= t.rank[i]))))) {
      throw new Error(`tree: nodes ${q} and ${i} are not in canonical order (depth, parent, rank)`);
    }
  }
}

// ---- artifacts ------------------------------------------------------------------------------------

/** Words of 64 bits per mask row. */
export const maskWords = (n: number) => Math.ceil(n / 64);

/**
 * The n×n tree attention mask, bit-packed: row i is `maskWords(n)` little-endian u64 words, bit j
 * (word j>>6, bit j&63) set iff node j is an ancestor-or-self of node i. The full verification mask
 * is [ones(n × ctx) | this].
 */
export function packedMask(parent: readonly number[]): Uint8Array {
  const n = parent.length;
  const rowBytes = maskWords(n) * 8;
  const out = new Uint8Array(n * rowBytes);
  for (let i = 0; i < n; i++) {
    for (let j = i; j >= 0; j = j === 0 ? -1 : parent[j]) out[i * rowBytes + (j >> 3)] |= 1 << (j & 7);
  }
  return out;
}

/** Bit j of row i of a packed mask. */
export function maskBit(mask: Uint8Array, n: number, i: number, j: number): boolean {
  return ((mask[i * maskWords(n) * 8 + (j >> 3)] >> (j & 7)) & 1) === 1;
}

/** Root-to-leaf paths (node indices) for every leaf, in leaf index order. */
export function leafPaths(parent: readonly number[]): number[][] {
  const children = childrenOf(parent);
  const out: number[][] = [];
  for (let i = 0; i < parent.length; i++) {
    if (children[i].length) continue;
    const path: number[] = [];
    for (let j = i; j >= 0; j = j === 0 ? -1 : parent[j]) path.push(j);
    out.push(path.reverse());
  }
  return out;
}

/** Per depth level: the nodes the draft expands and their child counts (Sequoia's grow map). */
export interface ExpansionLevel {
  depth: number;
  nodes: number[];
  children: number[];
}

export function expansionPlan(parent: readonly number[]): ExpansionLevel[] {
  const depth = depthsOf(parent);
  const children = childrenOf(parent);
  const levels: ExpansionLevel[] = [];
  for (let i = 0; i < parent.length; i++) {
    if (!children[i].length) continue;
    let lv = levels.find((l) => l.depth === depth[i]);
    if (!lv) levels.push((lv = { depth: depth[i], nodes: [], children: [] }));
    lv.nodes.push(i);
    lv.children.push(children[i].length);
  }
  return levels;
}

/** Non-zeros of the tree mask: Σ (depth + 1). */
export const maskNnz = (parent: readonly number[]) => depthsOf(parent).reduce((a, d) => a + d + 1, 0);

// ---- base64 (browser-safe, no Buffer) -------------------------------------------------------------

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

export function toBase64(bytes: Uint8Array): string {
  let s = '';
  for (let i = 0; i < bytes.length; i += 3) {
    const a = bytes[i];
    const b = i + 1 < bytes.length ? bytes[i + 1] : 0;
    const c = i + 2 < bytes.length ? bytes[i + 2] : 0;
    s += B64[a >> 2] + B64[((a & 3) << 4) | (b >> 4)];
    s += i + 1 < bytes.length ? B64[((b & 15) << 2) | (c >> 6)] : '=';
    s += i + 2 < bytes.length ? B64[c & 63] : '=';
  }
  return s;
}

export function fromBase64(s: string): Uint8Array | null {
  if (s.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(s)) return null;
  const pad = s.endsWith('==') ? 2 : s.endsWith('=') ? 1 : 0;
  const out = new Uint8Array((s.length / 4) * 3 - pad);
  let o = 0;
  for (let i = 0; i < s.length; i += 4) {
    const v = [0, 1, 2, 3].map((k) => (s[i + k] === '=' ? 0 : B64.indexOf(s[i + k])));
    const n = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    if (o < out.length) out[o++] = (n >> 16) & 255;
    if (o < out.length) out[o++] = (n >> 8) & 255;
    if (o < out.length) out[o++] = n & 255;
  }
  return out;
}
