/**
 * Untrusted JSON (config files, budget files) checked with zod: a failure becomes one line naming
 * the file and the key (`budgets.json: ppl_delta.max: expected number, received string`), exit 2.
 */
import { z } from 'zod';
import { LlmcError, summarize } from '../core/errors.js';
import { parseJson } from '../core/util/json.js';

/** A key as a message shows it: a hostile file's 200,000-character key is cut (summarize). */
const keyName = (k: PropertyKey) => (String(k).length > 60 ? summarize(String(k), 60) : String(k));

const keyPath = (path: readonly PropertyKey[]) =>
  path.reduce<string>((s, k) => (typeof k === 'number' ? `${s}[${k}]` : s ? `${s}.${keyName(k)}` : keyName(k)), '');

/** What to say after "unknown key" at a path (the keys that are valid there). */
export type KeyHint = (path: readonly PropertyKey[]) => string | undefined;

/** One line for the first issue, naming its key path. */
export function issueLine(error: z.ZodError, hint?: KeyHint): string {
  const issue = error.issues[0];
  const at = keyPath(issue.path);
  if (issue.code === 'unrecognized_keys') {
    const key = [at, issue.keys[0] === undefined ? '' : keyName(issue.keys[0])].filter(Boolean).join('.');
    const valid = hint?.(issue.path);
    return `${key}: unknown key${valid ? `; ${valid}` : ''}`;
  }
  const message = issue.message.replace(/^Invalid input: /, '');
  return at ? `${at}: ${message}` : message;
}

/** Parse JSON text from `file` against `schema`; errors are one line, exit code 2. */
export function parseJsonFile<S extends z.ZodType>(schema: S, text: string, file: string, hint?: KeyHint): z.infer<S> {
  const value = parseJson(text, file, { exitCode: 2 });
  const r = schema.safeParse(value);
  if (!r.success) throw new LlmcError(issueLine(r.error, hint), file, 2);
  return r.data;
}
