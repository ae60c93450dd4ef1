/** Options of the imatrix pass (`--opt imatrix.key=value`). */
import { UsageError } from '../../src/core/errors.js';
import type { OptionSchema, OptionSpec } from '../../src/core/pipeline/options.js';

export interface ImatrixOptions {
  calibCount: number;
  calibLength: number;
  calibText: string | null;
  seed: number;
}

const SPECS: readonly OptionSpec[] = [
  { key: 'calib', help: 'calibration sequences (llama.cpp: chunks)', default: '16' },
  { key: 'calibLength', help: 'tokens per calibration sequence (llama.cpp: the chunk size)', default: '128' },
  { key: 'calibText', help: "a text file to calibrate on (needs the model's tokenizer), or token ids as JSON [[1, 5, ...], ...]; default: sequences sampled from the model" },
  { key: 'seed', help: 'calibration seed', default: '42' },
];

const int = (key: string, v: string, min: number) => {
  if (!/^\d+$/.test(v.trim()) || Number(v) < min) throw new UsageError(`imatrix.${key} must be an integer ≥ ${min}, got "${v}"`);
  return Number(v);
};

export function parseImatrixOptions(raw: Readonly<Record<string, string>>): ImatrixOptions {
  return {
    calibCount: raw.calib === undefined ? 16 : int('calib', raw.calib, 1),
    calibLength: raw.calibLength === undefined ? 128 : int('calibLength', raw.calibLength, 2),
    calibText: raw.calibText?.trim() || null,
    seed: raw.seed === undefined ? 42 : int('seed', raw.seed, 0),
  };
}

export const IMATRIX_OPTIONS: OptionSchema<ImatrixOptions> = { specs: SPECS, parse: parseImatrixOptions };
