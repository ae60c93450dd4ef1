/** The hf target's targetInfo: the safetensors file, the dtype it forced (or the source's), each level's checkpoint folder. */
import { z } from 'zod';
import { artifactPath, defineTargetInfo } from '../../src/core/records/target-info.js';

export const HF_INFO = defineTargetInfo(
  'hf',
  z.object({
    weights: artifactPath,
    dtype: z.string(),
    levels: z.array(z.object({ id: z.string(), dir: artifactPath })).optional(),
  }),
);
export type HfInfo = ReturnType<typeof HF_INFO.read>;
