/** The gguf-levels target's targetInfo: one GGUF per elastic level, with the level's uniform widths. */
import { z } from 'zod';
import { artifactPath, count, defineTargetInfo } from '../../../src/core/records/target-info.js';

export const GGUF_LEVELS_INFO = defineTargetInfo(
  'gguf-levels',
  z.object({
    format: z.literal('gguf-levels'),
    widths: z.literal('uniform'),
    levels: z.array(
      z.object({
        id: z.string(),
        nominal: z.number(),
        paramFrac: z.number(),
        file: artifactPath,
        kvGroups: count,
        heads: count,
        ffn: count,
        quant: z.string().optional(),
        adaptersMerged: z.boolean(),
      }),
    ),
  }),
);
export type GgufLevelsInfo = ReturnType<typeof GGUF_LEVELS_INFO.read>;
