/**
 * Record `imatrix/1` (written by the `imatrix` pass, read by the gguf target and `llmc report`): the
 * calibration llama.cpp's importance matrix was measured on. The sums themselves travel as tensor
 * annotations (`importance`) and land in the artifact as `imatrix.gguf`, llama.cpp's own file.
 * Browser-safe: imports nothing but src/core.
 */
import { defineRecord } from './types.js';

export interface ImatrixRecord {
  format: 'imatrix/1';
  calibration: {
    /** 'self-generated' (sampled from the model, seeded) or the text file calibrated on. */
    source: 'self-generated' | { text: string };
    count: number;
    length: number;
    seed: number;
    /** The calibration profile key. */
    profile: string;
  };
  /** Tokens run through the model. */
  tokens: number;
  /** Linear weights annotated with their input importance. */
  linears: number;
}

export const IMATRIX = defineRecord<ImatrixRecord>('imatrix/1', "llama.cpp importance matrix: the linears' input x² sums on calibration data (imatrix)", (v, c) => {
  const o = c.obj(v, 'imatrix');
  const cal = c.obj(o.calibration, 'calibration');
  const src = cal.source;
  const source = src === 'self-generated' ? src : { text: c.str(c.obj(src, 'calibration.source').text, 'calibration.source.text') };
  return {
    format: 'imatrix/1',
    calibration: {
      source,
      count: c.int(cal.count, 'calibration.count', 1),
      length: c.int(cal.length, 'calibration.length', 1),
      seed: c.int(cal.seed, 'calibration.seed'),
      profile: c.str(cal.profile, 'calibration.profile'),
    },
    tokens: c.int(o.tokens, 'tokens', 1),
    linears: c.int(o.linears, 'linears', 1),
  };
});
