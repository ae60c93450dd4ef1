/**
 * A JSON file llmc reads checked against a zod schema before anything uses it: one LlmcError naming
 * the file and the key (`graph/subgraphs.json: chunk.c: expected number, received undefined`).
 * The text goes through parseJson first (size and depth limits). Browser-safe.
 */
import type { z } from 'zod';
import { LlmcError } from '../errors.js';
import { parseJson, type JsonLimits } from './json.js';

/** `a.b[3].c` of a zod issue path. */
export const keyPath = (path: readonly PropertyKey[]): string =>
  path.reduce<string>((s, k) => (typeof k === 'number' ? `${s}[${k}]` : s ? `${s}.${String(k)}` : String(k)), '');

/** One line for a failed parse: the first issue's key and message. */
export function firstIssue(error: z.ZodError): string {
  const issue = error.issues[0];
  const at = keyPath(issue.path);
  const message = issue.code === 'unrecognized_keys' ? `unknown key ${issue.keys[0]}` : issue.message.replace(/^Invalid input: /, '');
  return at ? `${at}: ${message}` : message;
}

/** `value` checked against `schema`; problems are one line naming `file` and the key. */
export function checkAs<S extends z.ZodType>(schema: S, value: unknown, file: string | undefined, exitCode: 1 | 2 = 1): z.infer<S> {
  const r = schema.safeParse(value);
  if (!r.success) throw new LlmcError(firstIssue(r.error), file, exitCode);
  return r.data;
}

/** JSON text parsed with limits, then checked against `schema`. */
export function parseJsonAs<S extends z.ZodType>(schema: S, text: string, file: string | undefined, limits: JsonLimits = {}): z.infer<S> {
  return checkAs(schema, parseJson(text, file, limits), file, limits.exitCode);
}
