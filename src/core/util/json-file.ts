/** Reading a JSON file that may be absent: null when it is not there, one-line errors otherwise. */
import { promises as fsp } from 'node:fs';
import { LlmcError } from '../errors.js';
import { ioError } from './atomic.js';

export async function readJsonIfPresent(file: string): Promise<unknown | null> {
  let text: string;
  try {
    text = await fsp.readFile(file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    throw ioError(e, file, 'read');
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new LlmcError(`not valid JSON (${(e as Error).message})`, file);
  }
}
