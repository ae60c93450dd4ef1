/**
 * The gguf-levels target's targetInfo: one GGUF per elastic level, with the level's widths: one for
 * all layers (`uniform`, llama-arch files), or per layer (`per-layer`: files of llama.cpp's deci arch,
 * each level's `layers` list its widths; kvGroups / heads / ffn are then the widest layer's).
 */
import { z } from 'zod';
import { artifactPath, count, defineTargetInfo } from '../../../src/core/records/target-info.js';

export const GGUF_LEVELS_INFO = defineTargetInfo(
  'gguf-levels',
  z.object({
    format: z.literal('gguf-levels'),
    widths: z.enum(['uniform', 'per-layer']),
    levels: z.array(
      z.object({
        id: z.string(),
        nominal: z.number(),
        paramFrac: z.number(),
        file: artifactPath,
        kvGroups: count,
        heads: count,
        ffn: count,
        layers: z.array(z.object({ kvGroups: count, heads: count, ffn: count })).optional(),
        arch: z.string().optional(),
        quant: z.string().optional(),
        adaptersMerged: z.boolean(),
      }),
    ),
  }),
);
export type GgufLevelsInfo = ReturnType<typeof GGUF_LEVELS_INFO.read>;
