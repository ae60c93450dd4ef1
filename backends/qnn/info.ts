/**
 * The qnn target's targetInfo: the SoC and SDK the artifact is built for, the prefill chunk, the
 * subgraph table's file, graph counts, the chunk graphs' memory (as cuda's) and the shadow weights' split.
 */
import { z } from 'zod';
import { artifactPath, count, defineTargetInfo } from '../../src/core/records/target-info.js';

const positive = z.number().int().positive();
const memoryRow = z.object({ N: positive, naive: z.number(), shared: z.number(), saved: z.number() });

export const QNN_INFO = defineTargetInfo(
  'qnn',
  z.object({
    format: z.literal('qnn'),
    soc: z.string(),
    dspArch: z.string(),
    socId: count,
    qnnSdk: z.string(),
    encodings: z.string(),
    rounding: z.string(),
    chunk: z.object({ c: positive, a: positive, b: positive }),
    nMax: positive,
    subgraphs: artifactPath,
    graphs: z.object({ npu: count, cpu: count, shadowNodes: count }),
    syncsPerChunk: count,
    chunks: z
      .array(z.object({ c: positive, attentionGraphs: positive, memory: z.object({ staticGraphBytes: count, attentionGraphBytes: z.array(count), rows: z.array(memoryRow) }) }))
      .optional(),
    shadow: z.object({ hotBytes: count, coldBytes: count, weightBytes: count, residentPercentOfWeights: z.number(), sides: count }),
  }),
);
export type QnnInfo = ReturnType<typeof QNN_INFO.read>;
