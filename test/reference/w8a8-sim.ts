/**
 * An independent float64 simulation of what a qnn artifact computes, for tests: the float64 Llama
 * reference (./llama64.ts) with every quantized linear replaced by the device's integer arithmetic,
 * written from SPEC-outliers §1.1–1.2 (not from backends/qnn):
 *   q = clamp(round(x/s_x)),  acc = q·W_q (exact integers),  code = clamp(round(acc·s_x·s_w/s_y)),
 *   y = code·s_y;  input shadow: y += s_x·s_w·((u − q)·W_q);  output shadow: a saturated code is
 *   replaced by s_x·s_w·(a·W_q) with a = u (input shadow) or q.
 */
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import type { OutlierScales } from '../../src/core/records/outliers.js';
import { Llama64 } from './llama64.js';

const rint = (v: number) => {
  const f = Math.floor(v);
  const d = v - f;
  return d > 0.5 ? f + 1 : d < 0.5 ? f : f % 2 === 0 ? f : f + 1;
};
const clamp = (v: number, bits: number) => Math.min(2 ** (bits - 1) - 1, Math.max(-(2 ** (bits - 1)), v));

export async function w8a8Reference(source: ModelSource, rec: OutlierScales): Promise<Llama64> {
  const m = await Llama64.load(source);
  const byWeight = new Map(rec.linears.map((l) => [l.weight, l]));
  const wq = new Map<string, Float64Array>();
  for (const l of rec.linears) {
    const W = m.get(l.weight);
    wq.set(l.weight, W.map((v) => clamp(rint(v / l.weightScale), 8)));
  }
  m.linearOverride = (name, x) => {
    const l = byWeight.get(name);
    if (!l) return null;
    const W = wq.get(name)!;
    const K = l.inFeatures;
    const O = l.outFeatures;
    const { scale: sx, bits: bx } = l.input;
    const { scale: sy, bits: by } = l.output;
    const sxw = l.weightScale * sx;
    const u = x.map((v) => rint(v / sx));
    const q = u.map((v) => clamp(v, bx));
    const inShadow = l.input.decision === 'shadow';
    const a = inShadow ? u : q;
    const y = new Float64Array(O);
    for (let o = 0; o < O; o++) {
      let accQ = 0;
      let accA = 0;
      for (let k = 0; k < K; k++) {
        accQ += q[k] * W[o * K + k];
        accA += a[k] * W[o * K + k];
      }
      const code = clamp(rint((accQ * sxw) / sy), by);
      const saturated = code === clamp(Infinity, by) || code === clamp(-Infinity, by);
      y[o] = l.output.decision === 'shadow' && saturated ? accA * sxw : code * sy + (accA - accQ) * sxw;
    }
    return y;
  };
  return m;
}
