/**
 * The activation profile of every linear of the decoder layers, input and output side, measured as
 * reductions inside the engine's graph (src/exec/onnx/lower.ts taps): per channel max|x|, Σx, Σx²,
 * and the k elements of largest |x| of each forward pass with their channels, k = n − ⌊0.999·n⌋ + 1
 * for the whole set's n elements. Merged over passes the kept elements are the exact top k of the
 * calibration set, so its 99.9th percentile and every outlier count at that threshold follow in one
 * pass, while only k values per tensor are ever held (never the activations).
 */
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import type { ModelGraph, TapPoint } from '../../src/core/ir/ir.js';
import { float32Bytes, openTapper, streamSettings, type Tapper } from '../../src/exec/stream/index.js';
import { pieceCache } from '../../src/measure/stream-cache.js';
import type { LinearInputStats } from '../../src/exec/engine/taps.js';
import { cachedProfile, type ProfileCache } from '../../src/measure/store.js';
import type { Progress } from '../../src/core/util/progress.js';

export type Side = 'input' | 'output';

/** What the engine measured on one side of one linear. */
export interface RawSide {
  weight: string;
  side: Side;
  layer: number;
  channels: number;
  tokens: number;
  absMax: Float64Array;
  sum: Float64Array;
  sumSq: Float64Array;
  /** The k largest-|x| elements over the set (signed, largest first) and their channels. */
  top: Float64Array;
  topChannels: Float64Array;
}

/** Elements kept so that the value at ascending index ⌊0.999·n⌋ − 1 is among them: n − ⌊0.999·n⌋ + 1. */
export const topCount = (n: number): number => n - Math.floor(0.999 * n) + 1;

/** The linear-input / linear-output tap points of the decoder layers (the lm_head runs in float on the CPU). */
export function linearPoints(graph: ModelGraph): TapPoint[] {
  const L = graph.spec.numLayers;
  return graph.taps.filter((t) => (t.kind === 'linear-input' || t.kind === 'linear-output') && t.layer < L && t.mask === null);
}

const FIELDS = ['absMax', 'sum', 'sumSq', 'top', 'topChannels'] as const;

/**
 * The profiles stream from 64 MiB of float32 weights (≈ 16M parameters), far below the engine-wide
 * threshold, unless --stream-above says otherwise: one sweep of reductions costs less layer by layer
 * than in the whole-model session (outliers → qnn, same bytes written: llama-30M 3.9 against 4.5
 * CPU-s and 0.26 against 0.82 GB; llama-100M 8.2–8.7 against 10.3–11.5 CPU-s and 0.34–0.37 against
 * 1.95–1.98 GB; docs/scale.md).
 */
export const PROFILE_STREAM_ABOVE_BYTES = 64 * 2 ** 20;

/** Measure (or read from the profile store) every linear's two sides on `calib`. */
export async function measureLinears(
  source: ModelSource,
  graph: ModelGraph,
  calib: { calib: number[][]; key: string },
  opts: { cacheDir?: ProfileCache; progress?: Progress; engine?: () => Promise<Tapper> },
): Promise<RawSide[]> {
  const points = linearPoints(graph);
  const tokens = calib.calib.reduce((a, s) => a + s.length, 0);
  const maxC = Math.max(...points.map((p) => p.channels));
  const prof = await cachedProfile(
    opts.cacheDir,
    'outlier-stats',
    { checkpoint: await source.identity(), calibration: calib.key, points: points.map((p) => `${p.kind}:${p.key}:${p.value}:${p.channels}`), percentile: 99.9 },
    async () => {
      // without a shared engine: a large model streams layer by layer (the same statistics)
      const stream = streamSettings().aboveBytes === undefined && float32Bytes(source.spec) > PROFILE_STREAM_ABOVE_BYTES ? true : undefined;
      const own = opts.engine ? null : await openTapper(source, { graph, progress: opts.progress, pieces: await pieceCache(source, opts.cacheDir), stream });
      const engine: Tapper = own ?? (await opts.engine!());
      try {
        if (!own) opts.progress?.start('outliers: profiling linears', 1);
        const top = topCount(tokens * maxC);
        const layers = Array.from({ length: graph.spec.numLayers }, (_, l) => l);
        const r = await engine.tap(calib.calib, [
          { kind: 'linear-input', layers, sums: true, top },
          { kind: 'linear-output', layers, sums: true, top },
        ]);
        if (!own) opts.progress?.done();
        const arrays: Record<string, Float64Array> = {};
        for (const p of points) {
          const s = (p.kind === 'linear-input' ? r.linearInputs : r.linearOutputs).get(p.key) as LinearInputStats;
          const k = topCount(tokens * p.channels);
          const prefix = `${p.key}|${p.kind === 'linear-input' ? 'input' : 'output'}`;
          arrays[`${prefix}|absMax`] = Float64Array.from(s.absMax);
          arrays[`${prefix}|sum`] = s.sum!;
          arrays[`${prefix}|sumSq`] = s.sumSq;
          arrays[`${prefix}|top`] = Float64Array.from(s.top!.values.subarray(0, k));
          arrays[`${prefix}|topChannels`] = Float64Array.from(s.top!.channels.subarray(0, k));
        }
        return { meta: { tokens, note: 'per side: per-channel max|x|, Σx, Σx², and the exact top n−⌊0.999n⌋+1 elements by |x| (signed) with their channels' }, arrays };
      } finally {
        await own?.close();
      }
    },
  );
  return points.map((p) => {
    const side: Side = p.kind === 'linear-input' ? 'input' : 'output';
    const prefix = `${p.key}|${side}`;
    const a = Object.fromEntries(FIELDS.map((f) => [f, prof.arrays[`${prefix}|${f}`]])) as Record<(typeof FIELDS)[number], Float64Array>;
    return { weight: p.key, side, layer: p.layer, channels: p.channels, tokens: prof.meta.tokens as number, ...a };
  });
}
