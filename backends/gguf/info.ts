/**
 * The gguf target's targetInfo: the file and what llama.cpp's converter would have decided for it
 * (architecture, preset, tokenizer, every tensor's ggml type). A GGUF read without llmc's manifest
 * (./bare.ts) has only `file`, `manifest: false`, `architecture` and `name`.
 */
import { z } from 'zod';
import { artifactPath, count, defineTargetInfo } from '../../src/core/records/target-info.js';

export const GGUF_INFO = defineTargetInfo(
  'gguf',
  z.object({
    file: artifactPath,
    /** false: a GGUF without llmc's manifest (the rest is what its header says). */
    manifest: z.literal(false).optional(),
    format: z.literal('gguf').optional(),
    ggufVersion: z.literal(3).optional(),
    architecture: z.unknown(),
    name: z.unknown().optional(),
    quant: z.string().optional(),
    preset: z.string().nullable().optional(),
    fileType: count.optional(),
    tokenizer: z.object({ model: z.string(), pre: z.string().nullable(), size: count, placeholder: z.boolean() }).optional(),
    typeCounts: z.record(z.string(), count).optional(),
    tensors: z.array(z.object({ name: z.string(), ne: z.array(count), type: z.string(), source: z.string().nullable(), experts: count.optional() })).optional(),
    notes: z.array(z.string()).optional(),
  }),
);
export type GgufInfo = ReturnType<typeof GGUF_INFO.read>;
