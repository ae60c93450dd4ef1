/**
 * Target `ts`: weights.bin + a tensor table for llmc's own TypeScript runtime (docs/ts-artifact.md).
 * This is its descriptor; ./emit.ts writes the artifact.
 */
import { NO_OPTIONS } from '../../src/core/pipeline/options.js';
import type { TargetDescriptor } from '../../src/core/pipeline/target.js';
import { blockAlongRow } from '../../src/core/quant/types.js';
import { TS_INFO, WEIGHT_FORMATS, type TsTargetInfo } from '../../src/exec/runtime/format.js';
import { tsLevelBytes } from './levels.js';

export const ts: TargetDescriptor<unknown, TsTargetInfo> = {
  name: 'ts',
  description: "llmc's tiny TypeScript runtime (weights.bin + tensor table; F32, F16, Q8_0, Q4_0, Q4_K, Q2_K, Q3_K, Q6_K; Q5_0 as Q4_K's fallback)",
  formats: { quant: WEIGHT_FORMATS, default: 'F32', tensorTypes: WEIGHT_FORMATS },
  options: NO_OPTIONS,
  capabilities: {
    elasticWidths: { kind: 'per-layer' },
    perTensorFormats: true,
    perExpertFormats: true,
    qdq: false,
    lowers: { moe: true, 'sliding-window': true, 'tree-mask': true, 'chunk-graphs': true, 'shadow-outliers': false },
    adapters: true,
    speculative: true,
    expertCache: true,
    kvTypes: ['f32', 'f16', 'q8_0'],
  },
  quantBlock: (r) => Math.max(blockAlongRow(r.quant ?? 'F32'), ...r.tensorTypes.map((t) => blockAlongRow(t.type))),
  requires: [],
  info: TS_INFO,
  levelBytes: (m, lv) => tsLevelBytes(m, lv),
  load: async () => (await import('./emit.js')).tsTarget,
  open: async (a, o) => (await import('./run.js')).openTs(a, o),
};
