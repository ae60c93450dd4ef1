/** Reading a JSON file that may be absent: null when it is not there, one-line errors otherwise. */
import { promises as fsp } from 'node:fs';
import { LlmcError } from '../errors.js';
import { ioError } from './atomic.js';
import type { z } from 'zod';
import { parseJson, type JsonLimits } from './json.js';
import { parseJsonAs } from './json-schema.js';

export async function readJsonIfPresent(file: string): Promise<unknown | null> {
  let text: string;
  try {
    text = await fsp.readFile(file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    throw ioError(e, file, 'read');
  }
  return parseJson(text, file);
}

/** A JSON file read, parsed with limits and checked against `schema`: one line naming the file on any problem. */
export async function readJsonAs<S extends z.ZodType>(schema: S, file: string, limits: JsonLimits = {}): Promise<z.infer<S>> {
  let text: string;
  try {
    text = await fsp.readFile(file, 'utf8');
  } catch (e) {
    throw ioError(e, file, 'read');
  }
  return parseJsonAs(schema, text, file, limits);
}
