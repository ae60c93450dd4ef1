/**
 * Pass `chunk-partition`: chunk-sharing graphs, chunked prefill and out-of-order subgraph scheduling
 * (mllm-NPU §3.2–3.4). Descriptor only (cheap to import); the work is in ./pass.ts.
 * docs/chunk-partition.md describes the method, the files and the record.
 */
import type { PassDescriptor } from '../../src/core/pipeline/pass.js';
import { CHUNK_SCHEDULE } from '../../src/core/records/chunk-schedule.js';
import { readCostFile, readDepsFile } from './files.js';
import { CHUNK_PARTITION_OPTIONS, type ChunkPartitionOptions } from './options.js';

export const chunkPartition: PassDescriptor<ChunkPartitionOptions> = {
  name: 'chunk-partition',
  description: 'chunked prefill: chunk-sharing subgraphs, chunk length from costs, out-of-order schedules per chunk count (mllm-NPU)',
  options: CHUNK_PARTITION_OPTIONS,
  flags: [],
  after: ['reorder', 'expert-bits'],
  requires: [],
  produces: CHUNK_SCHEDULE,
  needs: ['chunk-graphs'],
  check(options) {
    // The files are read and checked before any work.
    if (typeof options.costs === 'object') readCostFile(options.costs.file, ['embed', 'qkv', 'attention', 'mlp', 'head', ...(options.shadowLayers.length ? (['shadow'] as const) : [])]);
    if (options.deps) readDepsFile(options.deps);
  },
  load: async () => (await import('./pass.js')).chunkPartitionPass,
};
