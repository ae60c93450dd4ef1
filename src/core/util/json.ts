/**
 * The one way llmc parses untrusted JSON text: its size and nesting depth checked first (a linear
 * scan, no recursion), so a file nested 200,000 levels deep is one line, not a stack overflow in
 * whatever walks the value later (zod, structuredClone, an error message). Browser-safe.
 */
import { LlmcError } from '../errors.js';

export interface JsonLimits {
  /** Characters of text (default 256 Mi). */
  maxBytes?: number;
  /** Levels of arrays and objects (default 64; llmc's own files and HF configs need < 10). */
  maxDepth?: number;
  /** Exit code of the error (2 for files the user names as options). */
  exitCode?: 1 | 2;
}

export const JSON_MAX_DEPTH = 64;
const JSON_MAX_BYTES = 256 * 2 ** 20;

/** The deepest nesting of `text` exceeds `max` (brackets inside strings do not count). */
export function jsonDepthExceeds(text: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}

const fmtSize = (n: number) => (n >= 2 ** 20 ? `${(n / 2 ** 20).toFixed(1)} MiB` : `${n} bytes`);

/** JSON.parse with limits; every problem is one LlmcError naming `file`. */
export function parseJson(text: string, file: string | undefined, limits: JsonLimits = {}): unknown {
  const { maxBytes = JSON_MAX_BYTES, maxDepth = JSON_MAX_DEPTH, exitCode = 1 } = limits;
  if (text.length > maxBytes) throw new LlmcError(`is ${fmtSize(text.length)}, over the ${fmtSize(maxBytes)} llmc reads for this file`, file, exitCode);
  if (jsonDepthExceeds(text, maxDepth)) throw new LlmcError(`not valid JSON for llmc: nested deeper than ${maxDepth} levels`, file, exitCode);
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new LlmcError(`not valid JSON (${(e as Error).message.split('\n')[0].slice(0, 200)})`, file, exitCode);
  }
}

/** parseJson, and the value must be a JSON object. */
export function parseJsonObject(text: string, file: string | undefined, limits: JsonLimits = {}): Record<string, unknown> {
  const v = parseJson(text, file, limits);
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new LlmcError('not a JSON object', file, limits.exitCode ?? 1);
  return v as Record<string, unknown>;
}
