/**
 * The searches of expert-bits against independent references (SPEC §4.6 tests 3–6, 10):
 * brute force on small instances, budgets never exceeded, monotonicity, EdgeMoE's verified
 * binary search with a synthetic additive oracle, relabeling, and the Table 2 anchor.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { bruteForce, minLoss, minWeight, solveBudget, solveLoss, type McItem } from '../passes/expert-bits/mckp.js';
import { edgemoeSearch, type Oracle } from '../passes/expert-bits/edgemoe.js';
import { Rng } from '../src/core/util/rng.js';

/** A random table: N items × F candidates, heavier candidates usually (not always) lose less. */
function table(seed: number, N: number, F: number, opts: { monotone?: boolean } = {}): McItem[] {
  const rng = new Rng(seed);
  return Array.from({ length: N }, () => {
    const base = 1 + rng.int(20);
    const sens = rng.next() * 3;
    return {
      choices: Array.from({ length: F }, (_, j) => {
        const weight = base * (j + 1) + rng.int(5);
        const loss = opts.monotone ? sens / (j + 1) ** 2 : sens / (j + 1) ** 2 + rng.next() * 0.2;
        return { weight, loss };
      }),
    };
  });
}

const EPS = 1e-9;

describe('mckp: exact DP equals brute force (N ≤ 8, |F| = 3)', () => {
  it('budget form and loss form, every instance', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 31 - 1 }), fc.integer({ min: 1, max: 8 }), fc.double({ min: 0, max: 1, noNaN: true }), (seed, N, frac) => {
        const items = table(seed, N, 3);
        const maxW = items.reduce((s, it) => s + Math.max(...it.choices.map((c) => c.weight)), 0);
        const cap = Math.floor(minWeight(items) + frac * (maxW - minWeight(items)));
        const dp = solveBudget(items, cap, { method: 'dp' })!;
        const bf = bruteForce(items, (w) => w <= cap, (a, b) => a.loss < b.loss)!;
        expect(dp.weight).toBeLessThanOrEqual(cap);
        expect(dp.loss).toBeCloseTo(bf.loss, 9);
        // The Lagrangian plan is feasible and no better than the optimum; its bound is below it.
        const lag = solveBudget(items, cap, { method: 'lagrangian' })!;
        expect(lag.weight).toBeLessThanOrEqual(cap);
        expect(lag.loss).toBeGreaterThanOrEqual(bf.loss - EPS);
        expect(lag.lowerBound).toBeLessThanOrEqual(bf.loss + EPS);

        const maxL = items.reduce((s, it) => s + Math.max(...it.choices.map((c) => c.loss)), 0);
        const P = minLoss(items) + frac * (maxL - minLoss(items));
        const dl = solveLoss(items, P, { method: 'dp' })!;
        const bl = bruteForce(items, (_, l) => l <= P, (a, b) => a.weight < b.weight)!;
        expect(dl.loss).toBeLessThanOrEqual(P + EPS);
        expect(dl.weight).toBe(bl.weight);
        const ll = solveLoss(items, P, { method: 'lagrangian' })!;
        expect(ll.loss).toBeLessThanOrEqual(P + EPS);
        expect(ll.weight).toBeGreaterThanOrEqual(bl.weight);
        expect(ll.lowerBound).toBeLessThanOrEqual(bl.weight + EPS);
      }),
      { numRuns: 150, seed: 20261124 },
    );
  });

  it('infeasible budgets and bounds give null', () => {
    const items = table(3, 5, 3);
    expect(solveBudget(items, minWeight(items) - 1)).toBeNull();
    expect(solveLoss(items, minLoss(items) * 0.999)).toBeNull();
    expect(solveBudget(items, minWeight(items))!.weight).toBe(minWeight(items));
  });
});

describe('mckp: budgets and monotonicity (property)', () => {
  it('never exceeds the budget; loosening it never raises the optimum (auto, dp and lagrangian)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 31 - 1 }), fc.integer({ min: 1, max: 40 }), fc.integer({ min: 2, max: 6 }), (seed, N, F) => {
        const items = table(seed, N, F);
        const lo = minWeight(items);
        const hi = items.reduce((s, it) => s + Math.max(...it.choices.map((c) => c.weight)), 0);
        let prev = Infinity;
        for (let k = 0; k <= 4; k++) {
          const cap = Math.floor(lo + ((hi - lo) * k) / 4);
          const s = solveBudget(items, cap)!;
          expect(s.weight).toBeLessThanOrEqual(cap);
          expect(s.loss).toBeLessThanOrEqual(prev + EPS);
          prev = s.loss;
          expect(solveBudget(items, cap, { method: 'lagrangian' })!.weight).toBeLessThanOrEqual(cap);
        }
        let prevW = Infinity;
        const mL = minLoss(items);
        for (const m of [1, 1.5, 2, 4, 8]) {
          const s = solveLoss(items, mL * m + 1e-12)!;
          expect(s.loss).toBeLessThanOrEqual(mL * m + 1e-12 + EPS);
          expect(s.weight).toBeLessThanOrEqual(prevW);
          prevW = s.weight;
        }
      }),
      { numRuns: 60, seed: 20261124 },
    );
  });

  it('relabeling items permutes the plan (ties broken deterministically)', () => {
    const items = table(11, 12, 4);
    const perm = [5, 3, 11, 0, 7, 1, 9, 2, 10, 4, 8, 6];
    const cap = Math.floor((minWeight(items) * 3) / 2);
    const a = solveBudget(items, cap, { method: 'dp' })!;
    const b = solveBudget(perm.map((i) => items[i]), cap, { method: 'dp' })!;
    expect(b.choice).toEqual(perm.map((i) => a.choice[i]));
    expect(b.loss).toBeCloseTo(a.loss, 12);
  });

  it('where the LP bound leaves a gap, a coarse DP checks it: bounds bracket the exact optimum, tighter than the LP alone', () => {
    for (const seed of [1, 2, 3, 4]) {
      const items = table(seed, 30, 4).map((it) => ({ choices: it.choices.map((c) => ({ weight: c.weight * 997, loss: c.loss })) }));
      const cap = Math.floor(minWeight(items) * 1.7);
      const exact = solveBudget(items, cap, { method: 'dp' })!;
      const lag = solveBudget(items, cap, { method: 'lagrangian' })!;
      const auto = solveBudget(items, cap, { maxCells: 3000 })!;
      expect(auto.method).toBe('lagrangian');
      expect(auto.weight).toBeLessThanOrEqual(cap);
      expect(auto.loss).toBeGreaterThanOrEqual(exact.loss - EPS);
      expect(auto.loss).toBeLessThanOrEqual(lag.loss + EPS);
      expect(auto.lowerBound).toBeLessThanOrEqual(exact.loss + EPS);
      expect(auto.lowerBound).toBeGreaterThanOrEqual(lag.lowerBound - EPS);
    }
  });

  it('on a large table the Lagrangian plan is feasible with a certified gap below 1%', () => {
    const items = table(5, 3000, 6);
    const cap = Math.floor(minWeight(items) * 2.2);
    const s = solveBudget(items, cap)!;
    expect(s.method).toBe('lagrangian');
    expect(s.weight).toBeLessThanOrEqual(cap);
    expect(s.lowerBound).toBeLessThanOrEqual(s.loss);
    expect((s.loss - s.lowerBound) / s.loss).toBeLessThan(0.01);
  });
});

/** An additive synthetic oracle: item i at candidate b loses sens[i]·cost[b]; optional noise. */
function additiveOracle(sens: number[], cost: number[], noise = 0, seed = 1): Oracle & { calls: { n: number } } {
  const calls = { n: 0 };
  const f = async (a: readonly number[], split: 'rank' | 'accept') => {
    calls.n++;
    const base = a.reduce((s, b, i) => s + sens[i] * cost[b], 0);
    if (!noise) return base;
    // Deterministic per (assignment, split) noise: a non-monotone oracle.
    const r = new Rng(a.reduce((h, b) => Math.imul(h ^ b, 0x01000193) >>> 0, seed ^ (split === 'rank' ? 7 : 13)));
    return base * (1 + noise * (r.next() - 0.5));
  };
  return Object.assign(f, { calls });
}

describe('edgemoe search', () => {
  const cost = [1, 0.3, 0.05]; // loss of one unit of sensitivity at INT2-, INT4-, INT8-like candidates
  it('finds the largest feasible K, K*(P) non-decreasing, within the call bound and without duplicates', async () => {
    const rng = new Rng(9);
    const N = 24;
    const sens = Array.from({ length: N }, () => rng.next() / N);
    const keys = sens.map((_, i) => `0.${i}`);
    let prevK = -1;
    for (const P of [0.32, 0.36, 0.45, 0.6, 0.8]) {
      const o = additiveOracle(sens, cost);
      const r = await edgemoeSearch(N, 3, P, o, keys);
      expect(r.loss).toBeLessThanOrEqual(P);
      expect(r.oracleCalls).toBeLessThanOrEqual(1 + 3 + N + Math.ceil(Math.log2(N + 1)));
      expect(o.calls.n).toBe(r.oracleCalls); // memoized: the raw oracle ran once per distinct call
      // Reference: items by ascending sensitivity; the largest K whose prefix at b_lo fits P.
      const hi = [0, 1, 2].find((b) => sens.reduce((s, x) => s + x * cost[b], 0) <= P)!;
      const order = sens.map((s, i) => [s, i]).sort((a, b) => a[0] - b[0]).map(([, i]) => i);
      let K = 0;
      if (hi > 0) {
        for (let k = 0; k <= N; k++) {
          const l = order.reduce((s, i, j) => s + sens[i] * cost[j < k ? hi - 1 : hi], 0);
          if (l <= P) K = k;
        }
      } else K = N;
      expect(r.K).toBe(K);
      if (r.bHi === 1) {
        expect(r.K).toBeGreaterThanOrEqual(prevK);
        prevK = r.K;
      }
    }
  });

  it('a noisy, non-monotone oracle still returns a verified plan; no feasible uniform is an error; lowest feasible is uniform', async () => {
    const rng = new Rng(4);
    const N = 16;
    const sens = Array.from({ length: N }, () => rng.next() / N);
    const keys = sens.map((_, i) => `k${String(i).padStart(2, '0')}`);
    for (let s = 1; s <= 5; s++) {
      const o = additiveOracle(sens, cost, 0.4, s);
      const r = await edgemoeSearch(N, 3, 0.2, o, keys);
      expect(await o(r.assignment, 'accept')).toBeLessThanOrEqual(0.2);
    }
    await expect(edgemoeSearch(N, 3, 1e-6, additiveOracle(sens, cost), keys)).rejects.toThrow(/no uniform candidate meets maxLoss/);
    const r = await edgemoeSearch(N, 3, 10, additiveOracle(sens, cost), keys);
    expect(r.assignment).toEqual(new Array(N).fill(0));
  });

  it('relabeling permutes the plan', async () => {
    const rng = new Rng(21);
    const N = 12;
    const sens = Array.from({ length: N }, () => rng.next() / N);
    const perm = [3, 0, 11, 5, 1, 9, 2, 8, 4, 10, 6, 7];
    const keys = sens.map((_, i) => `0.${i}`);
    const a = await edgemoeSearch(N, 3, 0.4, additiveOracle(sens, cost), keys);
    const b = await edgemoeSearch(N, 3, 0.4, additiveOracle(perm.map((i) => sens[i]), cost), perm.map((i) => keys[i]));
    expect(b.assignment).toEqual(perm.map((i) => a.assignment[i]));
  });
});

describe('anchor (SPEC §4.6 test 10)', () => {
  it('ST-b-8: 96 experts of 4.72M params, 0.64 GiB non-expert, 38% INT2 / 62% INT4 → 0.80–0.82 GiB', () => {
    const params = 2 * 768 * 3072;
    const bytes = (bits: number) => (params * bits) / 8;
    // The exact solver at the 3.24-bit budget picks that mix when INT2 loses more than INT4 for every expert.
    const items: McItem[] = Array.from({ length: 96 }, (_, i) => ({ choices: [{ weight: bytes(2), loss: 1 + i / 96 }, { weight: bytes(4), loss: 0.1 }] }));
    const s = solveBudget(items, bytes(2) * 37 + bytes(4) * 59, { method: 'lagrangian' })!;
    const int2 = s.choice.filter((c) => c === 0).length;
    expect(int2).toBe(37);
    const total = (0.64 * 2 ** 30 + s.weight) / 2 ** 30;
    expect(total).toBeGreaterThanOrEqual(0.8);
    expect(total).toBeLessThanOrEqual(0.82);
  });
});
