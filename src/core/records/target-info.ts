/**
 * The parts of a manifest's targetInfo that `llmc run` follows to other files (a GGUF, a level's
 * graph, chunk graphs), checked with zod before use: one line naming the manifest and the key, and
 * every path a file of the artifact (relative, no `..`).
 */
import { z } from 'zod';
import { checkAs } from '../util/json-schema.js';

/** A file of the artifact: relative, no `..`, no NUL. */
export const artifactPath = z
  .string()
  .min(1)
  .refine((p) => !p.startsWith('/') && !/^[a-zA-Z]:/.test(p) && !p.split(/[\\/]/).includes('..') && !p.includes('\0'), 'is not a file of the artifact');

const count = z.number().int().positive();

export const TARGET_INFO_FILE = z.looseObject({ file: artifactPath.optional() });
export const TARGET_INFO_LEVELS = z.looseObject({ levels: z.array(z.looseObject({ id: z.string(), file: artifactPath })).optional() });
export const TARGET_INFO_CHUNKS = z.looseObject({
  chunks: z.array(z.looseObject({ c: count, attentionGraphs: count })).optional(),
});

/** `targetInfo` of the manifest `file` checked against `schema` (its keys named from targetInfo down). */
export function targetInfoAs<S extends z.ZodType>(schema: S, targetInfo: unknown, file: string): z.infer<S> {
  return (checkAs(z.object({ targetInfo: schema }), { targetInfo }, file) as { targetInfo: z.infer<S> }).targetInfo;
}
