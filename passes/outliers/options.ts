/** Options of the outliers pass (`--opt outliers.key=value`). */
import { UsageError } from '../../src/core/errors.js';
import type { OptionSchema, OptionSpec } from '../../src/core/pipeline/options.js';
import type { TargetDescriptor } from '../../src/core/pipeline/target.js';
import type { OutlierScales } from '../../src/core/records/outliers.js';

/** The decision options are the record's fields of the same names (documented there). */
export interface OutliersOptions extends Pick<OutlierScales, 'mode' | 'keep' | 'tau' | 'policy' | 'coverage' | 'a16'> {
  /** hadamard: fold norm γ and rotate the residual stream and the down_proj inputs before profiling (QuaRot-style). */
  rotate: 'none' | 'hadamard';
  calibCount: number;
  calibLength: number;
  calibText: string | null;
  seed: number;
  heldOut: number;
}

const SPECS: readonly OptionSpec[] = [
  { key: 'mode', help: 'rank (shadow on the most important linears) | threshold (shadow where max/p99.9 ≥ tau)', default: 'rank' },
  { key: 'keep', help: 'rank mode: share of linears that keep shadow, by importance (0 = none, 1 = all)', default: '0.15' },
  { key: 'tau', help: 'ρ = max/p99.9 threshold (threshold mode; policy auto)', default: '5' },
  { key: 'policy', help: 'sides without shadow: auto (widen when ρ < tau, else clip) | clip (T = p99.9) | widen (T = max)', default: 'auto' },
  { key: 'coverage', help: 'hot channels: the fewest covering this share of the outliers', default: '0.8' },
  { key: 'a16', help: 'none | flagged (the sides that would get shadow use 16-bit activations instead: W8A16) | all (every activation 16-bit, int16 Q/DQ: W8A16 throughout)', default: 'none' },
  { key: 'rotate', help: 'none | hadamard (fold norm γ, rotate the residual stream, online Hadamard before down_proj)', default: 'none' },
  { key: 'calib', help: 'calibration sequences', default: '10' },
  { key: 'calibLength', help: 'tokens per calibration sequence', default: '64' },
  { key: 'calibText', help: "a text file to calibrate on (needs the model's tokenizer), or token ids as JSON [[1, 5, ...], ...]; default: sequences sampled from the model" },
  { key: 'seed', help: 'calibration seed', default: '42' },
  { key: 'heldOut', help: 'held-out sequences (drawn with the calibration set; quality checks use them)', default: '10' },
];

const int = (key: string, v: string, min: number) => {
  if (!/^\d+$/.test(v.trim()) || Number(v) < min) throw new UsageError(`outliers.${key} must be an integer ≥ ${min}, got "${v}"`);
  return Number(v);
};
const num = (key: string, v: string, lo: number, hi: number, what: string) => {
  const x = Number(v.trim());
  if (v.trim() === '' || !Number.isFinite(x) || x < lo || x > hi) throw new UsageError(`outliers.${key} must be ${what}, got "${v}"`);
  return x;
};
const oneOf = <T extends string>(key: string, v: string | undefined, list: readonly T[]): T => {
  if (v === undefined) return list[0];
  const hit = list.find((x) => x === v.trim());
  if (!hit) throw new UsageError(`outliers.${key} must be one of ${list.join(', ')}, got "${v}"`);
  return hit;
};

export function parseOutliersOptions(raw: Readonly<Record<string, string>>): OutliersOptions {
  return {
    mode: oneOf('mode', raw.mode, ['rank', 'threshold'] as const),
    keep: raw.keep === undefined ? 0.15 : num('keep', raw.keep, 0, 1, 'a share in [0, 1]'),
    tau: raw.tau === undefined ? 5 : num('tau', raw.tau, 1, 1e9, 'a number ≥ 1'),
    policy: oneOf('policy', raw.policy, ['auto', 'clip', 'widen'] as const),
    coverage: raw.coverage === undefined ? 0.8 : num('coverage', raw.coverage, 1e-9, 1, 'a share in (0, 1]'),
    a16: oneOf('a16', raw.a16, ['none', 'flagged', 'all'] as const),
    rotate: oneOf('rotate', raw.rotate, ['none', 'hadamard'] as const),
    calibCount: raw.calib === undefined ? 10 : int('calib', raw.calib, 1),
    calibLength: raw.calibLength === undefined ? 64 : int('calibLength', raw.calibLength, 2),
    calibText: raw.calibText?.trim() || null,
    seed: raw.seed === undefined ? 42 : int('seed', raw.seed, 0),
    heldOut: raw.heldOut === undefined ? 10 : int('heldOut', raw.heldOut, 0),
  };
}

export const OUTLIERS_OPTIONS: OptionSchema<OutliersOptions> = { specs: SPECS, parse: parseOutliersOptions };

/** Static activation scales only mean something to a target that writes quantize/dequantize pairs. */
export function checkOutliers(_o: OutliersOptions, target: TargetDescriptor): void {
  if (!target.capabilities.qdq) {
    throw new UsageError(`pass outliers writes static activation scales, which target ${target.name} does not use (it has no quantize/dequantize pairs): compile with --target qnn`);
  }
}
