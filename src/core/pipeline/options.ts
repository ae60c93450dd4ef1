/**
 * Option schemas of passes and targets: every `--opt owner.key=value` is checked against one before
 * any work (unknown keys and bad values are usage errors naming the option), and `--help` is
 * generated from the same declarations.
 */
import { UsageError } from '../errors.js';

export interface OptionSpec {
  key: string;
  /** One line for --help. */
  help: string;
  /** The default, as a user would write it (for --help); absent: none. */
  default?: string;
}

export interface OptionSchema<O> {
  readonly specs: readonly OptionSpec[];
  /** Typed options from raw `key=value` strings (keys already checked against `specs`); throws UsageError. */
  parse(raw: Readonly<Record<string, string>>): O;
}

/** A schema for an owner with no options. */
export const NO_OPTIONS: OptionSchema<Record<string, never>> = { specs: [], parse: () => ({}) };

/** Refuse keys the schema does not declare, naming `owner.key` and the valid ones. */
export function checkOptionKeys(owner: string, schema: OptionSchema<unknown>, raw: Readonly<Record<string, string>>): void {
  const known = new Set(schema.specs.map((s) => s.key));
  for (const k of Object.keys(raw)) {
    if (!known.has(k)) {
      const valid = schema.specs.map((s) => `${owner}.${s.key}`).join(', ');
      throw new UsageError(`unknown option --opt ${owner}.${k}; ${valid ? `${owner} takes ${valid}` : `${owner} takes no options`}`);
    }
  }
}
