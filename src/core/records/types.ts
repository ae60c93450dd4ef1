/**
 * Typed, versioned pass records. A pass writes one record into every artifact's manifest
 * (`passes[].metadata`); targets, the TS runtime, `llmc run` and `llmc report` read it through its
 * RecordType, never by importing the pass. A record's `format` is `<name>/<version>`: a reader
 * refuses another version of its record by name instead of misreading it.
 */
import { LlmcError } from '../errors.js';
import { Checker } from '../util/check.js';
import type { PassRecord } from './manifest.js';

export interface RecordType<T> {
  /** `<name>/<version>`, the record's `format` field. */
  readonly id: string;
  /** What it holds, for messages. */
  readonly what: string;
  /** Older versions of the record this reader still reads (its check upgrades them). */
  readonly reads: readonly string[];
  /** Check a record read from a manifest (untrusted) and type it; errors name `where` and the JSON path. */
  read(value: unknown, where?: string): T;
}

/** `older`: earlier `<name>/<version>` ids that `check` also accepts (and upgrades to T). */
export function defineRecord<T>(id: string, what: string, check: (value: unknown, c: Checker) => T, older: readonly string[] = []): RecordType<T> {
  return { id, what, reads: older, read: (value, where) => check(value, new Checker(where)) };
}

const nameOf = (id: string) => id.slice(0, id.lastIndexOf('/'));

/** The record of `type` among a manifest's passes, or null when no pass wrote one. */
export function findRecord<T>(passes: readonly PassRecord[] | undefined, type: RecordType<T>, where?: string): T | null {
  for (const p of passes ?? []) {
    const format = (p?.metadata as { format?: unknown } | null | undefined)?.format;
    if (format === type.id || type.reads.includes(format as string)) return type.read(p.metadata, where);
    if (typeof format === 'string' && nameOf(format) === nameOf(type.id)) {
      throw new LlmcError(`pass record ${format} is not the version this llmc reads (${type.id})`, where);
    }
  }
  return null;
}
