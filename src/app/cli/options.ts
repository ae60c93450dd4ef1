/** Parsers for CLI option values: a bad value is a usage error (exit 2) naming the flag. */
import { UsageError } from '../../core/errors.js';

export function parseIntOption(flag: string, min = 0) {
  return (v: string): number => {
    const n = Number(v);
    if (!/^-?\d+$/.test(v.trim()) || !Number.isSafeInteger(n) || n < min) {
      throw new UsageError(`${flag} must be an integer ≥ ${min}, got "${v}"`);
    }
    return n;
  };
}

export function parseFloatOption(flag: string, min = -Infinity, max = Infinity) {
  return (v: string): number => {
    const n = Number(v);
    if (v.trim() === '' || !Number.isFinite(n) || n < min || n > max) {
      throw new UsageError(`${flag} must be a number in [${min}, ${max}], got "${v}"`);
    }
    return n;
  };
}

/** "1,2,3" → [1, 2, 3]; anything else is a usage error. */
export function parseIdList(flag: string) {
  return (v: string): number[] => {
    const parts = v.split(',').map((s) => s.trim());
    if (parts.length === 0 || parts.some((p) => !/^\d+$/.test(p))) {
      throw new UsageError(`${flag} must be comma-separated non-negative integers like 1,2,3; got "${v}"`);
    }
    return parts.map(Number);
  };
}

/** Repeatable `key=value` options collected into a record. */
export function collectKeyValue(flag: string) {
  return (v: string, prev: Record<string, string> = {}): Record<string, string> => {
    const i = v.indexOf('=');
    if (i <= 0) throw new UsageError(`${flag} takes key=value, got "${v}"`);
    return { ...prev, [v.slice(0, i)]: v.slice(i + 1) };
  };
}

/** Repeatable values collected into an array. */
export function collect(v: string, prev: string[] = []): string[] {
  return [...prev, v];
}
