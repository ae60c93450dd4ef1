/**
 * Unit importance providers. Every provider emits the same score tensors:
 *   head[l][h]   per query head (its q rows and o columns, or its output norm),
 *   kv[l][g]     per KV head (its k/v rows; 0 for forward-only providers),
 *   mlp[prefix]  per neuron of every MLP (dense, each expert, the shared expert).
 * A KV group's score is the sum of its query heads' scores plus its kv score.
 */
import { layerNames } from '../../src/core/arch/names.js';
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import type { ArchSpec } from '../../src/core/arch/spec.js';
import type { TfModel } from '../../src/exec/autodiff/lower.js';
import type { Tapper } from '../../src/exec/stream/index.js';
import type { TapResult, TapSpec } from '../../src/exec/engine/index.js';
import { LlmcError } from '../../src/core/errors.js';
import { mlpsOf } from '../../src/core/arch/units.js';
import { identity, type LayerOrder } from './permute.js';

import { PROVIDERS, type ProviderName } from './options.js';

export { PROVIDERS, type ProviderName };

export interface UnitScores {
  head: Float64Array[];
  kv: Float64Array[];
  mlp: Record<string, Float64Array>;
}

/** Sum a per-element contribution over each unit's slices; `contrib(name)` gives |w| or |w·∇w|. */
async function sliceScores(spec: ArchSpec, contrib: (name: string) => Promise<Float32Array>): Promise<UnitScores> {
  const D = spec.hiddenSize;
  const hd = spec.headDim;
  const H = spec.numHeads;
  const G = spec.numKvHeads;
  const head: Float64Array[] = [];
  const kv: Float64Array[] = [];
  const mlp: Record<string, Float64Array> = {};
  const rowSums = (a: Float32Array, cols: number, unitRows: number, into: Float64Array) => {
    for (let i = 0; i < a.length; i++) into[Math.floor(i / cols / unitRows)] += a[i];
  };
  const colSums = (a: Float32Array, cols: number, unitCols: number, into: Float64Array) => {
    for (let i = 0; i < a.length; i++) into[Math.floor((i % cols) / unitCols)] += a[i];
  };
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerNames(l);
    const hs = new Float64Array(H);
    const ks = new Float64Array(G);
    rowSums(await contrib(n.q), D, hd, hs);
    colSums(await contrib(n.o), H * hd, hd, hs);
    rowSums(await contrib(n.k), D, hd, ks);
    rowSums(await contrib(n.v), D, hd, ks);
    head.push(hs);
    kv.push(ks);
    for (const m of mlpsOf(spec, l)) {
      const s = new Float64Array(m.width);
      rowSums(await contrib(m.gate), D, 1, s);
      rowSums(await contrib(m.up), D, 1, s);
      colSums(await contrib(m.down), m.width, 1, s);
      mlp[m.prefix] = s;
    }
  }
  return { head, kv, mlp };
}

/** Σ|W| over each unit's slices (weights only, no data). */
export function magnitudeScores(source: ModelSource): Promise<UnitScores> {
  return sliceScores(source.spec, async (name) => {
    const w = await source.readF32(name);
    for (let i = 0; i < w.length; i++) w[i] = Math.abs(w[i]);
    return w;
  });
}

/** The weight names whose gradients Taylor importance needs. */
export function unitWeightNames(spec: ArchSpec): string[] {
  const out: string[] = [];
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerNames(l);
    out.push(n.q, n.k, n.v, n.o);
    for (const m of mlpsOf(spec, l)) out.push(m.gate, m.up, m.down);
  }
  return out;
}

/**
 * ELMS / LLM-Pruner element-wise first-order Taylor: Σ|W ⊙ ∂L/∂W| over each unit's slices, from one
 * backward pass of the mean loss over the whole calibration batch (fp32).
 */
export async function taylorScores(model: TfModel, calib: number[][]): Promise<{ scores: UnitScores; loss: number }> {
  const names = unitWeightNames(model.source.spec);
  const { loss, grads } = await model.gradients(calib, names);
  const scores = await sliceScores(model.source.spec, async (name) => {
    const w = await model.source.readF32(name);
    const g = grads.get(name)!;
    for (let i = 0; i < w.length; i++) w[i] = Math.abs(w[i] * g[i]);
    return w;
  });
  return { scores, loss };
}

/**
 * Minitron-style forward-only importance from the engine's in-graph taps: per head Σ over tokens of
 * ‖head output‖² (before o_proj), per neuron Σ over tokens of |act(gate)·up| (experts: routed tokens).
 * The whole-model Engine or the layer-streamed one (a large model): the same taps.
 */
export async function activationScores(engine: Tapper, calib: number[][]): Promise<UnitScores> {
  return activationScoresOf(engine.spec, await engine.tap(calib, ACTIVATION_TAPS));
}

/** The taps activation importance reads. */
export const ACTIVATION_TAPS: TapSpec[] = [{ kind: 'head-output' }, { kind: 'mlp-act' }];

/** Activation importance from taps already taken (ACTIVATION_TAPS over the calibration batch, e.g. within a loss sweep). */
export function activationScoresOf(spec: ArchSpec, r: TapResult): UnitScores {
  const head: Float64Array[] = [];
  for (let l = 0; l < spec.numLayers; l++) {
    const h = r.headOutputs.get(`model.layers.${l}.self_attn`);
    if (!h) throw new LlmcError(`engine returned no head-output tap for layer ${l}`);
    head.push(Float64Array.from(h.sumSq));
  }
  const mlp: Record<string, Float64Array> = {};
  for (let l = 0; l < spec.numLayers; l++) {
    for (const m of mlpsOf(spec, l)) {
      const a = r.mlpActs.get(m.prefix);
      if (!a) throw new LlmcError(`engine returned no mlp-act tap for ${m.prefix}`);
      mlp[m.prefix] = Float64Array.from(a.absSum);
    }
  }
  return { head, kv: Array.from({ length: spec.numLayers }, () => new Float64Array(spec.numKvHeads)), mlp };
}

/** Indices sorted by descending score; ties keep the lower index first (stable, deterministic). */
export function descending(scores: ArrayLike<number>): number[] {
  return identity(scores.length).sort((a, b) => scores[b] - scores[a] || a - b);
}

/** Per-layer orders from scores: KV groups by group score, query heads inside each group, neurons. */
export function ordersFromScores(spec: ArchSpec, s: UnitScores, anchors: ReadonlySet<number>): LayerOrder[] {
  const G = spec.numKvHeads;
  const R = spec.numHeads / G;
  const out: LayerOrder[] = [];
  for (let l = 0; l < spec.numLayers; l++) {
    if (anchors.has(l)) continue; // anchors stay byte-identical
    const group = new Float64Array(G);
    for (let g = 0; g < G; g++) {
      group[g] = s.kv[l][g];
      for (let r = 0; r < R; r++) group[g] += s.head[l][g * R + r];
    }
    const groups = descending(group);
    const qInGroup = groups.map((g) => descending(s.head[l].subarray(g * R, (g + 1) * R)));
    const mlp: Record<string, number[]> = {};
    for (const m of mlpsOf(spec, l)) mlp[m.prefix] = descending(s.mlp[m.prefix]);
    out.push({ layer: l, groups, qInGroup, mlp });
  }
  return out;
}

/**
 * Accumulated Fisher information of each unit's mask (Kwon et al. 2022, "A Fast Post-Training
 * Pruning Framework for Transformers"): per batch b, the gradient of the loss w.r.t. a multiplicative
 * mask m_u on the unit's output at m = 1 is Σ W ⊙ ∂L/∂W over the unit's o_proj (head) or down_proj
 * (neuron) columns; the score is Σ_b (∂L_b/∂m_u)² over batches of `batch` sequences. A KV group's
 * score is its query heads' sum (kv = 0).
 */
export async function fisherScores(model: TfModel, seqs: number[][], batch: number, tick: () => void = () => {}): Promise<UnitScores> {
  const spec = model.source.spec;
  const hd = spec.headDim;
  const H = spec.numHeads;
  const L = spec.numLayers;
  const names: string[] = [];
  for (let l = 0; l < L; l++) {
    names.push(layerNames(l).o);
    for (const m of mlpsOf(spec, l)) names.push(m.down);
  }
  const weights = new Map<string, Float32Array>();
  for (const n of names) weights.set(n, await model.source.readF32(n));
  const head = Array.from({ length: L }, () => new Float64Array(H));
  const mlp: Record<string, Float64Array> = {};
  for (let l = 0; l < L; l++) for (const m of mlpsOf(spec, l)) mlp[m.prefix] = new Float64Array(m.width);
  /** Per column group of `unit` columns: Σ w·g, squared into `into`. */
  const accumulate = (w: Float32Array, g: Float32Array, cols: number, unit: number, into: Float64Array) => {
    const s = new Float64Array(cols / unit);
    for (let i = 0; i < w.length; i++) s[Math.floor((i % cols) / unit)] += w[i] * g[i];
    for (let u = 0; u < s.length; u++) into[u] += s[u] * s[u];
  };
  for (let i = 0; i < seqs.length; i += batch) {
    const { grads } = await model.gradients(seqs.slice(i, i + batch), names);
    for (let l = 0; l < L; l++) {
      const o = layerNames(l).o;
      accumulate(weights.get(o)!, grads.get(o)!, H * hd, hd, head[l]);
      for (const m of mlpsOf(spec, l)) accumulate(weights.get(m.down)!, grads.get(m.down)!, m.width, 1, mlp[m.prefix]);
    }
    tick();
  }
  return { head, kv: Array.from({ length: L }, () => new Float64Array(spec.numKvHeads)), mlp };
}

/**
 * Iterative importance: `orders` re-sorted inside `wider`'s kept prefixes by `scores` measured with
 * `wider` active (the narrower level then keeps the units that matter with its neighbours gone).
 * Positions past `wider`'s widths keep their places, so every larger level keeps its units (nesting).
 */
export function resortWithin(spec: ArchSpec, orders: LayerOrder[], wider: readonly { kvGroups: number; qHeadsPerGroup: number; ffn: number }[], s: UnitScores): LayerOrder[] {
  const R = spec.numHeads / spec.numKvHeads;
  const sortPrefix = (order: number[], n: number, score: (u: number) => number) => {
    const head = order.slice(0, n).sort((a, b) => score(b) - score(a) || a - b);
    return [...head, ...order.slice(n)];
  };
  return orders.map((o) => {
    const w = wider[o.layer];
    const hs = s.head[o.layer];
    // A kept group's score: its kept query heads (the others are masked at `wider`).
    const groupScore = new Map<number, number>();
    o.groups.forEach((g, pos) => {
      let v = s.kv[o.layer][g];
      for (let r = 0; r < w.qHeadsPerGroup; r++) v += hs[g * R + o.qInGroup[pos][r]];
      groupScore.set(g, v);
    });
    const qOf = new Map(o.groups.map((g, pos) => [g, sortPrefix(o.qInGroup[pos], w.qHeadsPerGroup, (r) => hs[g * R + r])]));
    const groups = sortPrefix(o.groups, w.kvGroups, (g) => groupScore.get(g)!);
    const mlp: Record<string, number[]> = {};
    for (const m of mlpsOf(spec, o.layer)) {
      const keep = m.elastic ? Math.min(w.ffn, m.width) : m.width;
      const sc = s.mlp[m.prefix];
      mlp[m.prefix] = sortPrefix(o.mlp[m.prefix], keep, (u) => sc[u]);
    }
    return { layer: o.layer, groups, qInGroup: groups.map((g) => qOf.get(g)!), mlp };
  });
}
