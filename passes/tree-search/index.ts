/**
 * Pass `tree-search`: verification-tree search for speculative decoding (LLMCad, Ghidorah, Sequoia,
 * and a trace-exact optimum). Descriptor only (cheap to import); the work is in ./pass.ts.
 * docs/tree-search.md describes the method.
 */
import { UsageError } from '../../src/core/errors.js';
import type { PassDescriptor } from '../../src/core/pipeline/pass.js';
import { SPEC_TREE } from '../../src/core/records/spec-tree.js';
import { readLatencyFile } from './latency-file.js';
import { TREE_SEARCH_OPTIONS, type TreeSearchOptions } from './options.js';

export const treeSearch: PassDescriptor<TreeSearchOptions> = {
  name: 'tree-search',
  description: 'speculative decoding: rank-trace profiling of a draft, verification-tree search, tree artifacts',
  options: TREE_SEARCH_OPTIONS,
  flags: [{ flag: '--draft <dir>', key: 'draft', help: 'tree-search: draft checkpoint (same vocabulary as the model)' }],
  // An elastic-level draft reads the reorder pass's levels (and the tree is searched on the reordered model).
  after: ['reorder'],
  requires: [],
  produces: SPEC_TREE,
  needs: ['tree-mask'],
  check(options, _target, _formats, run) {
    if (options.draft.kind === 'level' && !run.passes.includes('reorder')) {
      throw new UsageError('tree-search.draftLevel drafts with an elastic level of the target: add reorder to --passes');
    }
    // A latency file is read and checked (monotone in tree size) before any work.
    if (typeof options.latency === 'object') readLatencyFile(options.latency.file);
  },
  load: async () => (await import('./pass.js')).treeSearchPass,
};
