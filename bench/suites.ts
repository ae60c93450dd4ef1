/** The benchmark suites `npm run bench` runs, in order. Add one import + one entry for yours. */
import type { BenchSuite } from './harness.js';
import { suite as safetensors } from './safetensors.bench.js';
import { suite as engine } from './engine.bench.js';
import { suite as quant } from './quant.bench.js';
import { suite as runtime } from './runtime.bench.js';
import { suite as reorder } from './reorder.bench.js';
import { suite as gguf } from './gguf.bench.js';
import { suite as fuzz } from './fuzz.bench.js';
import { suite as experts } from './experts.bench.js';
import { suite as treeSearch } from './tree-search.bench.js';
import { suite as cuda } from './cuda.bench.js';
import { suite as chunks } from './chunks.bench.js';
import { suite as decode } from './decode.bench.js';
import { suite as kill } from './kill.bench.js';
import { suite as recovery } from './recovery.bench.js';
import { suite as outliers } from './outliers.bench.js';
import { suite as prefill } from './prefill.bench.js';
import { suite as llamacpp } from './llamacpp.bench.js';
import { suite as pool } from './pool.bench.js';
import { suite as qdot } from './qdot.bench.js';
import { suite as quality } from './quality.bench.js';
import { suite as stream } from './stream.bench.js';
import { suite as elasticQuality } from './elastic-quality.bench.js';
import { suite as kvTypes } from './kv-types.js';
import { suite as peers } from './peers.bench.js';
import { suite as scale } from './scale.bench.js';

/** A suite; `description` may be left out by suites written before harness.ts existed. */
export type SuiteEntry = Omit<BenchSuite, 'description' | 'run'> & {
  description?: string;
  run(opts: { quick: boolean }): Promise<Record<string, unknown>>;
};

export const SUITES: SuiteEntry[] = [
  safetensors,
  engine,
  quant,
  runtime,
  reorder,
  gguf,
  fuzz,
  experts,
  treeSearch,
  cuda,
  chunks,
  decode,
  kill,
  recovery,
  outliers,
  prefill,
  llamacpp,
  pool,
  qdot,
  quality,
  stream,
  elasticQuality,
  kvTypes,
  peers,
  scale,
];
