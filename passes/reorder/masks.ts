/**
 * A level of a reordering, expressed on the ORIGINAL model as head/neuron masks: keeping the
 * prefix [0, k) of the reordered units equals zeroing the other units (SPEC §4.2). Used to score
 * orders (auto, quality checks) without materializing the permuted model.
 */
import { createHash } from 'node:crypto';
import { layerNames } from '../../src/core/arch/names.js';
import { transformSource, type ModelSource } from '../../src/core/checkpoint/source.js';
import type { ArchSpec } from '../../src/core/arch/spec.js';
import { Engine } from '../../src/exec/engine/index.js';
import { StreamEngine, streams } from '../../src/exec/stream/index.js';
import type { RunOptions } from '../../src/exec/autodiff/lower.js';
import { mlpsOf } from '../../src/core/arch/units.js';
import { identityOrder, permuteSource, type LayerOrder } from './permute.js';
import type { LayerWidth } from './planner.js';
import { buildModel } from '../../src/core/ir/build.js';
import { levelGraph } from '../../src/core/ir/level.js';
import { sliceSource } from '../../src/core/pipeline/elastic.js';

/** Orders for every layer (identity where `orders` has none, e.g. anchors). */
export function completeOrders(spec: ArchSpec, orders: LayerOrder[]): LayerOrder[] {
  const by = new Map(orders.map((o) => [o.layer, o]));
  return Array.from({ length: spec.numLayers }, (_, l) => by.get(l) ?? identityOrder(spec, l));
}

export function levelMasks(spec: ArchSpec, orders: LayerOrder[], widths: LayerWidth[]): RunOptions {
  const R = spec.numHeads / spec.numKvHeads;
  const all = completeOrders(spec, orders);
  const headMask: Float32Array[] = [];
  const neuronMask = new Map<string, Float32Array>();
  all.forEach((o, l) => {
    const w = widths[l];
    const hm = new Float32Array(spec.numHeads);
    for (let g = 0; g < w.kvGroups; g++) {
      for (let r = 0; r < w.qHeadsPerGroup; r++) hm[o.groups[g] * R + o.qInGroup[g][r]] = 1;
    }
    headMask.push(hm);
    for (const m of mlpsOf(spec, l)) {
      const keep = m.elastic ? w.ffn : m.width;
      const nm = new Float32Array(m.width);
      for (let i = 0; i < Math.min(keep, m.width); i++) nm[o.mlp[m.prefix][i]] = 1;
      neuronMask.set(m.prefix, nm);
    }
  });
  return { headMask, neuronMask };
}

/** Identity replacement of layer l (ELMS anchor scoring): all its heads and neurons masked. */
export function skipLayerMasks(spec: ArchSpec, l: number): RunOptions {
  const headMask: (Float32Array | null)[] = Array.from({ length: spec.numLayers }, () => null);
  headMask[l] = new Float32Array(spec.numHeads);
  const neuronMask = new Map<string, Float32Array>();
  for (const m of mlpsOf(spec, l)) neuronMask.set(m.prefix, new Float32Array(m.width));
  return { headMask, neuronMask };
}

/**
 * The masked model as weights: zeroing a head's o_proj columns (a neuron's down_proj column)
 * removes exactly its contribution, so any engine can evaluate a level or a skipped layer.
 */
export function maskSource(base: ModelSource, masks: RunOptions, label: string): ModelSource {
  const spec = base.spec;
  const hd = spec.headDim;
  const cols = new Map<string, Float32Array>(); // tensor → per-column keep (0/1)
  masks.headMask?.forEach((m, l) => {
    if (!m) return;
    cols.set(layerNames(l).o, Float32Array.from({ length: m.length * hd }, (_, c) => m[Math.floor(c / hd)]));
  });
  for (let l = 0; l < spec.numLayers; l++) {
    for (const m of mlpsOf(spec, l)) {
      const nm = masks.neuronMask?.get(m.prefix);
      if (nm) cols.set(m.down, nm);
    }
  }
  const h = createHash('sha256');
  for (const [k, v] of [...cols].sort((a, b) => (a[0] < b[0] ? -1 : 1))) h.update(k).update(Buffer.from(v.buffer));
  return transformSource(base, {
    label,
    paramsHash: h.digest('hex'),
    rewrite: (name, data) => {
      const keep = cols.get(name);
      if (!keep) return data;
      const n = keep.length;
      for (let i = 0; i < data.length; i++) if (keep[i % n] === 0) data[i] = 0;
      return data;
    },
  });
}

/**
 * Mean next-token loss of a level of `orders` on the onnxruntime engine: the masks on the original
 * model where they are the sub-model; the level itself (the reordered model's kept prefixes) where a
 * q/k norm spans the whole projection, whose mean of squares would count the zeroed heads' channels.
 */
export async function levelLoss(source: ModelSource, orders: LayerOrder[], widths: LayerWidth[], seqs: number[][]): Promise<number> {
  if (source.spec.qkNorm?.scope !== 'all') return maskedLoss(source, levelMasks(source.spec, orders, widths), seqs);
  const graph = levelGraph(buildModel(source.spec), widths);
  const engine = await Engine.open(sliceSource(permuteSource(source, orders), widths, 'level'), { graph });
  try {
    return Math.log(await engine.perplexity(seqs));
  } finally {
    await engine.close();
  }
}

/** Mean next-token loss (log perplexity) of `source` with `masks` applied, on the onnxruntime engine (layer-streamed for a large model). */
export async function maskedLoss(source: ModelSource, masks: RunOptions, seqs: number[][]): Promise<number> {
  if (streams(source.spec)) return streamedLoss(maskSource(source, masks, 'mask'), seqs);
  const engine = await Engine.open(maskSource(source, masks, 'mask'));
  try {
    return Math.log(await engine.perplexity(seqs));
  } finally {
    await engine.close();
  }
}

/** Mean next-token loss of `source` on `seqs`, layer-streamed (the same as the whole-model Engine's, to float32 rounding). */
export async function streamedLoss(source: ModelSource, seqs: number[][]): Promise<number> {
  return (await new StreamEngine(source).losses(seqs)).base;
}
