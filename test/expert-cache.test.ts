/**
 * The routing predictor and the eviction policies of expert offloading (SPEC §4.6 tests 7–8):
 * counts conserved, convergence on a known 2nd-order chain, backoff for unseen contexts, the record
 * round trip, EdgeMoE's victims on a hand-worked trace, pinned experts never evicted, and on
 * cyclic layer scans EdgeMoE ≥ LRU and every policy ≤ Belady.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { beladyPrefetchBound, buildPredictor, CacheCore, edgemoePolicy, lruPolicy, Predictor, simulate, type PolicyName } from '../src/exec/runtime/experts.js';
import { EXPERT_TABLE } from '../src/core/records/expert-table.js';
import { Rng } from '../src/core/util/rng.js';

/** Traces of `seqs` sequences × `T` tokens × S layers, one expert per layer from `next(prev2, prev1, n)`. */
function chainTraces(seqs: number[], T: number, S: number, next: (rng: Rng, p2: number | null, p1: number | null, n: number) => number, seed = 1) {
  const rng = new Rng(seed);
  return seqs.map(() => {
    let p2: number | null = null;
    let p1: number | null = null;
    return Array.from({ length: T }, () =>
      Array.from({ length: S }, (_, n) => {
        const e = next(rng, p2, p1, n);
        [p2, p1] = [p1, e];
        return [e];
      }),
    );
  });
}

describe('routing predictor', () => {
  const E = 6;
  const S = 3;
  /** The truth: layer n's expert is (p2 + 2·p1 + n) mod E with probability 0.8, else uniform. */
  const truth = (p2: number, p1: number, n: number) => (p2 + 2 * p1 + n) % E;
  const chain = (rng: Rng, p2: number | null, p1: number | null, n: number) => (p2 !== null && p1 !== null && rng.next() < 0.8 ? truth(p2, p1, n) : rng.int(E));

  it('conserves counts; every row is a distribution', () => {
    const traces = chainTraces([0, 1, 2], 50, S, chain);
    const p = buildPredictor(traces, { numExperts: E, topK: 1, moeLayers: [0, 1, 2], topM: E });
    for (const L of p.layers) {
      // Every (token, layer) after the first of a sequence has an order-1 context, after the second an order-2 one.
      const positions = traces.length * (50 - (L.n === 0 ? 1 : 0));
      expect(L.marginal.reduce((a, b) => a + b, 0)).toBe(traces.length * 50);
      expect(L.order1.reduce((s, r) => s + r.total, 0)).toBe(positions);
      expect(L.order2.reduce((s, r) => s + r.total, 0)).toBe(traces.length * (50 - (L.n <= 1 ? 1 : 0)));
      for (const r of [...L.order1, ...L.order2]) expect(r.top.reduce((s, [, c]) => s + c, 0) / r.total).toBeCloseTo(1, 12);
    }
  });

  it('learns the top-1 of a known 2nd-order chain', () => {
    const traces = chainTraces([0, 1, 2, 3, 4, 5, 6, 7], 400, S, chain, 3);
    const pred = new Predictor(buildPredictor(traces, { numExperts: E, topK: 1, moeLayers: [0, 1, 2], tau: 8 }));
    let right = 0;
    let total = 0;
    for (let n = 0; n < S; n++) {
      for (let a = 0; a < E; a++) {
        for (let b = 0; b < E; b++) {
          const r = pred.predict(n, [a], [b]);
          expect(r.order).toBe(2);
          total++;
          if (r.experts[0] === truth(a, b, n)) right++;
        }
      }
    }
    expect(right).toBe(total);
  });

  it('an unseen context backs off to order 1, then to the marginal; never an arbitrary expert', () => {
    // Layer 1 always follows layer 0's expert + 1; layer 0 is expert 0 or 1 only.
    const traces = chainTraces([0, 1], 100, 2, (rng, _p2, p1, n) => (n === 0 ? rng.int(2) : (p1! + 1) % 4));
    const table = buildPredictor(traces, { numExperts: 4, topK: 1, moeLayers: [0, 1], tau: 8 });
    const pred = new Predictor(table);
    // (3, 0) never happened before layer 1: order 1 on "0" says expert 1.
    expect(pred.predict(1, [3], [0])).toEqual({ experts: [1], order: 1 });
    // Context "3" never preceded layer 1: the marginal of layer 1 (experts 1 and 2 only).
    const m = pred.predict(1, [2], [3]);
    expect(m.order).toBe(0);
    expect(new Set(m.experts)).toEqual(new Set([1, 2]));
    // No context at all (a sequence's first token): the marginal.
    expect(pred.predict(0, null, null).order).toBe(0);
  });

  it('survives the record round trip (expert-table/1)', () => {
    const traces = chainTraces([0, 1, 2], 60, S, chain);
    const table = buildPredictor(traces, { numExperts: E, topK: 1, moeLayers: [0, 2, 4] });
    const record = {
      format: 'expert-table/1',
      granularity: 'expert',
      items: [{ key: '0.0', choices: [{ bytes: 10, loss: 0.5 }], chosen: 0 }],
      predictor: table,
      cache: { moeLayers: [0, 2, 4], f: table.layers.map((l) => l.marginal), preload: 2 },
    };
    const back = EXPERT_TABLE.read(JSON.parse(JSON.stringify(record)));
    const a = new Predictor(table);
    const b = new Predictor(back.predictor);
    for (let n = 0; n < S; n++) for (let x = 0; x < E; x++) for (let y = 0; y < E; y++) expect(b.predict(n, [x], [y])).toEqual(a.predict(n, [x], [y]));
    expect(() => EXPERT_TABLE.read({ ...record, predictor: { ...table, layers: [{ ...table.layers[0], marginal: [1] }] } }, 'm.json')).toThrow(/predictor\.layers\[0\]\.marginal: needs 6 counts/);
  });
});

describe('eviction', () => {
  it("EdgeMoE's victims on a hand-worked trace (update_our_idx)", () => {
    // S = 3 MoE layers, E = 2; f[layer][expert]. Capacity 3. Retention R = f · ((I − i) mod S), evict the least;
    // experts of the layer being inserted (I = i) have R ≈ 0 and go first.
    const f = [
      [5, 1],
      [2, 8],
      [4, 4],
    ];
    const core = new CacheCore(3, 2, edgemoePolicy(f, 2));
    const id = (n: number, e: number) => n * 2 + e;
    core.admit(id(0, 0));
    core.admit(id(0, 1));
    core.admit(id(1, 1));
    // Insert (2, 0), I = 2: R(0,0) = 5·2 = 10, R(0,1) = 1·2 = 2, R(1,1) = 8·1 = 8 → evict (0,1).
    expect(core.admit(id(2, 0))!.evicted).toBe(id(0, 1));
    // Insert (0, 1), I = 0: R(0,0) = 5·0 ≈ 0 → evict (0,0) (same layer first).
    expect(core.admit(id(0, 1))!.evicted).toBe(id(0, 0));
    // Insert (1, 0), I = 1: R(2,0) = 4·((1−2) mod 3 = 2) = 8, R(0,1) = 1·1 = 1, R(1,1) = 8·0 ≈ 0 → evict (1,1).
    expect(core.admit(id(1, 0))!.evicted).toBe(id(1, 1));
    // Insert (2, 1), I = 2: R(2,0) ≈ 0 (same layer), R(0,1) = 1·2 = 2, R(1,0) = 2·1 = 2 → (2,0).
    expect(core.admit(id(2, 1))!.evicted).toBe(id(2, 0));
  });

  it('never evicts a pinned expert (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.integer({ min: 0, max: 23 }), fc.boolean()), { minLength: 1, maxLength: 200 }), fc.constantFrom<PolicyName>('edgemoe', 'lru', 'lfu'), (ops, policy) => {
        const f = Array.from({ length: 4 }, (_, n) => Array.from({ length: 6 }, (_, e) => 1 + ((n * 7 + e * 3) % 5)));
        const core = new CacheCore(4, 6, policy === 'edgemoe' ? edgemoePolicy(f, 6) : lruPolicy);
        const pinned = new Set<number>();
        for (const [id, pin] of ops) {
          core.tick();
          let slot = core.slotOf(id);
          if (slot === undefined) {
            const a = core.admit(id);
            if (!a) {
              expect(pinned.size).toBe(4);
              continue;
            }
            expect(pinned.has(a.slot)).toBe(false);
            slot = a.slot;
          }
          core.touch(slot);
          if (pin && !pinned.has(slot) && pinned.size < 3) {
            core.pin(slot);
            pinned.add(slot);
          } else if (!pin && pinned.has(slot)) {
            core.unpin(slot);
            pinned.delete(slot);
          }
        }
      }),
      { numRuns: 200, seed: 20261124 },
    );
  });

  it('cyclic layer scans: hit(EdgeMoE) ≥ hit(LRU), every policy ≤ Belady', () => {
    const S = 6;
    const E = 8;
    for (const seed of [1, 2, 3]) {
      // Skewed experts per layer (a few hot ones), layers visited 0..S-1 every token.
      const rng = new Rng(seed);
      const weights = Array.from({ length: S }, () => Array.from({ length: E }, (_, e) => 1 / (1 + e) ** 1.2 + 0.02 * rng.next()));
      const draw = (n: number) => {
        const w = weights[n];
        let u = rng.next() * w.reduce((a, b) => a + b, 0);
        for (let e = 0; e < E; e++) if ((u -= w[e]) <= 0) return e;
        return E - 1;
      };
      const traces = [Array.from({ length: 400 }, () => Array.from({ length: S }, (_, n) => [draw(n)]))];
      const f = weights.map((w) => w.map((x) => Math.round(x * 1000)));
      for (const capacity of [8, 16, 24]) {
        const hit = (policy: PolicyName) => simulate(traces, { capacity, policy, numExperts: E, f }).hitRate;
        const belady = hit('belady');
        expect(hit('edgemoe')).toBeGreaterThanOrEqual(hit('lru'));
        for (const p of ['edgemoe', 'lru', 'lfu'] as const) expect(hit(p)).toBeLessThanOrEqual(belady);
      }
    }
  });

  it('bytes read and stall time beside the hit rate: hand-worked, and never below the Belady-with-prefetch bound (with or without preloading)', () => {
    // 2 MoE layers × 2 experts, 100 bytes each, capacity 2 (one layer's expert + one more), top-1.
    // Token routes: [0, 0], [1, 1], [0, 0]. LRU, no preload, 10 bytes/ms, 5 ms compute per layer:
    // t0 L0 e0 miss (10 ms stall) L1 e0 miss (10) → t1 L0 e1 miss evicts L0e0 (10), L1 e1 miss (10) →
    // t2 L0 e0 miss (10), L1 e0 miss (10): 6 reads, 600 bytes, 60 ms stall.
    const bytes = [[100, 100], [100, 100]];
    const cost = { bytes, bytesPerMs: 10, computeMsPerLayer: 5 };
    const trace = [[[0], [0]], [[1], [1]], [[0], [0]]];
    const lru = simulate([trace], { capacity: 2, policy: 'lru', numExperts: 2, cost });
    expect([lru.hits, lru.loads, lru.bytesRead, lru.stallMs]).toEqual([0, 6, 600, 60]);
    // Belady with prefetching: at least Belady's reads; stall ≥ read time − all the compute (6 layer steps × 5 ms).
    const bound = beladyPrefetchBound([trace], { capacity: 2, numExperts: 2, cost });
    expect(bound.loads).toBeLessThanOrEqual(lru.loads);
    expect(bound.stallMs).toBe(Math.max(0, bound.bytes / 10 - 30));
    // Random traces, every policy with and without a predictor: reads ≥ the bound, stall ≥ its stall.
    const rng = new Rng(7);
    const S = 4;
    const E = 6;
    const traces = Array.from({ length: 3 }, () => Array.from({ length: 60 }, () => Array.from({ length: S }, () => [rng.int(E)])));
    const sizes = Array.from({ length: S }, () => new Array(E).fill(64));
    const predictor = new Predictor(buildPredictor(traces, { numExperts: E, topK: 1, moeLayers: [0, 1, 2, 3] }));
    for (const capacity of [4, 8, 12]) {
      const b = beladyPrefetchBound(traces, { capacity, numExperts: E, cost: { bytes: sizes, bytesPerMs: 32, computeMsPerLayer: 1 } });
      for (const policy of ['edgemoe', 'lru', 'lfu', 'belady'] as const) {
        for (const pre of [undefined, predictor]) {
          const r = simulate(traces, { capacity, policy, numExperts: E, f: sizes, predictor: pre, fanout: 2, cost: { bytes: sizes, bytesPerMs: 32, computeMsPerLayer: 1 } });
          expect(r.loads, `${policy} ${pre ? 'preload' : ''} c=${capacity}`).toBeGreaterThanOrEqual(b.loads);
          expect(r.bytesRead!).toBeGreaterThanOrEqual(b.bytes);
          expect(r.stallMs!).toBeGreaterThanOrEqual(b.stallMs! - 1e-9);
        }
      }
    }
  });
});
