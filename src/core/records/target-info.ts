/**
 * A target's `targetInfo` (the manifest's target-specific section) as a record type, the same
 * mechanism as pass records (./types.ts): each target declares its schema (`TargetDescriptor.info`);
 * the compile driver checks what `emit` returned against it before the manifest is written, and
 * readers (`llmc run`, the levels table, reports) get typed values from `info.read(targetInfo, file)`.
 * A problem is one line naming the manifest (or the target) and the key; every path a targetInfo
 * names must be a file of the artifact (relative, no `..`).
 */
import { z } from 'zod';
import { checkAs } from '../util/json-schema.js';
import { defineRecord, type RecordType } from './types.js';

/** A file of the artifact: relative, no `..`, no NUL. */
export const artifactPath = z
  .string()
  .min(1)
  .refine((p) => !p.startsWith('/') && !/^[a-zA-Z]:/.test(p) && !p.split(/[\\/]/).includes('..') && !p.includes('\0'), 'is not a file of the artifact');

export const count = z.number().int().nonnegative();

/** `targetInfo` of the manifest `file` checked against `schema` (its keys named from targetInfo down). */
export function targetInfoAs<S extends z.ZodType>(schema: S, targetInfo: unknown, file: string | undefined): z.infer<S> {
  return (checkAs(z.object({ targetInfo: schema }), { targetInfo }, file) as { targetInfo: z.infer<S> }).targetInfo;
}

/** The targetInfo record type of `target`, from its schema (keys it does not declare are left out of what readers get). */
export function defineTargetInfo<S extends z.ZodType>(target: string, schema: S): RecordType<z.infer<S>> {
  return defineRecord(`targetInfo:${target}`, `the ${target} target's targetInfo`, (v, c) => targetInfoAs(schema, v, c.where));
}

// Loose: cuda adds its SPEC model columns (modelNaive, …), which the report shows where present.
const memoryRow = z.looseObject({ N: z.number().int().positive(), naive: z.number(), shared: z.number(), saved: z.number() });

/**
 * The keys several targets' targetInfo share, typed for the readers that do not know the target
 * (`llmc report`): the --quant written (gguf, ts, cuda), the ONNX graph (cuda), the chunk graphs'
 * memory (cuda, qnn), the tensor table (ts: name and format; gguf: name, source and ggml type) or
 * the formats by tensor (cuda). Each target's own schema declares them where it writes them.
 */
export const SHARED_TARGET_INFO = defineTargetInfo(
  'any',
  z.object({
    quant: z.string().optional(),
    graph: artifactPath.optional(),
    chunks: z.array(z.object({ c: z.number().int().positive(), memory: z.object({ rows: z.array(memoryRow) }) })).optional(),
    tensors: z.array(z.object({ name: z.string(), source: z.string().nullable().optional(), format: z.string().optional(), type: z.string().optional() })).optional(),
    formats: z.record(z.string(), z.string()).optional(),
  }),
);
