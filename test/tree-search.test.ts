/**
 * The tree-search algorithms against independent references (SPEC verification-tree-search §6):
 * brute force over every parent-closed subtree on small tries (1,000 seeded instances each), closed
 * forms, monotonicity / metamorphic properties (fast-check, seeded), artifact invariants, LLMCad's
 * policy rules, and the papers' anchors through the shipped example latency files.
 */
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { chainTree, childrenOf, depthsOf, leafPaths, maskBit, packedMask, pathsOf, planArtifacts, SPEC_TREE, treeFromPaths, fromBase64, type TreeShape } from '../src/core/records/spec-tree.js';
import { RankTrie, replayLengths, traceOf, mean, marginalTable, type RankTrace } from '../passes/tree-search/trie.js';
import { frontierOrder, gains, treeOfNodes } from '../passes/tree-search/optimal.js';
import { positionalValue, sequoiaDP } from '../passes/tree-search/sequoia.js';
import { dinkelbach, ratioOf } from '../passes/tree-search/dinkelbach.js';
import { ghidorahGreedy, localSearch } from '../passes/tree-search/ghidorah.js';
import { hillClimb, partitionTime, splitColumns, splitStep, stepEdges, verifyMs, type LatencyModel } from '../passes/tree-search/cost.js';
import { choose, searchBucket, TreeSource } from '../passes/tree-search/search.js';
import { acceptanceEstimate } from '../passes/tree-search/pass.js';
import { Rng } from '../src/core/util/rng.js';
import { readLatencyFile, parseLatency } from '../passes/tree-search/latency-file.js';
import { buildDynamicTree, eq3, pacerPick, treeConfidence, type Candidates } from '../src/exec/runtime/tree-policy.js';

const SEED = 20240607;
const RUNS = 1000;
const close = (a: number, b: number, tol = 1e-9) => Math.abs(a - b) <= tol * Math.max(1, Math.abs(a), Math.abs(b));

/** Random traces: rows of D ranks in [-1, K) (small K, D: many shared prefixes). */
const traces = (K: number, D: number, maxN = 12) =>
  fc.array(fc.array(fc.integer({ min: -1, max: K - 1 }), { minLength: D, maxLength: D }), { minLength: 1, maxLength: maxN }).map((rows) => traceOf(rows, K));

/** Every parent-closed node set of the trie (root included) of at most maxSize nodes and depth ≤ D. */
function subtrees(trie: RankTrie, maxSize: number, D: number): number[][] {
  const out: number[][] = [];
  const chosen = [0];
  const inS = new Uint8Array(trie.size);
  inS[0] = 1;
  const rec = (i: number) => {
    if (i === trie.size) return void out.push([...chosen]);
    rec(i + 1);
    if (chosen.length < maxSize && trie.depth[i] <= D && inS[trie.parent[i]]) {
      inS[i] = 1;
      chosen.push(i);
      rec(i + 1);
      chosen.pop();
      inS[i] = 0;
    }
  };
  rec(1);
  return out;
}

const valueOf = (trie: RankTrie, nodes: readonly number[]) => 1 + nodes.reduce((a, v) => a + (v ? trie.count[v] : 0), 0) / trie.N;

/** A latency model with one context bucket: verify(n) and draft(b) given as functions of the tabulated size. */
function model(verify: (n: number) => number, draft: (b: number) => number = () => 0, nMax = 16): LatencyModel {
  const n = Array.from({ length: nMax }, (_, i) => i + 1);
  return { source: 'test', device: 'test', ctx: [64], verifyN: n, verifyMs: [n.map(verify)], draftBatch: n, draftMs: [n.map(draft)], perNodeMs: 0, perNnzMs: 0 };
}

describe('brute-force oracles (1,000 seeded instances each)', () => {
  it('optimal (top-n by count, frontier expansion) = the best parent-closed subtree of every size n ≤ 7 (K=3, D=3)', () => {
    fc.assert(
      fc.property(traces(3, 3), (trace) => {
        const trie = new RankTrie(trace);
        const all = subtrees(trie, 7, 3);
        const order = frontierOrder(trie, 3, 7);
        const g = gains(trie, order, 7);
        for (let n = 1; n <= 7; n++) {
          const best = Math.max(...all.filter((s) => s.length <= n).map((s) => valueOf(trie, s)));
          expect(close(g[n - 1], best)).toBe(true);
          const tree = treeOfNodes(trie, order.slice(0, n));
          expect(close(trie.acceptedPerStep(tree), g[n - 1])).toBe(true);
        }
      }),
      { numRuns: RUNS, seed: SEED },
    );
  });

  it('replay of the traces through any tree = the additive formula 1 + Σ c(v)/N (trees include nodes no trace reaches)', () => {
    const randomTree = fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 2 })), { maxLength: 8 }).map((steps) => {
      const paths: number[][] = [[]];
      for (const [p, r] of steps) {
        const parent = paths[p % paths.length];
        if (parent.length < 3) paths.push([...parent, r]);
      }
      return treeFromPaths(paths.slice(1));
    });
    fc.assert(
      fc.property(traces(3, 3), randomTree, (trace, tree) => {
        const trie = new RankTrie(trace);
        expect(close(mean(replayLengths(tree, trace)), trie.acceptedPerStep(tree))).toBe(true);
      }),
      { numRuns: RUNS, seed: SEED + 1 },
    );
  });

  it('sequoia DP = brute force over consecutive-rank trees (monotone and non-monotone p), M ≤ 7, L ≤ 4', () => {
    // All trees whose nodes have children of ranks 0..b−1 (b ≤ B), by node count and depth.
    const shapes = (B: number, maxNodes: number, levels: number): number[][][] => {
      const out: number[][][] = [];
      const grow = (paths: number[][], frontier: number[][]) => {
        out.push(paths);
        if (!frontier.length) return;
        const [node, ...rest] = frontier;
        for (let b = 0; b <= B; b++) {
          if (paths.length + b > maxNodes) break;
          if (b > 0 && node.length + 1 >= levels) break;
          const kids = Array.from({ length: b }, (_, r) => [...node, r]);
          if (b === 0) {
            if (rest.length) grow(paths, rest);
            continue;
          }
          grow([...paths, ...kids], [...rest, ...kids]);
        }
      };
      grow([[]], [[]]);
      return out;
    };
    const cache = new Map<string, number[][][]>();
    fc.assert(
      fc.property(fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 1, maxLength: 3 }), fc.integer({ min: 1, max: 7 }), fc.integer({ min: 1, max: 4 }), (p, M, L) => {
        const key = `${p.length}/${M}/${L}`;
        if (!cache.has(key)) cache.set(key, shapes(p.length, M, L));
        const best = new Map<number, number>();
        for (const s of cache.get(key)!) {
          const t = treeFromPaths(s.slice(1));
          const v = positionalValue(t, p);
          best.set(s.length, Math.max(best.get(s.length) ?? -Infinity, v));
        }
        const dp = sequoiaDP(p, M, L);
        for (let m = 1; m <= M; m++) {
          const want = best.get(m) ?? -Infinity;
          expect(dp.best[m][L] === want || close(dp.best[m][L], want)).toBe(true);
          if (want > -Infinity) {
            const t = dp.tree(m, L);
            expect(t.parent.length).toBe(m);
            expect(Math.max(...depthsOf(t.parent))).toBeLessThan(L);
            expect(close(positionalValue(t, p), want)).toBe(true);
          }
        }
      }),
      { numRuns: RUNS, seed: SEED + 2 },
    );
  });

  it('Dinkelbach = the brute-force ratio optimum (1 + Σw)/(F + Σκ) on K=2, D=3 tries, with and without a size cap', () => {
    fc.assert(
      fc.property(
        traces(2, 3, 10),
        fc.double({ min: 0.05, max: 10, noNaN: true }),
        fc.array(fc.double({ min: 0, max: 2, noNaN: true }), { minLength: 16, maxLength: 16 }),
        fc.option(fc.integer({ min: 1, max: 8 }), { nil: undefined }),
        (trace, fixed, costs, cap) => {
          const trie = new RankTrie(trace);
          const p = { D: 3, fixed, cap, nodeCost: (v: number) => costs[v % costs.length] };
          const r = dinkelbach(trie, p);
          const all = subtrees(trie, cap ?? trie.size, 3);
          const best = Math.max(...all.map((s) => ratioOf(trie, s, p)));
          expect(close(r.ratio, best, 1e-9)).toBe(true);
          expect(r.nodes.length).toBeLessThanOrEqual(cap ?? Infinity);
          expect(close(ratioOf(trie, r.nodes, p), r.ratio)).toBe(true);
          // the result is parent-closed
          const set = new Set(r.nodes);
          for (const v of r.nodes) if (v) expect(set.has(trie.parent[v])).toBe(true);
        },
      ),
      { numRuns: RUNS, seed: SEED + 3 },
    );
  });
});

describe('closed forms', () => {
  // α = 0.8 = 4/5: 625 positions, 625·α^k of them accept k drafts in a row.
  const chainTrace = () => {
    const rows: number[][] = [];
    const exact = [125, 100, 80, 64, 256]; // first miss at depth 1..4, or none
    exact.forEach((count, k) => {
      for (let i = 0; i < count; i++) rows.push([0, 0, 0, 0].map((_, d) => (d < k ? 0 : d === k ? -1 : 0)));
    });
    return traceOf(rows, 1);
  };

  it('chain of γ = 4 drafts with constant α = 0.8: E[L] = (1 − α^{γ+1})/(1 − α) = 3.3616 (traces, positional model, Sequoia DP)', () => {
    const want = (1 - 0.8 ** 5) / (1 - 0.8);
    expect(want).toBeCloseTo(3.3616, 12);
    const trie = new RankTrie(chainTrace());
    expect(trie.acceptedPerStep(chainTree(5))).toBeCloseTo(3.3616, 12);
    expect(mean(replayLengths(chainTree(5), trie.trace))).toBeCloseTo(3.3616, 12);
    expect(gains(trie, frontierOrder(trie, 4, 5), 5)[4]).toBeCloseTo(3.3616, 12);
    expect(positionalValue(chainTree(5), [0.8])).toBeCloseTo(3.3616, 12);
    expect(sequoiaDP([0.8], 5, 5).best[5][5]).toBeCloseTo(3.3616, 12);
  });

  it('depth-1 star of n nodes: E[L] = 1 + Σ_{k<n−1} p_k (positional) = 1 + P(r₁ < n−1) (traces); n = 1 → 1', () => {
    const p = [0.5, 0.2, 0.1, 0.05];
    const star = (n: number): TreeShape => treeFromPaths(Array.from({ length: n - 1 }, (_, k) => [k]));
    for (let n = 1; n <= 5; n++) expect(positionalValue(star(n), p)).toBeCloseTo(1 + p.slice(0, n - 1).reduce((a, b) => a + b, 0), 12);
    const rows = [[0], [0], [1], [2], [3], [-1], [1], [0]];
    const trie = new RankTrie(traceOf(rows, 4));
    for (let n = 1; n <= 5; n++) expect(trie.acceptedPerStep(star(n))).toBeCloseTo(1 + rows.filter((r) => r[0] >= 0 && r[0] < n - 1).length / rows.length, 12);
    expect(trie.acceptedPerStep({ parent: [-1], rank: [-1] })).toBe(1);
    expect(gains(trie, frontierOrder(trie, 3, 1), 1)[0]).toBe(1);
  });

  it('Ghidorah width 2: E[L] = 1 + a[1][0]; the greedy tree of width w has w nodes', () => {
    const rows = [[0, 0], [0, 1], [1, 0], [0, -1], [2, 0], [0, 0]];
    const trace = traceOf(rows, 3);
    const a = marginalTable(trace);
    const t2 = ghidorahGreedy(a, 2, 2);
    expect(pathsOf(t2)).toEqual([[], [0]]);
    expect(new RankTrie(trace).acceptedPerStep(t2)).toBeCloseTo(1 + a[0][0], 12);
    for (const w of [1, 2, 4, 8]) expect(ghidorahGreedy(a, w, 2).parent.length).toBe(w);
  });

  it('linear partition: r* = T_c/(T_g+T_c), time T_g·T_c/(T_g+T_c); the contention-aware climb reaches it', () => {
    fc.assert(
      fc.property(fc.double({ min: 0.1, max: 100, noNaN: true }), fc.double({ min: 0.1, max: 100, noNaN: true }), (Tg, Tc) => {
        const r = partitionTime(Tg, Tc);
        expect(r.share).toBeCloseTo(Tc / (Tg + Tc), 12);
        expect(r.ms).toBeCloseTo((Tg * Tc) / (Tg + Tc), 9);
        const h = hillClimb((x) => Math.max(x * Tg, (1 - x) * Tc), 0.5);
        expect(Math.abs(h.share - r.share)).toBeLessThan(1e-3);
      }),
      { numRuns: 200, seed: SEED + 4 },
    );
  });
});

describe('monotonicity and metamorphic properties', () => {
  it('G(n) is non-decreasing and concave; G(n, D) is non-decreasing in D; zero-count nodes never help', () => {
    fc.assert(
      fc.property(traces(4, 4, 40), (trace) => {
        const trie = new RankTrie(trace);
        let prev: Float64Array | null = null;
        for (let D = 1; D <= 4; D++) {
          const g = gains(trie, frontierOrder(trie, D, 20), 20);
          for (let n = 1; n < 20; n++) expect(g[n]).toBeGreaterThanOrEqual(g[n - 1] - 1e-12);
          for (let n = 1; n < 19; n++) expect(g[n + 1] - g[n]).toBeLessThanOrEqual(g[n] - g[n - 1] + 1e-12);
          if (prev) for (let n = 0; n < 20; n++) expect(g[n]).toBeGreaterThanOrEqual(prev[n] - 1e-12);
          prev = g;
        }
        // add a child no trace reaches under a node of the optimal tree
        const t = treeOfNodes(trie, frontierOrder(trie, 4, 6));
        const paths = pathsOf(t).slice(1);
        const extra = [...(paths[0] ?? []), 9];
        expect(trie.find(extra)).toBe(-1);
        const t2 = treeFromPaths([...paths, extra]);
        expect(trie.acceptedPerStep(t2)).toBeCloseTo(trie.acceptedPerStep(t), 12);
        expect(mean(replayLengths(t2, trace))).toBeCloseTo(mean(replayLengths(t, trace)), 12);
      }),
      { numRuns: 200, seed: SEED + 5 },
    );
  });

  const bucket = (trace: RankTrace, m: LatencyModel, widths: 'any' | 'stepEdges' = 'any', nMax = 16) =>
    searchBucket(new TreeSource(new RankTrie(trace), nMax, 4), m, 0, { mode: 'optimal', nMax, dMax: 4, widths });

  it('scaling every latency by c > 0 leaves the plan unchanged; permuting the traces too', () => {
    fc.assert(
      fc.property(
        traces(4, 4, 40),
        fc.array(fc.double({ min: 0.01, max: 10, noNaN: true }), { minLength: 16, maxLength: 16 }),
        fc.double({ min: 1e-3, max: 1e3, noNaN: true }),
        fc.integer({ min: 0, max: 1000 }),
        (trace, steps, c, salt) => {
          const inc = steps.map((_, i) => steps.slice(0, i + 1).reduce((a, b) => a + b, 0));
          const m = model((n) => inc[n - 1], (b) => inc[b - 1] / 3);
          const scaled = model((n) => c * inc[n - 1], (b) => (c * inc[b - 1]) / 3);
          const a = bucket(trace, m).chosen;
          const b = bucket(trace, scaled).chosen;
          expect([b.n, b.D, b.tree]).toEqual([a.n, a.D, a.tree]);
          const rows = Array.from({ length: trace.N }, (_, i) => Array.from(trace.ranks.subarray(i * trace.D, (i + 1) * trace.D)));
          const order = rows.map((_, i) => i).sort((x, y) => ((x * 7919 + salt) % 101) - ((y * 7919 + salt) % 101) || x - y);
          const permuted = bucket(traceOf(order.map((i) => rows[i]), trace.K), m).chosen;
          expect([permuted.n, permuted.D, permuted.tree]).toEqual([a.n, a.D, a.tree]);
        },
      ),
      { numRuns: 150, seed: SEED + 6 },
    );
  });

  it('the chosen size is a right edge of a latency step (ties toward larger n)', () => {
    fc.assert(
      fc.property(traces(4, 4, 40), fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 16, maxLength: 16 }), (trace, jumps) => {
        // a step function: flat runs with jumps
        const ms = jumps.map((_, i) => 1 + jumps.slice(0, i + 1).reduce((a, b) => a + b, 0));
        const m = model((n) => ms[n - 1]);
        const r = bucket(trace, m, 'any');
        const edges = stepEdges(m, 16, 0);
        // the tree found may be smaller than the budget when the traces run out of nodes
        if (r.chosen.tree.parent.length === r.chosen.n) expect(edges).toContain(r.chosen.n);
        expect(bucket(trace, m, 'stepEdges').chosen.tokensPerSecond).toBeCloseTo(r.chosen.tokensPerSecond, 9);
      }),
      { numRuns: 200, seed: SEED + 7 },
    );
  });

  it('verify cost a + b·n (Topkis): a larger slope b never grows the chosen tree, a larger fixed cost a never shrinks it', () => {
    fc.assert(
      fc.property(
        traces(4, 4, 40),
        fc.double({ min: 0.01, max: 100, noNaN: true }),
        fc.double({ min: 0.01, max: 10, noNaN: true }),
        fc.double({ min: 1, max: 20, noNaN: true }),
        (trace, a, b, k) => {
          const size = (A: number, B: number) => bucket(trace, model((n) => A + B * n)).chosen.tree.parent.length;
          expect(size(a, b * k)).toBeLessThanOrEqual(size(a, b));
          expect(size(a * k, b)).toBeGreaterThanOrEqual(size(a, b));
        },
      ),
      { numRuns: 200, seed: SEED + 8 },
    );
  });

  it('ghidorah (greedy on marginals + local search with real E[L]) never beats optimal and never loses to its own start', () => {
    fc.assert(
      fc.property(traces(3, 3, 30), fc.integer({ min: 1, max: 10 }), (trace, w) => {
        const trie = new RankTrie(trace);
        const start = ghidorahGreedy(marginalTable(trace), w, 3);
        const searched = localSearch(trie, start, 3);
        const opt = gains(trie, frontierOrder(trie, 3, w), w)[w - 1];
        expect(searched.parent.length).toBe(start.parent.length);
        expect(trie.acceptedPerStep(searched)).toBeLessThanOrEqual(opt + 1e-12);
        expect(trie.acceptedPerStep(searched)).toBeGreaterThanOrEqual(trie.acceptedPerStep(start) - 1e-12);
      }),
      { numRuns: 300, seed: SEED + 9 },
    );
  });
});

describe('artifact invariants', () => {
  const anyTree = fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 4 })), { maxLength: 70 }).map((steps) => {
    const paths: number[][] = [[]];
    const seen = new Set(['']);
    for (const [p, r] of steps) {
      const q = [...paths[p % paths.length], r];
      if (!seen.has(q.join(','))) {
        seen.add(q.join(','));
        paths.push(q);
      }
    }
    return treeFromPaths(paths.slice(1));
  });

  it('mask = ancestor-or-self (bit-packed, u64 rows), nnz = Σ(depth+1), positions = depth, retrieve rows = the leaves (−1 padded), keep = paths', () => {
    fc.assert(
      fc.property(anyTree, (t) => {
        const a = planArtifacts(t);
        const n = t.parent.length;
        const depth = depthsOf(t.parent);
        const mask = fromBase64(a.mask.base64)!;
        expect(mask.length).toBe(n * Math.ceil(n / 64) * 8);
        let ones = 0;
        for (let i = 0; i < n; i++) {
          const anc = new Set<number>();
          for (let j = i; ; j = t.parent[j]) {
            anc.add(j);
            if (j === 0) break;
          }
          for (let j = 0; j < n; j++) {
            expect(maskBit(mask, n, i, j)).toBe(anc.has(j));
            if (maskBit(mask, n, i, j)) ones++;
          }
        }
        expect(a.nnz).toBe(ones);
        expect(a.nnz).toBe(depth.reduce((s, d) => s + d + 1, 0));
        expect(a.positionIds).toEqual(depth);
        const kids = childrenOf(t.parent);
        const leaves = t.parent.map((_, i) => i).filter((i) => kids[i].length === 0);
        expect(a.retrieveIndices.length).toBe(leaves.length);
        a.retrieveIndices.forEach((row, r) => {
          expect(row.length).toBe(a.depth + 1);
          const path = row.filter((x) => x >= 0);
          expect(row.slice(path.length).every((x) => x === -1)).toBe(true);
          expect(path[0]).toBe(0);
          expect(path[path.length - 1]).toBe(leaves[r]);
          for (let k = 1; k < path.length; k++) expect(t.parent[path[k]]).toBe(path[k - 1]);
          expect(a.keep[r]).toEqual(path);
        });
        expect(a.expansion.flatMap((l) => l.nodes).sort((x, y) => x - y)).toEqual(t.parent.map((_, i) => i).filter((i) => kids[i].length));
        a.treeIndices.forEach(([h, r], i) => expect(i ? [h, r] : [-1, -1]).toEqual(i ? [depth[i] - 1, t.rank[i]] : [h, r]));
      }),
      { numRuns: 300, seed: SEED + 10 },
    );
  });

  it('the record reader re-derives every artifact: a flipped mask bit or a wrong position is refused in one line', () => {
    const t = treeFromPaths([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]);
    const plan = { ...planArtifacts(t), predicted: { acceptedPerStep: 2, replayAcceptedPerStep: 1.9, stepMs: 1, tokensPerSecond: 1900 } };
    const rec = {
      format: 'spec-tree/1',
      draft: { kind: 'skip', layers: [1] },
      verify: 'greedy',
      plans: [plan],
      buckets: [{ ctx: 64, plan: 0 }],
    };
    expect(SPEC_TREE.read(rec).plans[0].n).toBe(7);
    const bad = packedMask(t.parent);
    bad[8 * 3] ^= 2; // row 3 sees node 1, not its ancestor
    const b64 = Buffer.from(bad).toString('base64');
    expect(() => SPEC_TREE.read({ ...rec, plans: [{ ...plan, mask: { ...plan.mask, base64: b64 } }] }, 'm.json')).toThrow(/plans\[0\]\.mask: is not the ancestor-or-self mask/);
    expect(() => SPEC_TREE.read({ ...rec, plans: [{ ...plan, positionIds: plan.positionIds.map((p) => p + 1) }] })).toThrow(/positionIds: disagrees/);
    expect(() => SPEC_TREE.read({ ...rec, buckets: [{ ctx: 64, plan: 3 }] })).toThrow(/buckets\[0\]\.plan/);
    expect(leafPaths(t.parent)).toEqual(plan.keep);
  });

  it('partition column ranges tile [0, N) exactly and align to the tile', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 20000 }), fc.double({ min: 0, max: 1, noNaN: true }), fc.constantFrom(1, 16, 32, 64, 128), (N, r, tile) => {
        const { first, second } = splitColumns(N, r, tile);
        expect(first[0]).toBe(0);
        expect(first[1]).toBe(second[0]);
        expect(second[1]).toBe(N);
        expect(first[1] % tile === 0 || first[1] === N).toBe(true);
        expect(Math.abs(first[1] - r * N)).toBeLessThanOrEqual(tile);
      }),
      { numRuns: 300, seed: SEED + 11 },
    );
  });

  it('the split is priced after tile alignment: columns one tile wide never split (one unit, no barriers); wide ones reach T1·T2/(T1+T2) plus their barriers', () => {
    const two = (columns: number[], tile: number): LatencyModel => ({
      source: 't', device: 't', ctx: [64], verifyN: [1], verifyMs: [[0]], draftBatch: [1], draftMs: [[0]], perNodeMs: 0, perNnzMs: 0,
      units: [{ name: 'gpu', verifyMs: [[10]], contention: 1 }, { name: 'cpu', verifyMs: [[30]], contention: 1 }], syncMs: 0.01, barriers: columns.length, columns, tile,
    });
    // 172 columns at tile 64: r* = 0.75 → 128 of 172 on the GPU (a = 0.744): max(7.44, 7.67) per linear
    const narrow = splitStep(two([172, 172], 64), 10, 30);
    expect(narrow.split).toBe(true);
    expect(narrow.ms).toBeCloseTo(30 * (44 / 172) + 0.02, 9);
    // one tile per linear: the split rounds to all-on-one-unit, priced as that unit alone
    expect(splitStep(two([64, 64], 64), 10, 30)).toEqual({ share: 1, ms: 10, split: false });
    // exact split of wide layers
    const wide = splitStep(two([4096], 1), 10, 30);
    expect(wide.ms).toBeCloseTo(7.5 + 0.01, 2);
    expect(verifyMs(two([64, 64], 64), 1, 0)).toBe(10);
  });
});

describe("LLMCad's policy", () => {
  it('Eq. 3: α=0.01, all correct → 0.005; N_all=10, N_correct=7 → 0.3; T_c = max C_i; the pacer picks the most under-served branch', () => {
    expect(eq3(0.01, 10, 10)).toBeCloseTo(0.005, 15);
    expect(eq3(0.01, 10, 7)).toBeCloseTo(0.3, 15);
    expect(treeConfidence([{ conf: 0.2 }, { conf: 0.7 }, { conf: 0.5 }])).toBe(0.7);
    // M = 10 tokens: shares 10·C/ΣC = 2, 5, 3; branch 2 has 1 token, deficit 2 — the largest.
    expect(pacerPick([{ conf: 0.2, len: 3 }, { conf: 0.5, len: 5 }, { conf: 0.3, len: 1 }], 10)).toBe(2);
  });

  it('fan-out ≤ 3 at threshold 0.3, the budget holds, and drafting stops once max C_i < α', () => {
    const dist = fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 2, maxLength: 6 }).map((w): Candidates => {
      const s = w.reduce((a, b) => a + b, 0) || 1;
      const probs = w.map((x) => x / s).sort((a, b) => b - a);
      return { tokens: probs.map((_, i) => i), probs };
    });
    fc.assert(
      fc.property(fc.array(dist, { minLength: 1, maxLength: 40 }), fc.double({ min: 0, max: 0.5, noNaN: true }), fc.integer({ min: 1, max: 30 }), (ds, alpha, maxTokens) => {
        let i = 0;
        const policy = { branchThresh: 0.3, alpha0: alpha, decay: 0.5, update: 'eq3' as const, maxTokens };
        const t = buildDynamicTree(7, ds[0], () => ds[++i % ds.length], policy, alpha);
        expect(t.tokens.length).toBeLessThanOrEqual(maxTokens + 1);
        const kids = childrenOf(t.parent);
        for (const k of kids) expect(k.length).toBeLessThanOrEqual(3);
        for (let v = 1; v < t.tokens.length; v++) expect(t.parent[v]).toBeLessThan(v);
        // every expansion but the last happened while some branch was still confident enough
        expect(t.expanded.length).toBeGreaterThanOrEqual(1);
      }),
      { numRuns: 300, seed: SEED + 12 },
    );
  });
});

describe('anchors (sanity, not proof) through the shipped example latency files', () => {
  const DOCS = path.resolve(__dirname, '../docs/latency');
  // Ghidorah Table I, MT-bench row (reconstructed in the SPEC), acceptance length by width.
  const AL: Record<number, number> = { 1: 1, 2: 1.72, 4: 2.28, 8: 2.59, 16: 2.93, 32: 3.19, 64: 3.34 };
  const pick = (m: LatencyModel) => choose(Object.entries(AL).map(([w, al]) => ({ n: Number(w), D: 1, estimate: al, stepMs: verifyMs(m, Number(w), 0) }))).n;

  it('GH-like costs (GPU flat to 64, CPU flat to 16) with Table I: width 16 on CPU+GPU, width 64 on the GPU alone', () => {
    const hetero = readLatencyFile(path.join(DOCS, 'jetson-xavier-nx.json'));
    hetero.barriers = 7 * 32 + 1;
    expect(pick(hetero)).toBe(16);
    expect(pick(readLatencyFile(path.join(DOCS, 'jetson-xavier-nx-gpu.json')))).toBe(64);
  });

  it('LLMCad-like I/O-bound costs choose a large tree; a compute-bound device a small one', () => {
    // a draft accepting each next token with probability 0.85 (top-1) / 0.1 (top-2)
    const rows: number[][] = [];
    for (let i = 0; i < 2000; i++) {
      const row: number[] = [];
      let h = (i * 2654435761) >>> 0;
      for (let d = 0; d < 8; d++) {
        h = (h * 1103515245 + 12345) >>> 0;
        const u = h / 2 ** 32;
        row.push(u < 0.85 ? 0 : u < 0.95 ? 1 : -1);
      }
      rows.push(row);
    }
    const trace = traceOf(rows, 4);
    const phone = readLatencyFile(path.join(DOCS, 'phone-cpu-llmcad.json'));
    const src = new TreeSource(new RankTrie(trace), 64, 8);
    const io = searchBucket(src, phone, 0, { mode: 'optimal', nMax: 64, dMax: 8, widths: 'stepEdges' }).chosen;
    expect(io.tree.parent.length).toBeGreaterThanOrEqual(16);
    const compute = model((n) => 1 + n, (b) => 0.3 + 0.3 * b, 64);
    const small = searchBucket(src, compute, 0, { mode: 'optimal', nMax: 64, dMax: 8, widths: 'any' }).chosen;
    expect(small.tree.parent.length).toBeLessThan(io.tree.parent.length);
  });

  it('a latency file whose time falls as the tree grows is refused, naming the file and the sizes', () => {
    const bad = { format: 'llmc-latency/1', ctx: [64], verify: { n: [1, 2, 4], ms: [[5, 6, 4]] }, draft: { batch: [1], ms: [[1]] } };
    expect(() => parseLatency(bad, 'dev.json')).toThrow(/latency file dev\.json: verify\.ms at ctx 64 falls from 6 ms \(tree size 2\) to 4 ms \(tree size 4\)/);
    expect(() => parseLatency({ ...bad, verify: { n: [2, 4], ms: [[1, 2]] } }, 'dev.json')).toThrow(/verify\.n must be ascending integers starting at 1/);
  });
});

describe('acceptance estimate of a plan over prompts', () => {
  it('Σ tokens / Σ steps along each prompt\'s trajectory; its 95% interval agrees with a seeded bootstrap over prompts', () => {
    const rng = new Rng(SEED);
    const D = 3;
    const per = 40;
    const prompts = 30;
    const rows: number[][] = [];
    const starts: number[] = [];
    for (let s = 0; s < prompts; s++) {
      starts.push(rows.length);
      const good = rng.next() < 0.5 ? 0.8 : 0.4; // prompts differ: the interval must see it
      for (let t = 0; t < per; t++) rows.push(Array.from({ length: D }, () => (rng.next() < good ? 0 : 1 + Math.floor(rng.next() * 3))));
    }
    const trace = traceOf(rows, 4);
    const tree = treeFromPaths([[0], [1], [0, 0], [0, 0, 0]]);
    const e = acceptanceEstimate(tree, trace, starts);
    // per prompt, by hand: walk from the prompt's first position, commit the replayed length
    const L = replayLengths(tree, trace);
    const byPrompt = starts.map((st, i) => {
      const end = i + 1 < starts.length ? starts[i + 1] : rows.length;
      let tokens = 0;
      let steps = 0;
      for (let t = st; t < end; t += L[t]) (tokens += L[t]), steps++;
      return [tokens, steps];
    });
    const ratio = (sample: number[][]) => sample.reduce((a, x) => a + x[0], 0) / sample.reduce((a, x) => a + x[1], 0);
    expect(e.acceptedPerStep).toBeCloseTo(ratio(byPrompt), 5);
    const boot: number[] = [];
    for (let b = 0; b < 4000; b++) boot.push(ratio(byPrompt.map(() => byPrompt[Math.floor(rng.next() * prompts)])));
    boot.sort((a, b) => a - b);
    const [lo, hi] = [boot[100], boot[3899]];
    expect(Math.abs(e.ci95[0] - lo) / (hi - lo)).toBeLessThan(0.15);
    expect(Math.abs(e.ci95[1] - hi) / (hi - lo)).toBeLessThan(0.15);
  });
});
