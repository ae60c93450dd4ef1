/** Reading a JSON file that may be absent: null when it is not there, one-line errors otherwise. */
import { promises as fsp } from 'node:fs';
import { LlmcError } from '../errors.js';
import { ioError } from './atomic.js';
import { parseJson } from './json.js';

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
