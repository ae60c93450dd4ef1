/**
 * reorder.budget=latency (passes/reorder/latency.ts): the kernel cost fit, a level's decode-step
 * price against a brute-force count of its matvecs, and the options.
 */
import { describe, expect, it } from 'vitest';
import { fitCost, stepSeconds, type KernelCost } from '../passes/reorder/latency.js';
import { parseReorderOptions } from '../passes/reorder/options.js';
import { describeLevel } from '../passes/reorder/planner.js';
import type { ArchSpec } from '../src/core/arch/spec.js';

describe('reorder.budget=latency', () => {
  it('fitCost recovers a per-call and a per-multiply-add cost from exact points, and clamps them at 0', () => {
    const pts = [1e3, 4e4, 2e5, 1e6].map((m) => ({ macs: m, t: 3e-6 + 2e-9 * m }));
    const f = fitCost(pts);
    expect(f.perCall).toBeCloseTo(3e-6, 12);
    expect(f.perMac).toBeCloseTo(2e-9, 15);
    expect(fitCost([{ macs: 1, t: 5 }, { macs: 2, t: 1 }]).perMac).toBe(0);
    expect(fitCost([{ macs: 1e6, t: 1e-3 }, { macs: 2e6, t: 3e-3 }]).perCall).toBe(0);
  });

  it('a level is priced as its matvecs (one call per projection at its width) plus attention over the context', () => {
    const spec = { hiddenSize: 64, headDim: 8, numHeads: 8, numKvHeads: 4, numLayers: 2, vocabSize: 100, intermediateSize: 96, moe: null } as unknown as ArchSpec;
    const k: KernelCost = { perCall: 1e-6, perMac: 1e-9, context: 32, host: 't' };
    const widths = [
      { kvGroups: 4, qHeadsPerGroup: 2, ffn: 96 },
      { kvGroups: 1, qHeadsPerGroup: 1, ffn: 10 },
    ];
    const lv = describeLevel(spec, 'L0', 0.5, widths, new Set());
    // Brute force: every call and its multiply-adds listed by hand.
    const calls: [number, number][] = [[100, 64]]; // LM head
    let attn = 0;
    for (const w of widths) {
      const q = w.kvGroups * w.qHeadsPerGroup * 8;
      const kv = w.kvGroups * 8;
      calls.push([q, 64], [kv, 64], [kv, 64], [64, q], [w.ffn, 64], [w.ffn, 64], [64, w.ffn]);
      attn += 2 * w.kvGroups * w.qHeadsPerGroup * 32 * 8;
    }
    const want = calls.reduce((t, [r, c]) => t + 1e-6 + 1e-9 * r * c, 0) + 1e-9 * attn;
    expect(stepSeconds(spec, lv, k)).toBeCloseTo(want, 15);
    // A longer context makes attention, not the weights, the larger share: wide-head levels cost more.
    expect(stepSeconds(spec, lv, { ...k, context: 4096 })).toBeGreaterThan(stepSeconds(spec, lv, k));
  });

  it('options: budget=latency takes budgetContext; params does not', () => {
    expect(parseReorderOptions({ widths: 'search', budget: 'latency', budgetContext: '512' })).toMatchObject({ budget: 'latency', budgetContext: 512 });
    expect(() => parseReorderOptions({ widths: 'search', budgetContext: '512' })).toThrow(/budget=memory or latency only/);
    expect(() => parseReorderOptions({ widths: 'search', budget: 'time' })).toThrow(/params, memory or latency/);
    expect(() => parseReorderOptions({ budget: 'latency' })).toThrow(/widths=search only/);
  });
});
