/**
 * Pass `outliers`: static per-tensor W8A8 activation scales from a calibration profile, with
 * mllm-NPU's shadow outlier execution decided per linear and side (shadow | clip | widen), hot
 * channels and importance-based pruning (SPEC-outliers §1.2–1.4). This is its descriptor (cheap to
 * import); the work is in ./run.ts. docs/outliers.md describes the method.
 */
import type { PassDescriptor } from '../../src/core/pipeline/pass.js';
import { OUTLIER_SCALES } from '../../src/core/records/outliers.js';
import { checkOutliers, OUTLIERS_OPTIONS, type OutliersOptions } from './options.js';

export const outliers: PassDescriptor<OutliersOptions> = {
  name: 'outliers',
  description: 'static W8A8 activation scales + shadow outlier execution per linear (mllm-NPU): profile, hot channels, importance pruning',
  options: OUTLIERS_OPTIONS,
  flags: [],
  after: ['reorder'],
  requires: [],
  produces: OUTLIER_SCALES,
  needs: ['shadow-outliers'],
  check: checkOutliers,
  load: async () => (await import('./run.js')).outliersPass,
};
