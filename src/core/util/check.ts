/**
 * Shape checks for records read back from a manifest (untrusted JSON): each throws one LlmcError
 * naming the file and the JSON path. Browser-safe, no dependencies (the runtime uses them).
 */
import { LlmcError, summarize } from '../errors.js';

export type Json = Record<string, unknown>;

export class Checker {
  constructor(readonly where: string | undefined) {}

  fail(path: string, problem: string): never {
    throw new LlmcError(`${path}: ${problem}`, this.where);
  }

  obj(v: unknown, path: string): Json {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) this.fail(path, `must be an object, got ${summarize(v)}`);
    return v as Json;
  }

  arr(v: unknown, path: string): unknown[] {
    if (!Array.isArray(v)) this.fail(path, `must be an array, got ${summarize(v)}`);
    return v as unknown[];
  }

  num(v: unknown, path: string): number {
    if (typeof v !== 'number' || !Number.isFinite(v)) this.fail(path, `must be a finite number, got ${summarize(v)}`);
    return v as number;
  }

  int(v: unknown, path: string, min = 0): number {
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) this.fail(path, `must be an integer ≥ ${min}, got ${summarize(v)}`);
    return v as number;
  }

  str(v: unknown, path: string): string {
    if (typeof v !== 'string') this.fail(path, `must be a string, got ${summarize(v)}`);
    return v as string;
  }

  ints(v: unknown, path: string): number[] {
    return this.arr(v, path).map((x, i) => this.int(x, `${path}[${i}]`));
  }
}
