/**
 * EdgeMoE's bit-width selection (paper §3.2, SPEC §1.4 / §4.3), over any items (experts, or their
 * projections), returning only verified plans:
 *  1. uniform losses L_b on the acceptance split for every candidate b (fewest bits first);
 *     b_hi = the first b with L_b ≤ P, b_lo the one before it (none: fail with the closest);
 *  2. importance of each item: the loss on the ranking split with that item alone at b_lo, the rest
 *     at b_hi (least important first; ties by key);
 *  3. the largest K such that the first K items at b_lo, the rest at b_hi, still meet P on the
 *     acceptance split: a binary search whose invariant keeps cfg(lo) verified (K = 0 is uniform
 *     b_hi). The prototype returned its first success unchecked (SPEC §1.4's bug): here every
 *     returned plan was evaluated and met P.
 * The oracle is memoized by assignment: at most 1 + |B| + N + ⌈log2(N+1)⌉ distinct evaluations.
 */
import { LlmcError } from '../../src/core/errors.js';

export type Split = 'rank' | 'accept';

/** Relative loss of an assignment (per item, a candidate index into `formats`). */
export type Oracle = (assignment: readonly number[], split: Split) => Promise<number>;

export interface EdgemoeResult {
  assignment: number[];
  loss: number;
  bLo: number | null;
  bHi: number;
  uniformLoss: number[];
  /** Items, least important first, with their importance losses. */
  importance: { item: number; loss: number }[];
  K: number;
  oracleCalls: number;
}

/** Wrap an oracle so equal (assignment, split) pairs are evaluated once; counts distinct calls. */
export function memoize(oracle: Oracle): Oracle & { calls: () => number } {
  const seen = new Map<string, Promise<number>>();
  const f = (a: readonly number[], split: Split) => {
    const k = `${split}:${a.join(',')}`;
    let v = seen.get(k);
    if (!v) seen.set(k, (v = oracle(a, split)));
    return v;
  };
  return Object.assign(f, { calls: () => seen.size });
}

/**
 * `n` items, `B` candidates (indices 0..B-1, fewest bits first), loss bound P; `keys` break ties in
 * the importance order.
 */
export async function edgemoeSearch(n: number, B: number, P: number, oracle: Oracle, keys: readonly string[]): Promise<EdgemoeResult> {
  const o = memoize(oracle);
  const uniform = (b: number) => new Array<number>(n).fill(b);
  const uniformLoss: number[] = [];
  for (let b = 0; b < B; b++) uniformLoss.push(await o(uniform(b), 'accept'));
  const hi = uniformLoss.findIndex((l) => l <= P);
  if (hi < 0) {
    const best = Math.min(...uniformLoss);
    throw new LlmcError(`expert-bits: no uniform candidate meets maxLoss=${P} (the closest, ${uniformLoss.indexOf(best)}, loses ${best.toPrecision(4)}); raise maxLoss or add a wider format`);
  }
  if (hi === 0) return { assignment: uniform(0), loss: uniformLoss[0], bLo: null, bHi: 0, uniformLoss, importance: [], K: n, oracleCalls: o.calls() };
  const lo = hi - 1;
  const importance: { item: number; loss: number }[] = [];
  for (let i = 0; i < n; i++) {
    const a = uniform(hi);
    a[i] = lo;
    importance.push({ item: i, loss: await o(a, 'rank') });
  }
  importance.sort((a, b) => a.loss - b.loss || (keys[a.item] < keys[b.item] ? -1 : keys[a.item] > keys[b.item] ? 1 : 0));
  const cfg = (K: number) => {
    const a = uniform(hi);
    for (let k = 0; k < K; k++) a[importance[k].item] = lo;
    return a;
  };
  let left = 0;
  let right = n;
  let loss = uniformLoss[hi];
  while (left < right) {
    const mid = (left + right + 1) >> 1;
    const l = await o(cfg(mid), 'accept');
    if (l <= P) {
      left = mid;
      loss = l;
    } else right = mid - 1;
  }
  return { assignment: cfg(left), loss, bLo: lo, bHi: hi, uniformLoss, importance, K: left, oracleCalls: o.calls() };
}
