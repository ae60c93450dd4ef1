/**
 * Calibration and held-out token sequences as a cached profile, so every pass (and `llmc report`)
 * measures on the same ids. Without text they are sampled from the model itself (data-free
 * calibration, src/calibration), the held-out set from a derived seed.
 */
import { heldOutSequences, selfGeneratedSequences } from '../calibration/index.js';
import type { ModelSource } from '../checkpoint/source.js';
import { Engine } from '../engine/index.js';
import { cachedProfile } from './store.js';

export interface CalibrationSpec {
  source: 'self-generated';
  count: number;
  length: number;
  seed: number;
  /** Held-out sequences (same length, derived seed). */
  heldOut: number;
}

export interface CalibrationSet {
  spec: CalibrationSpec;
  calib: number[][];
  heldOut: number[][];
  /** The profile key (names this exact set in manifests and reports). */
  key: string;
}

const split = (flat: Float64Array, length: number): number[][] => {
  const out: number[][] = [];
  for (let i = 0; i < flat.length; i += length) out.push(Array.from(flat.subarray(i, i + length)));
  return out;
};

/** The calibration set of `source` for `spec`, computed once per (checkpoint, spec) when cached. */
export async function calibrationSet(source: ModelSource, spec: CalibrationSpec, opts: { cacheDir?: string; engine?: Engine } = {}): Promise<CalibrationSet> {
  const profile = await cachedProfile(opts.cacheDir, 'calibration', { checkpoint: await source.identity(), ...spec }, async () => {
    const engine = opts.engine ?? (await Engine.open(source));
    try {
      const gen = { count: spec.count, length: spec.length, seed: spec.seed };
      const calib = await selfGeneratedSequences(engine, gen);
      const held = spec.heldOut > 0 ? await heldOutSequences(engine, { ...gen, count: spec.heldOut }) : [];
      return { meta: { ...spec }, arrays: { calib: Float64Array.from(calib.flat()), heldOut: Float64Array.from(held.flat()) } };
    } finally {
      if (!opts.engine) await engine.close();
    }
  });
  return { spec, calib: split(profile.arrays.calib, spec.length), heldOut: split(profile.arrays.heldOut, spec.length), key: profile.key };
}
