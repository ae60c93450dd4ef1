/**
 * Pass `outliers`: calibration set → (optional Hadamard rotation) → the activation profile of every
 * linear (./measure.ts, cached) → weight scales → decisions (./decide.ts) → record `outlier-scales/1`
 * and per-tensor annotations (scales, hot input channels) for the qnn target.
 */
import { UsageError } from '../../src/core/errors.js';
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import type { ModelGraph } from '../../src/core/ir/ir.js';
import type { Pass, PassContext } from '../../src/core/pipeline/pass.js';
import { evolve, type CompileUnit, type TensorAnnotation } from '../../src/core/pipeline/unit.js';
import { activationScale } from '../../src/core/quant/w8a8.js';
import { OUTLIER_SCALES, type LinearDecision, type LinearRole, type OutlierScales } from '../../src/core/records/outliers.js';
import { calibrationSet, textFileSpec, type CalibrationSet } from '../../src/measure/calibration.js';
import type { Progress } from '../../src/core/util/progress.js';
import { silentProgress } from '../../src/core/util/progress.js';
import { decide, sideStats, type MeasuredLinear } from './decide.js';
import { measureLinears, type RawSide } from './measure.js';
import type { OutliersOptions } from './options.js';
import { blockOf, rotateUnit } from './rotate.js';

const ROLE = /\.(q|k|v|o|gate|up|down)$/;

/** The role of a linear from its output value's name (`l0.q`, `model.layers.0.mlp.down`, `…h_rot`). */
function roleOf(out: string): LinearRole {
  if (out.endsWith('_rot')) return 'hadamard';
  const m = ROLE.exec(out);
  if (!m) throw new Error(`internal: no role for linear output ${out}`);
  return m[1] as LinearRole;
}

/** MoE layers route tokens dynamically: no static per-tensor graph expresses them. */
export function checkDense(graph: ModelGraph, where: string): void {
  if (graph.ops.some((op) => op.op === 'moe')) {
    throw new UsageError(`${where}: pass outliers profiles dense decoder layers; this model has mixture-of-experts layers (their routed experts have no static per-tensor path)`);
  }
}

async function calibrationOf(source: ModelSource, o: OutliersOptions, cacheDir: PassContext['cacheDir'], progress: Progress): Promise<CalibrationSet> {
  return calibrationSet(
    source,
    { source: o.calibText ? await textFileSpec(o.calibText) : 'self-generated', count: o.calibCount, length: o.calibLength, seed: o.seed, heldOut: o.heldOut },
    { cacheDir, progress },
  );
}

/** s_w = max(max|W|, 1e-5)/127 of every linear of the decoder layers, one tensor at a time. */
async function weightScales(source: ModelSource, graph: ModelGraph): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const op of graph.ops) {
    if (op.op !== 'linear' || out.has(op.weight) || !/^model\.layers\./.test(op.weight)) continue;
    const w = await source.readF32(op.weight);
    let m = 0;
    for (let i = 0; i < w.length; i++) m = Math.max(m, Math.abs(w[i]));
    out.set(op.weight, Math.fround(Math.max(m, 1e-5) / 127));
  }
  return out;
}

export interface OutliersAnalysis {
  /** The unit measured: the input unit, or its rotation. */
  unit: CompileUnit;
  record: OutlierScales;
  annotations: Map<string, TensorAnnotation>;
}

/** Everything the pass decides (tests and the bench call it directly). */
export async function analyzeOutliers(input: CompileUnit, o: OutliersOptions, ctx: { cacheDir?: PassContext['cacheDir']; progress?: Progress }): Promise<OutliersAnalysis> {
  checkDense(input.graph, input.source.description);
  const progress = ctx.progress ?? silentProgress;
  const calib = await calibrationOf(input.source, o, ctx.cacheDir, progress);
  const unit = o.rotate === 'hadamard' ? rotateUnit(input) : input;
  const raw = await measureLinears(unit.source, unit.graph, calib, { cacheDir: ctx.cacheDir, progress });
  const sides = new Map<string, RawSide>(raw.map((r) => [`${r.weight}|${r.side}`, r]));
  const sw = await weightScales(unit.source, unit.graph);
  const measured: MeasuredLinear[] = [];
  unit.graph.ops.forEach((op, order) => {
    if (op.op !== 'linear' || !sw.has(op.weight)) return;
    const inp = sides.get(`${op.weight}|input`);
    const out = sides.get(`${op.weight}|output`);
    if (!inp || !out) throw new Error(`internal: no profile of ${op.weight}`);
    measured.push({
      weight: op.weight,
      layer: inp.layer,
      role: roleOf(op.out),
      inFeatures: op.inFeatures,
      outFeatures: op.outFeatures,
      weightScale: sw.get(op.weight)!,
      order,
      input: sideStats(inp, o.coverage).stats,
      output: sideStats(out, o.coverage).stats,
      inputValue: op.x,
      outputValue: op.out,
    });
  });
  // The online rotation is a float step on the device: 16-bit activations on both sides, outside the ranking.
  const rotations = measured.filter((m) => m.role === 'hadamard');
  const linears: LinearDecision[] = decide(measured.filter((m) => m.role !== 'hadamard'), o);
  for (const h of rotations) {
    const side = (s: MeasuredLinear['input'], value: string) => ({ ...s, decision: 'widen' as const, bits: 16 as const, T: s.absMax, scale: activationScale(s.absMax, 16), value });
    linears.push({ ...h, importance: Math.max(h.input.rho, h.output.rho), rank: -1, input: side(h.input, h.inputValue), output: side(h.output, h.outputValue) });
  }
  const order = new Map(measured.map((m) => [m.weight, m.order]));
  linears.sort((a, b) => order.get(a.weight)! - order.get(b.weight)!);

  const notes: string[] = [];
  if (rotations.length) {
    const widths = [...new Set(rotations.map((h) => h.inFeatures))];
    notes.push(`the online Hadamard rotations (${rotations.length}) run with 16-bit activations on both sides (int16 Q/DQ, W8A16) whatever a16 says; their blocks: ${widths.map((n) => `${blockOf(n)}-wide on ${n}-wide layers`).join(', ')} (the largest power of two dividing the width)`);
  }
  const shadowSides = linears.flatMap((l) => [l.input, l.output]).filter((s) => s.decision === 'shadow');
  if (shadowSides.length) {
    const frac = shadowSides.reduce((a, s) => a + s.hot.length / s.channels, 0) / shadowSides.length;
    notes.push(`shadow on ${shadowSides.length} sides of ${linears.filter((l) => l.input.decision === 'shadow' || l.output.decision === 'shadow').length} linears; hot channels |H|/K ${(100 * frac).toFixed(2)}% on average`);
  }
  const record: OutlierScales = {
    format: OUTLIER_SCALES.id as OutlierScales['format'],
    calibration: { ...calib.spec, profile: calib.key },
    rounding: 'half-even',
    percentile: 99.9,
    mode: o.mode,
    keep: o.keep,
    tau: o.tau,
    policy: o.policy,
    coverage: o.coverage,
    a16: o.a16,
    rotation: o.rotate,
    kept: linears.filter((l) => l.input.decision === 'shadow' || l.output.decision === 'shadow').length,
    linears,
    notes,
  };
  const annotations = new Map<string, TensorAnnotation>();
  for (const l of linears) {
    annotations.set(l.weight, {
      scales: { input: l.input.scale, weight: l.weightScale, output: l.output.scale },
      ...(l.input.decision === 'shadow' ? { outlierChannels: l.input.hot } : {}),
    });
  }
  return { unit, record, annotations };
}

export const outliersPass: Pass<OutliersOptions> = {
  /** The calibration set and the activation profile a compile looks up (of the rotated model with rotate=hadamard). */
  async profile(source, o, ctx) {
    const { unitOf } = await import('../../src/core/pipeline/unit.js');
    const input = unitOf(source);
    checkDense(input.graph, source.description);
    const calib = await calibrationOf(source, o, ctx.cacheDir, ctx.progress);
    const unit = o.rotate === 'hadamard' ? rotateUnit(input) : input;
    await measureLinears(unit.source, unit.graph, calib, { cacheDir: ctx.cacheDir, progress: ctx.progress });
  },

  async preview(source, o, ctx) {
    const { unitOf } = await import('../../src/core/pipeline/unit.js');
    return (await analyzeOutliers(unitOf(source), o, ctx)).record;
  },

  async run(unit, options, ctx) {
    const a = await analyzeOutliers(unit, options, ctx);
    for (const n of a.record.notes) ctx.note(`outliers: ${n}`);
    return { unit: evolve(a.unit, { annotate: a.annotations }), record: a.record };
  },
};
