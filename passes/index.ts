/**
 * The pass registry: the CLI, the pass manager and --help know passes only through this list.
 * Add a pass by adding its folder and one line here (docs/architecture.md).
 */
import type { PassDescriptor } from '../src/core/pipeline/pass.js';
import { expertBits } from './expert-bits/index.js';
import { reorder } from './reorder/index.js';
import { treeSearch } from './tree-search/index.js';
import { outliers } from './outliers/index.js';
import { chunkPartition } from './chunk-partition/index.js';
import { imatrix } from './imatrix/index.js';

export const PASSES: PassDescriptor<any>[] = [reorder, expertBits, treeSearch, outliers, chunkPartition, imatrix]; // eslint-disable-line @typescript-eslint/no-explicit-any
