/**
 * Permutation-consistent unit reordering (SPEC §4.2): unit orders per layer, their expansion to
 * channel gathers, and the lazy ModelSource that applies them as tensors are read.
 *
 * Orders are gathers, new → old: new unit i is old unit order[i]. Heads are never split: a head's
 * head_dim channels move together, offsets inside the head are kept (RoPE acts inside a head).
 */
import { createHash } from 'node:crypto';
import { layerNames } from '../../src/core/arch/names.js';
import { gatherSource, type Gather, type ModelSource } from '../../src/core/checkpoint/source.js';
import { mlpsOf } from '../../src/core/arch/units.js';
import type { ArchSpec } from '../../src/core/arch/spec.js';
import type { LayerOrder } from '../../src/core/records/elastic.js';
import { LlmcError } from '../../src/core/errors.js';
import { Rng } from '../../src/core/util/rng.js';

export type { LayerOrder };

export const identity = (n: number): number[] => Array.from({ length: n }, (_, i) => i);

export function identityOrder(spec: ArchSpec, l: number): LayerOrder {
  const G = spec.numKvHeads;
  const R = spec.numHeads / G;
  return {
    layer: l,
    groups: identity(G),
    qInGroup: Array.from({ length: G }, () => identity(R)),
    mlp: Object.fromEntries(mlpsOf(spec, l).map((m) => [m.prefix, identity(m.width)])),
  };
}

/** Throws unless `p` is a permutation of [0, n). */
export function checkPermutation(p: ArrayLike<number>, n: number, what: string): void {
  if (p.length !== n) throw new LlmcError(`${what}: permutation has length ${p.length}, expected ${n}`);
  const seen = new Uint8Array(n);
  for (let i = 0; i < n; i++) {
    const v = p[i];
    if (!Number.isInteger(v) || v < 0 || v >= n || seen[v]) throw new LlmcError(`${what}: not a permutation of [0, ${n})`);
    seen[v] = 1;
  }
}

export function inversePermutation(p: ArrayLike<number>): Int32Array {
  const inv = new Int32Array(p.length);
  for (let i = 0; i < p.length; i++) inv[p[i]] = i;
  return inv;
}

/** Channel gathers over K/V rows (G·dh) and Q rows / O columns (H·dh). */
export function expandAttention(o: LayerOrder, headDim: number): { kv: Int32Array; q: Int32Array } {
  const G = o.groups.length;
  const R = o.qInGroup[0]?.length ?? 1;
  const kv = new Int32Array(G * headDim);
  const q = new Int32Array(G * R * headDim);
  for (let g = 0; g < G; g++) {
    const old = o.groups[g];
    for (let e = 0; e < headDim; e++) kv[g * headDim + e] = old * headDim + e;
    for (let r = 0; r < R; r++) {
      const oldHead = old * R + o.qInGroup[g][r];
      for (let e = 0; e < headDim; e++) q[(g * R + r) * headDim + e] = oldHead * headDim + e;
    }
  }
  return { kv, q };
}

export type TensorRewrite = { axis: 'rows' | 'cols'; perm: Int32Array };

/** Which tensors move and how, for a set of layer orders (identity layers are left out). */
export function rewritePlan(spec: ArchSpec, orders: LayerOrder[]): Map<string, TensorRewrite> {
  const plan = new Map<string, TensorRewrite>();
  const isIdentity = (p: ArrayLike<number>) => Array.prototype.every.call(p, (v: number, i: number) => v === i);
  for (const o of orders) {
    const G = spec.numKvHeads;
    const R = spec.numHeads / G;
    checkPermutation(o.groups, G, `layer ${o.layer} KV-group order`);
    if (o.qInGroup.length !== G) throw new LlmcError(`layer ${o.layer}: expected ${G} query-head orders`);
    o.qInGroup.forEach((p, g) => checkPermutation(p, R, `layer ${o.layer} group ${g} query-head order`));
    const { kv, q } = expandAttention(o, spec.headDim);
    const n = layerNames(o.layer);
    if (!isIdentity(q)) {
      plan.set(n.q, { axis: 'rows', perm: q });
      plan.set(n.o, { axis: 'cols', perm: q });
      if (spec.qkvBias) plan.set(n.qBias, { axis: 'rows', perm: q });
      // A norm over the whole projection: its weight moves with the channels; the mean of squares does not change.
      if (spec.qkNorm?.scope === 'all') plan.set(n.qNorm, { axis: 'rows', perm: q });
    }
    if (!isIdentity(kv)) {
      plan.set(n.k, { axis: 'rows', perm: kv });
      plan.set(n.v, { axis: 'rows', perm: kv });
      if (spec.qkNorm?.scope === 'all') plan.set(n.kNorm, { axis: 'rows', perm: kv });
      if (spec.qkvBias) {
        plan.set(n.kBias, { axis: 'rows', perm: kv });
        plan.set(n.vBias, { axis: 'rows', perm: kv });
      }
    }
    for (const m of mlpsOf(spec, o.layer)) {
      const p = o.mlp[m.prefix];
      if (!p) throw new LlmcError(`layer ${o.layer}: no neuron order for ${m.prefix}`);
      checkPermutation(p, m.width, `${m.prefix} neuron order`);
      if (isIdentity(p)) continue;
      const perm = Int32Array.from(p);
      plan.set(m.gate, { axis: 'rows', perm });
      plan.set(m.up, { axis: 'rows', perm });
      plan.set(m.down, { axis: 'cols', perm });
      if (spec.mlpBias) {
        plan.set(m.gate.replace(/\.weight$/, '.bias'), { axis: 'rows', perm });
        plan.set(m.up.replace(/\.weight$/, '.bias'), { axis: 'rows', perm });
        // down's bias lives on the hidden dimension: unchanged.
      }
    }
  }
  return plan;
}

/** The reordered model as a lazy view: rows and columns move as tensors are read (byte ranges survive). */
export function permuteSource(base: ModelSource, orders: LayerOrder[], label = 'reorder'): ModelSource {
  const plan = rewritePlan(base.spec, orders);
  const h = createHash('sha256');
  for (const [name, rw] of [...plan].sort((a, b) => (a[0] < b[0] ? -1 : 1))) {
    h.update(name).update(rw.axis).update(Buffer.from(rw.perm.buffer, rw.perm.byteOffset, rw.perm.byteLength));
  }
  const gathers = new Map<string, Gather>([...plan].map(([name, rw]) => [name, rw.axis === 'rows' ? { rows: rw.perm } : { cols: rw.perm }]));
  return gatherSource(base, { label, paramsHash: h.digest('hex'), gathers });
}

/** Seeded random unit orders: the baseline the importance orders must beat (tests, bench). */
export function randomOrders(src: ModelSource, seed: number, layers: number[]): LayerOrder[] {
  const rng = new Rng(seed);
  const s = src.spec;
  const R = s.numHeads / s.numKvHeads;
  return layers.map((l) => ({
    layer: l,
    groups: Array.from(rng.permutation(s.numKvHeads)),
    qInGroup: Array.from({ length: s.numKvHeads }, () => Array.from(rng.permutation(R))),
    mlp: Object.fromEntries(mlpsOf(s, l).map((m) => [m.prefix, Array.from(rng.permutation(m.width))])),
  }));
}
