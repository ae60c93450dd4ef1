/**
 * What the qnn target, its simulation and its onnxruntime runner agree on: per linear the static
 * quantization (scales, bits, which sides run shadow), the subgraphs in execution order, the chunk
 * view [1, a, b, C], and the channel count of every value.
 */
import type { ArchSpec } from '../../src/core/arch/spec.js';
import type { ModelGraph, V } from '../../src/core/ir/ir.js';
import { partitionModel, type Subgraph } from '../../src/core/ir/subgraphs.js';
import type { ActBits } from '../../src/core/quant/w8a8.js';
import type { LinearDecision, OutlierScales } from '../../src/core/records/outliers.js';
import { closestFactors } from './options.js';

/** One linear as the device runs it. */
export interface QLinear {
  weight: string;
  x: V;
  y: V;
  inFeatures: number;
  outFeatures: number;
  bias: string | null;
  sx: number;
  inBits: ActBits;
  sw: number;
  sy: number;
  outBits: ActBits;
  /** r[:, C]·W_q[C, :] added on the CPU. */
  inShadow: boolean;
  /** Saturated output elements recomputed on the CPU. */
  outShadow: boolean;
}

export interface Chunk {
  /** Tokens per chunk c = a·b. */
  c: number;
  a: number;
  b: number;
}

export function chunkOf(spec: ArchSpec, requested: number | null): Chunk {
  const c = requested ?? Math.min(256, spec.maxPositions);
  const [a, b] = closestFactors(c);
  return { c, a, b };
}

/** A linear as the device runs it, from its decision in the outliers record. */
export function linearOf(d: LinearDecision, x: V, y: V, bias: string | null): QLinear {
  return {
    weight: d.weight,
    x,
    y,
    inFeatures: d.inFeatures,
    outFeatures: d.outFeatures,
    bias,
    sx: d.input.scale,
    inBits: d.input.bits,
    sw: d.weightScale,
    sy: d.output.scale,
    outBits: d.output.bits,
    inShadow: d.input.decision === 'shadow',
    outShadow: d.output.decision === 'shadow',
  };
}

/** Every quantized linear by weight name, from the outliers record. */
export function quantLinears(graph: ModelGraph, rec: OutlierScales): Map<string, QLinear> {
  const byWeight = new Map(rec.linears.map((l) => [l.weight, l]));
  const out = new Map<string, QLinear>();
  for (const op of graph.ops) {
    if (op.op !== 'linear') continue;
    const d = byWeight.get(op.weight);
    if (d) out.set(op.weight, linearOf(d, op.x, op.out, op.bias));
  }
  return out;
}

/** The model's subgraphs with shadow nodes after the linears that have shadow on either side. */
export function qnnSubgraphs(graph: ModelGraph, linears: ReadonlyMap<string, QLinear>): Subgraph[] {
  const shadowed = new Set([...linears.values()].filter((l) => l.inShadow || l.outShadow).map((l) => l.weight));
  return partitionModel(graph, shadowed);
}

