/**
 * The quality statistics (src/app/evaluate/stats.ts, quality.ts) against a float64 brute force written
 * here from the definitions: two-pass means and variances, the delta method spelled out, a sorted
 * copy for the percentile, textbook Wilson intervals. Small synthetic logits, seeded.
 */
import { describe, expect, it } from 'vitest';
import { compareModels } from '../src/app/evaluate/quality.js';
import { quantileSorted, wilson, QualityAccumulator, Z95 } from '../src/app/evaluate/stats.js';

/** A seeded uniform [0, 1) (mulberry32). */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const V = 11;
/** Logits per window: the source's, and the artifact's = source + noise (a "quantized" copy). */
function synthetic(windows: number, length: number, noise: number, seed: number) {
  const r = rng(seed);
  const seqs: number[][] = [];
  const src = new Map<string, Float32Array>();
  const art = new Map<string, Float32Array>();
  for (let w = 0; w < windows; w++) {
    const ids = Array.from({ length }, () => Math.floor(r() * V));
    ids[0] = w; // distinct windows
    const a = new Float32Array(length * V).map(() => 3 * (r() - 0.5));
    const b = a.map((x) => x + noise * (r() - 0.5));
    seqs.push(ids);
    src.set(ids.join(), a);
    art.set(ids.join(), b);
  }
  return { seqs, source: async (ids: number[]) => src.get(ids.join())!, artifact: async (ids: number[]) => art.get(ids.join())! };
}

/** Everything in float64 from the definitions. */
function bruteForce(seqs: number[][], src: (ids: number[]) => Float32Array, art: (ids: number[]) => Float32Array) {
  const xs: number[] = []; // source NLL
  const ys: number[] = []; // artifact NLL
  const ks: number[] = [];
  let agree = 0;
  for (const seq of seqs) {
    const [a, b] = [src(seq), art(seq)];
    for (let t = 0; t + 1 < seq.length; t++) {
      const p = Array.from(a.subarray(t * V, (t + 1) * V), Number);
      const q = Array.from(b.subarray(t * V, (t + 1) * V), Number);
      const lse = (v: number[]) => Math.log(v.reduce((s, x) => s + Math.exp(x), 0));
      const [lp, lq] = [lse(p), lse(q)];
      xs.push(lp - p[seq[t + 1]]);
      ys.push(lq - q[seq[t + 1]]);
      ks.push(p.reduce((s, x, i) => s + Math.exp(x - lp) * (x - lp - (q[i] - lq)), 0));
      if (p.indexOf(Math.max(...p)) === q.indexOf(Math.max(...q))) agree++;
    }
  }
  const n = xs.length;
  const mean = (v: number[]) => v.reduce((s, x) => s + x, 0) / n;
  // Standard error of a mean as llama.cpp takes it: population variance / (n − 1).
  const cov = (u: number[], v: number[]) => {
    const [mu, mv] = [mean(u), mean(v)];
    return u.reduce((s, x, i) => s + (x - mu) * (v[i] - mv), 0) / n / (n - 1);
  };
  const [mx, my] = [mean(xs), mean(ys)];
  const [ps, pa] = [Math.exp(mx), Math.exp(my)];
  const d = ys.map((y, i) => y - xs[i]);
  const deltaSe = Math.sqrt(pa * pa * cov(ys, ys) + ps * ps * cov(xs, xs) - 2 * pa * ps * cov(xs, ys));
  const sorted = [...ks].sort((u, v) => u - v);
  return {
    n,
    sourcePpl: [ps, Math.exp(mx - Z95 * Math.sqrt(cov(xs, xs))), Math.exp(mx + Z95 * Math.sqrt(cov(xs, xs)))],
    artifactPpl: [pa, Math.exp(my - Z95 * Math.sqrt(cov(ys, ys))), Math.exp(my + Z95 * Math.sqrt(cov(ys, ys)))],
    pplDelta: [pa - ps, pa - ps - Z95 * deltaSe, pa - ps + Z95 * deltaSe],
    pplRatio: [Math.exp(mean(d)), Math.exp(mean(d) - Z95 * Math.sqrt(cov(d, d))), Math.exp(mean(d) + Z95 * Math.sqrt(cov(d, d)))],
    kl: [mean(ks), mean(ks) - Z95 * Math.sqrt(cov(ks, ks)), mean(ks) + Z95 * Math.sqrt(cov(ks, ks))],
    klP99: sorted[Math.floor(0.99 * (n - 1))] + (0.99 * (n - 1) - Math.floor(0.99 * (n - 1))) * (sorted[Math.floor(0.99 * (n - 1)) + 1] - sorted[Math.floor(0.99 * (n - 1))]),
    klMax: sorted[n - 1],
    agree: agree / n,
  };
}

describe('quality statistics against a float64 brute force', () => {
  it('PPL, ΔPPL, ratio, KL mean / p99 / max and top-token agreement, with their 95% intervals', async () => {
    for (const [noise, seed] of [[0.3, 1], [2, 7]] as const) {
      const s = synthetic(6, 40, noise, seed);
      const got = await compareModels(s.source, s.artifact, s.seqs, V);
      const srcMap = new Map(s.seqs.map((q) => [q.join(), 0]));
      expect(srcMap.size).toBe(6);
      const cache = new Map<string, [Float32Array, Float32Array]>();
      for (const q of s.seqs) cache.set(q.join(), [await s.source(q), await s.artifact(q)]);
      const ref = bruteForce(s.seqs, (q) => cache.get(q.join())![0], (q) => cache.get(q.join())![1]);
      expect(got.positions).toBe(ref.n);
      expect(got.positions).toBe(6 * 39);
      const close = (v: number, w: number) => expect(Math.abs(v - w)).toBeLessThanOrEqual(1e-9 * Math.max(1, Math.abs(w)));
      const pairs: [number, [number, number], number[]][] = [
        [got.referencePpl, got.ci95.referencePpl, ref.sourcePpl],
        [got.candidatePpl, got.ci95.candidatePpl, ref.artifactPpl],
        [got.pplDelta, got.ci95.pplDelta, ref.pplDelta],
        [got.pplRatio, got.ci95.pplRatio, ref.pplRatio],
        [got.kl, got.ci95.kl, ref.kl],
      ];
      for (const [v, ci, [w, lo, hi]] of pairs) {
        close(v, w);
        close(ci[0], lo);
        close(ci[1], hi);
        expect(ci[0]).toBeLessThan(v);
        expect(ci[1]).toBeGreaterThan(v);
      }
      // Percentiles come from float32-stored KL values.
      expect(Math.abs(got.klP99 - ref.klP99)).toBeLessThanOrEqual(1e-6 * ref.klP99);
      expect(Math.abs(got.klMax - ref.klMax)).toBeLessThanOrEqual(1e-12);
      expect(got.greedyAgreement).toBe(ref.agree);
      const w = wilson(Math.round(ref.agree * ref.n), ref.n);
      expect(got.ci95.greedyAgreement).toEqual([w.lo, w.hi]);
    }
  });

  it('the same model twice: zero KL, ratio 1, full agreement', async () => {
    const s = synthetic(3, 20, 0, 3);
    const got = await compareModels(s.source, s.source, s.seqs, V);
    expect(got.kl).toBe(0);
    expect(got.pplDelta).toBe(0);
    expect(got.pplRatio).toBe(1);
    expect(got.greedyAgreement).toBe(1);
    expect(got.ci95.pplRatio).toEqual([1, 1]);
  });

  it('Wilson intervals: textbook values (Newcombe 1998; p = 0.9, n = 100 → 0.8256–0.9448)', () => {
    const w = wilson(90, 100);
    expect(w.lo).toBeCloseTo(0.82564, 4);
    expect(w.hi).toBeCloseTo(0.94476, 4);
    const all = wilson(50, 50);
    expect(all.hi).toBe(1);
    expect(all.lo).toBeCloseTo(0.92865, 4); // n / (n + z²)
  });

  it('the p99 interval: order statistics at n·q ∓ 1.96 √(n q (1 − q)) (ranks 983 and 997 of 1000)', () => {
    const acc = new QualityAccumulator(8); // grows past its initial capacity
    const values = Array.from({ length: 1000 }, (_, i) => (i * 7919) % 1000); // 0..999, shuffled
    for (const v of values) acc.add(1, 1, v, true);
    const r = acc.result();
    expect(r.klP99.value).toBeCloseTo(quantileSorted(Array.from({ length: 1000 }, (_, i) => i), 0.99), 9);
    expect(r.klP99.value).toBeCloseTo(989.01, 9);
    expect([r.klP99.lo, r.klP99.hi]).toEqual([982, 996]);
    expect(r.klMax).toBe(999);
  });

  it('intervals cover the truth about 95% of the time (i.i.d. Bernoulli agreement, 400 trials)', () => {
    const r = rng(11);
    let covered = 0;
    for (let trial = 0; trial < 400; trial++) {
      const acc = new QualityAccumulator();
      for (let i = 0; i < 200; i++) acc.add(1 + r(), 1 + r(), r() * 0.02, r() < 0.9);
      const { topAgreement: t, kl } = acc.result();
      if (t.lo <= 0.9 && 0.9 <= t.hi && kl.lo <= 0.01 && 0.01 <= kl.hi) covered++;
    }
    // Both intervals at 95%, independent: ~90% jointly.
    expect(covered / 400).toBeGreaterThan(0.85);
    expect(covered / 400).toBeLessThan(0.96);
  });
});
