/**
 * Pass `reorder`: permutation-consistent unit reordering and elastic prefix sub-models (ELMS).
 * This is its descriptor (cheap to import: the CLI reads it for --help and flags); the work is in
 * ./analyze.ts, loaded when the pass runs. docs/reorder.md describes the method.
 */
import type { PassDescriptor } from '../../src/core/pipeline/pass.js';
import { ELASTIC_LEVELS } from '../../src/core/records/elastic.js';
import { checkUniformAnchors, REORDER_OPTIONS, type ReorderOptions } from './options.js';

export const reorder: PassDescriptor<ReorderOptions> = {
  name: 'reorder',
  description: 'permutation-consistent unit reordering + elastic prefix sub-models (ELMS)',
  options: REORDER_OPTIONS,
  flags: [
    { flag: '--importance <provider>', key: 'importance', help: 'reorder: unit importance (taylor | activation | magnitude | fisher | auto)' },
    { flag: '--levels <list>', key: 'levels', help: 'reorder: elastic levels, a count or fractions (e.g. 0.5,0.75,1)' },
  ],
  after: [],
  requires: [],
  produces: ELASTIC_LEVELS,
  check(options, target) {
    const e = target.capabilities.elasticWidths;
    if (e.kind === 'uniform' && !(e.searchPerLayer && options.widths === 'search')) checkUniformAnchors(options, target.name, e.why);
  },
  load: async () => (await import('./analyze.js')).reorderPass,
};
