/**
 * Layer-streamed calibration through the profile cache: each piece's tap statistics and the hidden
 * states it hands on are one profile (`stream-piece`), keyed by the checkpoint, the piece's ops, the
 * taps and the token ids. A second compile reads every piece; one stopped part way (Ctrl-C) reads the
 * pieces it finished and runs from the first one missing. Values round-trip exactly (float32 in
 * float64 arrays).
 */
import { createHash } from 'node:crypto';
import type { ModelSource } from '../core/checkpoint/source.js';
import { stableJson } from '../core/util/stable-json.js';
import type { PieceHook, PieceResult } from '../exec/stream/engine.js';
import { carriedOf } from '../exec/stream/spill.js';
import { emptyTapResult, type TapResult } from '../exec/engine/taps.js';
import { cachedProfile, type ProfileCache, type ProfileData } from './store.js';

const sha = (x: unknown) => createHash('sha256').update(stableJson(x)).digest('hex');

const MAPS = ['linearInputs', 'linearOutputs', 'headOutputs', 'mlpActs'] as const;
const FIELDS = ['absMax', 'sumSq', 'sum', 'absSum'] as const;

type Entry = { layer: number; tokens: number } & Partial<Record<(typeof FIELDS)[number], Float32Array | Float64Array>> & { top?: { values: Float32Array; channels: Int32Array } };

function toProfile(r: PieceResult): ProfileData {
  const arrays: Record<string, Float64Array> = {};
  const entries: [string, string, number, number][] = [];
  for (const m of MAPS) {
    for (const [key, e] of r.taps[m] as Map<string, Entry>) {
      entries.push([m, key, e.layer, e.tokens]);
      for (const f of FIELDS) if (e[f]) arrays[`${m}|${key}|${f}`] = Float64Array.from(e[f]!);
      if (e.top) {
        arrays[`${m}|${key}|top`] = Float64Array.from(e.top.values);
        arrays[`${m}|${key}|topChannels`] = Float64Array.from(e.top.channels);
      }
    }
  }
  const carried: [number, string][] = [];
  for (let i = 0; i < r.carried.length; i++) {
    r.carried.get(i).forEach((x, v) => {
      carried.push([i, v]);
      arrays[`carried|${i}|${v}`] = Float64Array.from(x);
    });
  }
  return { meta: { entries, carried }, arrays };
}

function fromProfile(p: ProfileData): PieceResult {
  const taps: TapResult = emptyTapResult();
  for (const [m, key, layer, tokens] of p.meta.entries as [(typeof MAPS)[number], string, number, number][]) {
    const e: Entry = { layer, tokens };
    const a = (f: string) => p.arrays[`${m}|${key}|${f}`];
    if (a('absMax')) e.absMax = Float32Array.from(a('absMax'));
    for (const f of ['sumSq', 'sum', 'absSum'] as const) if (a(f)) e[f] = Float64Array.from(a(f));
    if (a('top')) e.top = { values: Float32Array.from(a('top')), channels: Int32Array.from(a('topChannels')) };
    (taps[m] as Map<string, Entry>).set(key, e);
  }
  const carried: Map<string, Float32Array>[] = [];
  for (const [i, v] of p.meta.carried as [number, string][]) (carried[i] ??= new Map()).set(v, Float32Array.from(p.arrays[`carried|${i}|${v}`]));
  return { taps, carried: carriedOf(carried) };
}

/** The piece hook of `source` over `cache` (none without a cache: every piece computes). */
export async function pieceCache(source: ModelSource, cache: ProfileCache | undefined): Promise<PieceHook | undefined> {
  if (!cache) return undefined;
  const checkpoint = await source.identity();
  return async (seg, taps, ids, run) => {
    const p = await cachedProfile(cache, 'stream-piece', { checkpoint, piece: seg.id, ops: sha(seg.graph.ops), taps, ids: sha(ids) }, async () => toProfile(await run()));
    return fromProfile(p);
  };
}
