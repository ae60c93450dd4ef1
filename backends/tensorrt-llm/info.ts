/** The tensorrt-llm target's targetInfo: the checkpoint's dtype and weight-only quantization, one rank. */
import { z } from 'zod';
import { count, defineTargetInfo } from '../../src/core/records/target-info.js';

export const TENSORRT_LLM_INFO = defineTargetInfo(
  'tensorrt-llm',
  z.object({
    format: z.literal('tensorrt-llm-checkpoint'),
    dtype: z.string(),
    quantAlgo: z.string().nullable(),
    ranks: count,
  }),
);
export type TensorrtLlmInfo = ReturnType<typeof TENSORRT_LLM_INFO.read>;
