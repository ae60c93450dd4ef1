/**
 * Pass `outliers` (SPEC-outliers §1.1–1.4, tests T1–T7): rounding golden values; the shadow
 * decomposition reconstructs u·W_q exactly on integer grids and a clipped path differs exactly at
 * the outlier elements (property tests); the streaming profile equals a brute-force sort of the full
 * activations; rank / threshold decisions; hot sets minimal; the planted channels found.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { decide, selectHot, sideStats, type MeasuredLinear } from '../passes/outliers/decide.js';
import { linearPoints, measureLinears, topCount } from '../passes/outliers/measure.js';
import { BlockHadamard, rotateUnit } from '../passes/outliers/rotate.js';
import { unitOf } from '../src/core/pipeline/unit.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { buildModel } from '../src/core/ir/build.js';
import {
  clampCodes,
  decompose,
  intMatmul,
  quantizeUnclamped,
  quantizeWeight,
  roundHalfAway,
  roundHalfEven,
  scatterResidual,
  shadowCorrection,
} from '../src/core/quant/w8a8.js';
import type { SideStats } from '../src/core/records/outliers.js';
import { Engine } from '../src/exec/engine/index.js';

describe('W8A8 arithmetic', () => {
  it('rounds half to even (torch) and half away (C roundf), never half up', () => {
    const even: [number, number][] = [[0.5, 0], [1.5, 2], [2.5, 2], [-0.5, -0], [-1.5, -2], [-2.5, -2], [2.4999, 2], [127.5, 128], [-128.5, -128]];
    for (const [x, y] of even) expect(roundHalfEven(x) === y, `${x} → ${roundHalfEven(x)}`).toBe(true);
    const away: [number, number][] = [[0.5, 1], [1.5, 2], [2.5, 3], [-0.5, -1], [-2.5, -3], [2.4999, 2]];
    for (const [x, y] of away) expect(roundHalfAway(x) === y, `${x} → ${roundHalfAway(x)}`).toBe(true);
  });

  it('dequantized in-range values are within s/2; weights quantize per tensor with s_w = max|W|/127', () => {
    fc.assert(
      fc.property(fc.array(fc.float({ min: -10, max: 10, noNaN: true }), { minLength: 1, maxLength: 40 }), fc.float({ min: Math.fround(0.01), max: 1, noNaN: true }), (xs, s) => {
        const x = Float32Array.from(xs);
        const u = quantizeUnclamped(x, s);
        const q = clampCodes(u, 8);
        for (let i = 0; i < x.length; i++) if (u[i] === q[i]) expect(Math.abs(q[i] * s - x[i])).toBeLessThanOrEqual(s / 2 + 1e-6 * Math.abs(x[i]));
      }),
    );
    const w = quantizeWeight(Float32Array.from([0.5, -1.27, 0.01, 0.635]), 2, 2);
    expect(w.scale).toBe(Math.fround(1.27 / 127));
    // [out, in] → [in, out]: row k is input channel k.
    expect(Array.from(w.q)).toEqual([50, 1, -127, 64]);
  });

  /** Random activations with 0.1–1% injected outliers of 10–1000×T, a weight, and T. */
  const caseArb = fc.record({
    T: fc.integer({ min: 1, max: 12 }),
    K: fc.integer({ min: 4, max: 48 }),
    O: fc.integer({ min: 1, max: 16 }),
    seed: fc.integer({ min: 1, max: 2 ** 30 }),
    share: fc.double({ min: 0.001, max: 0.01, noNaN: true }),
  });
  function makeCase(c: { T: number; K: number; O: number; seed: number; share: number }) {
    let s = c.seed;
    const rnd = () => ((s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1;
    const T = 2;
    const x = Float32Array.from({ length: c.T * c.K }, () => T * rnd());
    const n = Math.max(1, Math.round(c.share * x.length));
    for (let i = 0; i < n; i++) x[Math.floor(((rnd() + 1) / 2) * x.length) % x.length] = (rnd() < 0 ? -1 : 1) * T * (10 + 990 * Math.abs(rnd()));
    const w = quantizeWeight(Float32Array.from({ length: c.O * c.K }, rnd), c.O, c.K);
    return { x, w, sx: Math.fround(T / 127) };
  }

  it('shadow: q·W_q + r[:, C]·W_q[C, :] equals u·W_q bit-exactly; C is exactly the channels with an outlier; scatter∘compact = identity', () => {
    fc.assert(
      fc.property(caseArb, (c) => {
        const { x, w, sx } = makeCase(c);
        const u = quantizeUnclamped(x, sx);
        const d = decompose(u, c.T, c.K, 8);
        const npu = intMatmul(d.q, c.T, w);
        const cpu = shadowCorrection(d, (k) => w.q.subarray(k * c.O, (k + 1) * c.O), c.O);
        const full = intMatmul(u, c.T, w);
        for (let i = 0; i < full.length; i++) expect(npu[i] + cpu[i]).toBe(full[i]);
        const brute = [...Array(c.K).keys()].filter((k) => [...Array(c.T).keys()].some((t) => u[t * c.K + k] > 127 || u[t * c.K + k] < -128));
        expect(Array.from(d.channels)).toEqual(brute);
        const r = scatterResidual(d);
        for (let i = 0; i < u.length; i++) expect(r[i]).toBe(u[i] - d.q[i]);
      }),
      { numRuns: 60, seed: 20261124 },
    );
  });

  it('shadow error is within 0.5·s_x·max_o Σ_k|Ŵ_ko| of x·Ŵ; the clipped path differs from it exactly where outliers are', () => {
    fc.assert(
      fc.property(caseArb, (c) => {
        const { x, w, sx } = makeCase(c);
        const u = quantizeUnclamped(x, sx);
        const d = decompose(u, c.T, c.K, 8);
        const shadow = intMatmul(u, c.T, w);
        const clipped = intMatmul(d.q, c.T, w);
        let bound = 0;
        for (let o = 0; o < c.O; o++) {
          let s = 0;
          for (let k = 0; k < c.K; k++) s += Math.abs(w.q[k * c.O + o] * w.scale);
          bound = Math.max(bound, 0.5 * sx * s);
        }
        let errShadow = 0;
        let errClip = 0;
        // Whether an outlier meets a nonzero weight (an outlier channel whose weights quantize to 0 changes nothing).
        let affected = false;
        for (let t = 0; t < c.T; t++) {
          for (let o = 0; o < c.O; o++) {
            let exact = 0;
            for (let k = 0; k < c.K; k++) exact += x[t * c.K + k] * w.q[k * c.O + o] * w.scale;
            errShadow = Math.max(errShadow, Math.abs(shadow[t * c.O + o] * sx * w.scale - exact));
            errClip = Math.max(errClip, Math.abs(clipped[t * c.O + o] * sx * w.scale - exact));
            // Rows without an outlier element: the two paths agree exactly.
            const rowHas = [...Array(c.K).keys()].some((k) => u[t * c.K + k] !== d.q[t * c.K + k] && w.q[k * c.O + o] !== 0);
            if (!rowHas) expect(clipped[t * c.O + o]).toBe(shadow[t * c.O + o]);
            else affected = true;
          }
        }
        expect(errShadow).toBeLessThanOrEqual(bound * (1 + 1e-9) + 1e-9);
        if (affected) expect(errClip).toBeGreaterThan(errShadow);
      }),
      { numRuns: 60, seed: 20261124 },
    );
  });
});

describe('decisions', () => {
  const side = (rho: number, outliers = 5, channels = 8): SideStats => ({ n: 100, channels, absMax: rho, p999: 1, mean: 0, std: 1, rho, outliers, hot: [], hotCoverage: 1, channelCounts: [] });
  const lin = (i: number, rho: number, outliers = 5): MeasuredLinear => ({
    weight: `model.layers.${i}.mlp.down_proj.weight`,
    layer: i,
    role: 'down',
    inFeatures: 8,
    outFeatures: 8,
    weightScale: 0.01,
    order: i,
    input: side(rho, outliers),
    output: side(1, 0),
    inputValue: `h${i}`,
    outputValue: `y${i}`,
  });

  it('rank mode keeps shadow on exactly ⌈keep·n⌉ linears by importance (ties: earlier layer); threshold mode on ρ ≥ τ; auto policy widens below τ and clips above', () => {
    const ls = [lin(0, 3), lin(1, 9), lin(2, 9), lin(3, 20), lin(4, 2), lin(5, 7), lin(6, 1.5), lin(7, 6), lin(8, 4), lin(9, 30)];
    const d = decide(ls, { mode: 'rank', keep: 0.15, tau: 5, policy: 'auto', a16: 'none' });
    const kept = d.filter((x) => x.input.decision === 'shadow').map((x) => x.layer);
    expect(kept).toEqual([3, 9]); // ⌈0.15·10⌉ = 2: ρ 30 and 20
    expect(d.find((x) => x.layer === 1)!.rank).toBe(2); // ρ 9 tie: layer 1 before layer 2
    expect(d.find((x) => x.layer === 2)!.rank).toBe(3);
    expect(d.find((x) => x.layer === 1)!.input.decision).toBe('clip'); // ρ ≥ τ
    expect(d.find((x) => x.layer === 0)!.input.decision).toBe('widen'); // ρ < τ
    expect(d.find((x) => x.layer === 0)!.input.T).toBe(3); // T = max
    expect(d.find((x) => x.layer === 1)!.input.T).toBe(1); // T = p99.9
    const th = decide(ls, { mode: 'threshold', keep: 0.15, tau: 5, policy: 'auto', a16: 'none' });
    expect(th.filter((x) => x.input.decision === 'shadow').map((x) => x.layer)).toEqual([1, 2, 3, 5, 7, 9]);
    const a16 = decide(ls, { mode: 'rank', keep: 0.15, tau: 5, policy: 'auto', a16: 'flagged' });
    expect(a16.filter((x) => x.input.bits === 16).map((x) => x.layer)).toEqual([3, 9]);
    // a16 = all: every side 16-bit (W8A16 throughout), its scale from the side's absolute maximum
    const all = decide(ls, { mode: 'rank', keep: 0.15, tau: 5, policy: 'auto', a16: 'all' });
    all.forEach((x, k) => {
      for (const w of ['input', 'output'] as const) {
        expect(x[w].bits).toBe(16);
        expect(x[w].decision).toBe('widen');
        expect(x[w].T).toBe(ls[k][w].absMax);
      }
    });
    expect(decide(ls, { mode: 'rank', keep: 1, tau: 5, policy: 'widen', a16: 'none' }).every((x) => x.input.decision === 'shadow')).toBe(true);
  });

  it('hot channels: the fewest covering ≥ 80%; dropping the last falls below; a Zipf profile gives |H|/K < 3%', () => {
    fc.assert(
      fc.property(fc.array(fc.nat(50), { minLength: 1, maxLength: 64 }), (counts) => {
        const total = counts.reduce((a, b) => a + b, 0);
        const { hot } = selectHot(counts, 0.8);
        if (total === 0) {
          expect(hot).toEqual([]);
          return;
        }
        const cov = (h: number[]) => h.reduce((a, k) => a + counts[k], 0);
        expect(cov(hot)).toBeGreaterThanOrEqual(0.8 * total);
        expect(cov(hot.slice(0, -1))).toBeLessThan(0.8 * total);
        // Fewest: the largest counts come first.
        const sorted = [...counts].sort((a, b) => b - a);
        expect(cov(hot)).toBe(sorted.slice(0, hot.length).reduce((a, b) => a + b, 0));
      }),
    );
    const K = 4096;
    const zipf = Float64Array.from({ length: K }, (_, k) => Math.floor(1e6 / (k + 1) ** 2));
    expect(selectHot(zipf, 0.8).hot.length / K).toBeLessThan(0.03);
  });
});

describe('profile', () => {
  let tmp: string;
  let src: Checkpoint;
  beforeAll(async () => {
    tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-outliers-'));
    await generateFixture(tmp, { arch: 'qwen2', dims: { hiddenSize: 32, intermediateSize: 64, numLayers: 2, numHeads: 2, numKvHeads: 1, vocabSize: 300, maxPositions: 64 } });
    src = await openCheckpoint(tmp);
  });
  afterAll(async () => {
    await src?.close();
    await fsp.rm(tmp, { recursive: true, force: true });
  });

  it('streaming max, p99.9 (index ⌊0.999n⌋−1), mean, std and outlier counts equal a brute-force sort of the full activations', async () => {
    const graph = buildModel(src.spec);
    const calib = Array.from({ length: 5 }, (_, s) => Array.from({ length: 24 }, (_, i) => (s * 37 + i * 11 + ((i * i) % 5)) % 300));
    const raw = await measureLinears(src, graph, { calib, key: 'test' }, {});
    const engine = await Engine.open(src);
    const full = await engine.tap(calib, [{ kind: 'linear-input', full: true }]);
    await engine.close();
    const points = linearPoints(graph).filter((p) => p.kind === 'linear-input');
    expect(points.length).toBe(14);
    for (const p of points) {
      const blocks = full.linearInputs.get(p.key)!.full!;
      const xs = Float64Array.from(blocks.flatMap((b) => Array.from(b)));
      const C = p.channels;
      const abs = Float64Array.from(xs, Math.abs).sort();
      const n = abs.length;
      const r = raw.find((x) => x.weight === p.key && x.side === 'input')!;
      expect(r.top.length).toBe(topCount(n));
      const { stats, counts } = sideStats(r, 0.8);
      expect(stats.n).toBe(n);
      expect(stats.absMax).toBe(abs[n - 1]);
      expect(stats.p999).toBe(abs[Math.floor(0.999 * n) - 1]);
      const mean = xs.reduce((a, b) => a + b, 0) / n;
      expect(stats.mean).toBeCloseTo(mean, 6);
      expect(stats.std).toBeCloseTo(Math.sqrt(xs.reduce((a, b) => a + (b - mean) ** 2, 0) / n), 5);
      const s = Math.fround(Math.max(stats.p999, 1e-5) / 127);
      const brute = new Float64Array(C);
      for (let i = 0; i < n; i++) {
        const u = roundHalfEven(Math.fround(xs[i] / s));
        if (u > 127 || u < -128) brute[i % C]++;
      }
      expect(Array.from(counts), p.key).toEqual(Array.from(brute));
    }
  }, 60_000);

  it('the Hadamard rotation is orthogonal and the rotated model (γ folded, online rotation before down_proj) computes the same logits', async () => {
    for (const n of [8, 64, 96]) {
      const R = new BlockHadamard(n, 3);
      const rows = Array.from({ length: n }, (_, i) => R.apply(Float64Array.from({ length: n }, (_, j) => (i === j ? 1 : 0))));
      for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) expect(rows[i].reduce((a, v, k) => a + v * rows[j][k], 0)).toBeCloseTo(i === j ? 1 : 0, 12);
    }
    const unit = unitOf(src);
    const rotated = rotateUnit(unit);
    expect(rotated.graph.ops.filter((o) => o.op === 'linear').length).toBe(unit.graph.ops.filter((o) => o.op === 'linear').length + src.spec.numLayers);
    const ids = [3, 17, 5, 200, 41, 9, 77, 12];
    const plainEngine = await Engine.open(src);
    const want = await plainEngine.logits(ids);
    await plainEngine.close();
    const rotEngine = await Engine.open(rotated.source, { graph: rotated.graph });
    const got = await rotEngine.logits(ids);
    await rotEngine.close();
    let m = 0;
    let scale = 0;
    for (let i = 0; i < want.length; i++) {
      m = Math.max(m, Math.abs(got[i] - want[i]));
      scale = Math.max(scale, Math.abs(want[i]));
    }
    expect(m / scale).toBeLessThan(1e-4);
  }, 30_000);
});
