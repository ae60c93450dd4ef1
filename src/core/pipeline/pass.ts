/**
 * The pass contract. A pass is described by a light descriptor (name, options, ordering, the
 * record it writes) that the CLI and the pass manager read without loading it; `load()` brings the
 * code that transforms the compile unit.
 */
import type { Progress } from '../util/progress.js';
import type { RecordType } from '../records/types.js';
import type { OptionSchema } from './options.js';
import type { FormatRequest, TargetDescriptor } from './target.js';
import type { CompileUnit } from './unit.js';

export interface PassContext {
  progress: Progress;
  note: (message: string) => void;
  /**
   * Directory for cached profiles (content-addressed); undefined disables caching. Passes measure
   * through src/app/profile: `calibrationSet(source, spec, {cacheDir})` for the shared calibration /
   * held-out ids, and `cachedProfile(cacheDir, kind, keyParts, compute)` for their own statistics
   * (keyParts must include the checkpoint identity, the calibration key and every option that
   * changes the result), so a profile is computed once and reused by later runs and `llmc report`.
   */
  cacheDir?: string;
  /** The target the unit will be lowered to (its formats and capabilities). */
  target: TargetDescriptor;
  formats: FormatRequest;
}

export interface PassOutput<R = object> {
  /** The transformed unit (without this pass's record: the driver appends it). */
  unit: CompileUnit;
  /** The pass's record, of the type the descriptor `produces`. */
  record: R;
}

export interface Pass<O = unknown> {
  run(unit: CompileUnit, options: O, ctx: PassContext): Promise<PassOutput>;
}

/** A command-line shorthand for an option: `--levels X` ≡ `--opt reorder.levels=X`. */
export interface PassFlag {
  /** The flag as commander declares it, e.g. `--levels <list>`. */
  flag: string;
  key: string;
  help: string;
}

export interface PassDescriptor<O = unknown> {
  name: string;
  description: string;
  options: OptionSchema<O>;
  flags: readonly PassFlag[];
  /** Passes this one runs after when both run (the pass manager orders them). */
  after: readonly string[];
  /** Passes that must run too. */
  requires: readonly string[];
  /** The record type it writes. */
  produces: RecordType<unknown>;
  /** Checks of the combination with the target and the other passes, before any work; throws UsageError. */
  check?(options: O, target: TargetDescriptor, formats: FormatRequest, run: { passes: readonly string[] }): void;
  load(): Promise<Pass<O>>;
}
