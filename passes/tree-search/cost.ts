/**
 * The step-time model of speculative decoding (SPEC §4 CostModel, §5.3): per context bucket, the
 * verification time as a step function of the tree size (a table: the time at n is the time of the
 * smallest tabulated size ≥ n, so tabulated sizes are the step edges), the time of one draft call
 * by batch size, optional additive per-node costs (a token-by-token draft, sparse-attention work),
 * and optionally a second processing unit for Ghidorah's column split (§5.4).
 */
import { depthsOf, expansionPlan, type TreeShape } from '../../src/core/records/tree.js';

export interface UnitTable {
  name: string;
  /** [ctx bucket][size index] milliseconds of one verification on this unit alone. */
  verifyMs: number[][];
  /** Slowdown when both units run at once (GH contention), ≥ 1. */
  contention: number;
}

export interface LatencyModel {
  /** Where the numbers come from: `measured-ts`, `measured-ort`, or a file. */
  source: string;
  device: string;
  /** Context buckets (ascending). */
  ctx: number[];
  /** Tabulated tree sizes (ascending, the first is 1). */
  verifyN: number[];
  /** [ctx bucket][size index]: one target verification of a tree of that many nodes. */
  verifyMs: number[][];
  /** Tabulated draft batch sizes (ascending, the first is 1). */
  draftBatch: number[];
  /** [ctx bucket][batch index]: one draft forward over that many tokens. */
  draftMs: number[][];
  /** Added per draft node (a token-by-token draft decoder, LC). */
  perNodeMs: number;
  /** Added per non-zero of the tree mask (sparse attention). */
  perNnzMs: number;
  /** Two units for a hetero partition (GH): the verification splits between them. */
  units?: [UnitTable, UnitTable];
  /** Synchronisation per barrier (one per linear layer) when split. */
  syncMs?: number;
  /** Linear layers of the target (barriers per step when split). */
  barriers?: number;
  /** Output columns of each linear layer and the column tile: the split is priced after tile alignment. */
  columns?: number[];
  tile?: number;
}

/** The value of a step table at `x`: the entry of the smallest tabulated size ≥ x (the last beyond). */
export function stepAt(sizes: readonly number[], ms: readonly number[], x: number): number {
  for (let i = 0; i < sizes.length; i++) if (sizes[i] >= x) return ms[i];
  return ms[ms.length - 1];
}

/** Index of the context bucket for `ctx`. */
export function bucketOf(m: LatencyModel, ctx: number): number {
  const i = m.ctx.findIndex((c) => c >= ctx);
  return i < 0 ? m.ctx.length - 1 : i;
}

/** Verification time of n nodes (split over two units when the model has them and the split pays). */
export function verifyMs(m: LatencyModel, n: number, b: number): number {
  if (!m.units) return stepAt(m.verifyN, m.verifyMs[b], n);
  return splitStep(m, stepAt(m.verifyN, m.units[0].verifyMs[b], n), stepAt(m.verifyN, m.units[1].verifyMs[b], n)).ms;
}

/**
 * The split step as it will run: unit 1's share r* (from the solo times and contention), then each
 * linear's columns aligned to the tile; a linear takes the time of its slower side (its share of the
 * step by columns), and only linears that really split pay a barrier. When the aligned split is not
 * faster than the faster unit alone, the step runs on that unit (`share` 1 or 0, no barriers).
 */
export function splitStep(m: LatencyModel, T1: number, T2: number, share?: number): { share: number; ms: number; split: boolean } {
  const [u1, u2] = m.units!;
  const r = share ?? partitionTime(T1, T2, u1.contention, u2.contention).share;
  const cols = m.columns?.length ? m.columns : null;
  let ms: number;
  let barriers: number;
  if (!cols) {
    ms = Math.max(u1.contention * r * T1, u2.contention * (1 - r) * T2);
    barriers = r > 0 && r < 1 ? (m.barriers ?? 0) : 0;
  } else {
    const total = cols.reduce((a, x) => a + x, 0);
    ms = 0;
    barriers = 0;
    for (const N of cols) {
      const { first } = splitColumns(N, r, m.tile ?? 1);
      const a = first[1] / N;
      const w = N / total;
      if (a > 0 && a < 1) {
        barriers++;
        ms += w * Math.max(u1.contention * a * T1, u2.contention * (1 - a) * T2);
      } else ms += w * (a === 1 ? T1 : T2);
    }
  }
  ms += (m.syncMs ?? 0) * barriers;
  const alone = Math.min(T1, T2);
  if (ms >= alone) return { share: T1 <= T2 ? 1 : 0, ms: alone, split: false };
  return { share: r, ms, split: true };
}

/** Draft time of a tree: one draft call per expanded level (its batch = the nodes expanded there), plus per-node costs. */
export function draftMs(m: LatencyModel, t: TreeShape, b: number): number {
  if (t.parent.length === 1) return 0;
  let ms = 0;
  for (const lv of expansionPlan(t.parent)) ms += stepAt(m.draftBatch, m.draftMs[b], lv.nodes.length);
  return ms + m.perNodeMs * (t.parent.length - 1);
}

export function stepMs(m: LatencyModel, t: TreeShape, b: number): number {
  const nnz = m.perNnzMs ? depthsOf(t.parent).reduce((a, d) => a + d + 1, 0) : 0;
  return draftMs(m, t, b) + verifyMs(m, t.parent.length, b) + m.perNnzMs * nnz;
}

/** Sizes worth considering: the right edges of the verification steps up to nMax (n where n+1 costs more, and nMax). */
export function stepEdges(m: LatencyModel, nMax: number, b: number): number[] {
  const out: number[] = [];
  for (let n = 1; n <= nMax; n++) if (n === nMax || verifyMs(m, n + 1, b) > verifyMs(m, n, b)) out.push(n);
  return out;
}

/**
 * Column split of one step between two units with solo times T1 (all on unit 1) and T2, contention
 * κ: unit 1 takes share r, t(r) = max(κ1·r·T1, κ2·(1−r)·T2), minimal at r* = κ2T2/(κ1T1 + κ2T2).
 */
export function partitionTime(T1: number, T2: number, k1 = 1, k2 = 1): { share: number; ms: number } {
  const a = k1 * T1;
  const c = k2 * T2;
  if (a + c === 0) return { share: 1, ms: 0 };
  return { share: c / (a + c), ms: (a * c) / (a + c) };
}

/**
 * GH's contention-aware hill climb: from r0, step by δ while the (measured or modelled) concurrent
 * step time falls; halve δ when neither direction helps.
 */
export function hillClimb(f: (r: number) => number, r0: number, delta = 0.05, minDelta = 1e-4): { share: number; ms: number } {
  let r = Math.min(1, Math.max(0, r0));
  let best = f(r);
  for (let d = delta; d >= minDelta; ) {
    const up = Math.min(1, r + d);
    const down = Math.max(0, r - d);
    const fu = f(up);
    const fd = f(down);
    if (fu < best && fu <= fd) [r, best] = [up, fu];
    else if (fd < best) [r, best] = [down, fd];
    else d /= 2;
  }
  return { share: r, ms: best };
}

/** [0, N) split at share r of the columns, aligned to `tile`: the two ranges tile [0, N) exactly. */
export function splitColumns(N: number, r: number, tile: number): { first: [number, number]; second: [number, number] } {
  const a = Math.min(N, Math.max(0, Math.round((r * N) / tile) * tile));
  return { first: [0, a], second: [a, N] };
}
