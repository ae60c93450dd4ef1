/**
 * Layer-streamed calibration through the profile cache: each piece's tap statistics and the hidden
 * states it hands on are one profile (`stream-piece`), keyed by the checkpoint, the piece's ops, the
 * taps and the token ids. A second compile reads every piece; one stopped part way (Ctrl-C) reads the
 * pieces it finished and runs from the first one missing. Values round-trip exactly: statistics as
 * float64, the carried hidden states as the float32 they are (half the bytes of float64).
 *
 * A loss sweep (StreamEngine.losses: the model and its branches together) keeps only its latest
 * point (`stream-sweep`, replaced after every piece): its states are one calibration batch per
 * variant, too many to keep per piece, and only the latest is needed to continue.
 */
import { createHash } from 'node:crypto';
import type { ModelSource } from '../core/checkpoint/source.js';
import { stableJson } from '../core/util/stable-json.js';
import { promises as fsp } from 'node:fs';
import type { PieceHook, PieceResult, SweepPoint, SweepResume } from '../exec/stream/engine.js';
import { carriedOf } from '../exec/stream/spill.js';
import { emptyTapResult, type TapResult } from '../exec/engine/taps.js';
import { cachedProfile, cacheHandle, loadProfile, profileKey, profilePaths, readsCache, saveProfile, writesCache, type ProfileCache, type ProfileData } from './store.js';

const sha = (x: unknown) => createHash('sha256').update(stableJson(x)).digest('hex');

const MAPS = ['linearInputs', 'linearOutputs', 'headOutputs', 'mlpActs'] as const;
const FIELDS = ['absMax', 'sumSq', 'sum', 'absSum'] as const;

type Entry = { layer: number; tokens: number } & Partial<Record<(typeof FIELDS)[number], Float32Array | Float64Array>> & { top?: { values: Float32Array; channels: Int32Array } };

function toProfile(r: PieceResult): ProfileData {
  const { arrays, entries } = tapArrays(r.taps);
  const f32: Record<string, Float32Array> = {};
  const carried: [number, string][] = [];
  for (let i = 0; i < r.carried.length; i++) {
    r.carried.get(i).forEach((x, v) => {
      carried.push([i, v]);
      f32[`carried|${i}|${v}`] = x;
    });
  }
  return { meta: { entries, carried }, arrays, f32 };
}

/** A TapResult's statistics as named float64 arrays and the entries that name them. */
function tapArrays(taps: TapResult): { arrays: Record<string, Float64Array>; entries: [string, string, number, number][] } {
  const arrays: Record<string, Float64Array> = {};
  const entries: [string, string, number, number][] = [];
  for (const m of MAPS) {
    for (const [key, e] of taps[m] as Map<string, Entry>) {
      entries.push([m, key, e.layer, e.tokens]);
      for (const f of FIELDS) if (e[f]) arrays[`${m}|${key}|${f}`] = Float64Array.from(e[f]!);
      if (e.top) {
        arrays[`${m}|${key}|top`] = Float64Array.from(e.top.values);
        arrays[`${m}|${key}|topChannels`] = Float64Array.from(e.top.channels);
      }
    }
  }
  return { arrays, entries };
}

function fromProfile(p: ProfileData): PieceResult {
  const taps = tapsOf(p);
  const carried: Map<string, Float32Array>[] = [];
  for (const [i, v] of p.meta.carried as [number, string][]) (carried[i] ??= new Map()).set(v, carriedArray(p, `carried|${i}|${v}`));
  return { taps, carried: carriedOf(carried) };
}

/** A stored carried value: float32 as written (or float64 in an entry written before float32 storage). */
const carriedArray = (p: ProfileData, name: string): Float32Array => p.f32?.[name] ?? Float32Array.from(p.arrays[name]);

function tapsOf(p: ProfileData): TapResult {
  const taps: TapResult = emptyTapResult();
  for (const [m, key, layer, tokens] of p.meta.entries as [(typeof MAPS)[number], string, number, number][]) {
    const e: Entry = { layer, tokens };
    const a = (f: string) => p.arrays[`${m}|${key}|${f}`];
    if (a('absMax')) e.absMax = Float32Array.from(a('absMax'));
    for (const f of ['sumSq', 'sum', 'absSum'] as const) if (a(f)) e[f] = Float64Array.from(a(f));
    if (a('top')) e.top = { values: Float32Array.from(a('top')), channels: Int32Array.from(a('topChannels')) };
    (taps[m] as Map<string, Entry>).set(key, e);
  }
  return taps;
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

/**
 * The resume store of one loss sweep (StreamEngine.losses) over `cache`, named by `sweep` (what the
 * caller's result is keyed by: the checkpoint, the calibration, the branches): the latest point is
 * one `stream-sweep` profile, the one before it removed once the next is stored, and the last one
 * removed when the sweep ends. Undefined without a cache.
 */
export async function sweepResume(source: ModelSource, cache: ProfileCache | undefined, sweep: Record<string, unknown>, pieces: number): Promise<SweepResume | undefined> {
  const h = cacheHandle(cache);
  if (!h) return undefined;
  const checkpoint = await source.identity();
  const keyOf = (piece: number) => ({ checkpoint, sweep: sha(sweep), piece });
  const remove = async (piece: number) => {
    const p = profilePaths(h.dir, 'stream-sweep', profileKey('stream-sweep', keyOf(piece)));
    await Promise.all([fsp.rm(p.json, { force: true }), fsp.rm(p.bin, { force: true })]);
  };
  return {
    async load(): Promise<SweepPoint | null> {
      if (!readsCache(h)) return null;
      for (let piece = pieces - 1; piece >= 0; piece--) {
        const p = await loadProfile(h.dir, 'stream-sweep', keyOf(piece));
        if (!p) continue;
        const m = p.meta as { states: (string[][] | null)[]; sums: number[]; counts: number[] };
        const states = m.states.map((st, k) => st && st.map((vs, bi) => new Map(vs.map((v) => [v, carriedArray(p, `s|${k}|${bi}|${v}`)]))));
        return { piece, states, sums: m.sums, counts: m.counts, taps: tapsOf(p) };
      }
      return null;
    },
    async save(point) {
      if (!writesCache(h)) return;
      const { arrays, entries } = tapArrays(point.taps);
      const f32: Record<string, Float32Array> = {};
      const states = point.states.map((st, k) => st && st.map((m, bi) => [...m].map(([v, x]) => ((f32[`s|${k}|${bi}|${v}`] = x), v))));
      await saveProfile(h.dir, 'stream-sweep', keyOf(point.piece), { meta: { entries, states, sums: point.sums, counts: point.counts }, arrays, f32 });
      if (point.piece > 0) await remove(point.piece - 1);
    },
    async clear() {
      if (!writesCache(h)) return;
      for (let piece = 0; piece < pieces; piece++) await remove(piece);
    },
  };
}
