/**
 * The pass contract. A pass is described by a light descriptor (name, options, ordering, the
 * record it writes) that the CLI and the pass manager read without loading it; `load()` brings the
 * code that transforms the compile unit.
 */
import type { Progress } from '../util/progress.js';
import type { RecordType } from '../records/types.js';
import type { OptionSchema } from './options.js';
import type { FormatRequest, GraphFeature, TargetDescriptor } from './target.js';
import type { CompileUnit } from './unit.js';
import type { ModelSource } from '../checkpoint/source.js';
import type { ArchSpec } from '../arch/types.js';

export interface PassContext {
  progress: Progress;
  note: (message: string) => void;
  /**
   * The profile store (content-addressed): a directory, or a directory with the run's cache policy
   * (pass it on as it is); undefined disables caching. Passes measure
   * through src/measure: `calibrationSet(source, spec, {cacheDir})` for the shared calibration /
   * held-out ids, and `cachedProfile(cacheDir, kind, keyParts, compute)` for their own statistics
   * (keyParts must include the checkpoint identity, the calibration key and every option that
   * changes the result), so a profile is computed once and reused by later runs and `llmc report`.
   */
  cacheDir?: ProfileCacheRef;
  /** The target the unit will be lowered to (its formats and capabilities). */
  target: TargetDescriptor;
  formats: FormatRequest;
  /** The target's own options as the compile parsed them (a pass that writes a trial artifact emits with them). */
  targetOptions?: unknown;
}

export interface PassOutput<R = object> {
  /** The transformed unit (without this pass's record: the driver appends it). */
  unit: CompileUnit;
  /** The pass's record, of the type the descriptor `produces`. */
  record: R;
}

/**
 * How a run uses the profile store: `on` reads what is there and stores what it computes;
 * `readonly` reads but never writes; `redo` recomputes everything and overwrites; `off` neither
 * reads nor writes.
 */
export type CachePolicy = 'on' | 'off' | 'redo' | 'readonly';
export const CACHE_POLICIES: readonly CachePolicy[] = ['on', 'off', 'redo', 'readonly'];

/** One profile a run needed: read from the store, or computed (and stored or not). */
export interface StageEvent {
  kind: string;
  key: string;
  cached: boolean;
  stored: boolean;
  ms: number;
}

/** A store directory with a policy, and an observer of the stages (`llmc profile` lists them). */
export interface CacheHandle {
  dir: string;
  policy: CachePolicy;
  onStage?: (e: StageEvent) => void;
}

/**
 * A profile store as passes hand it to src/measure (`calibrationSet`, `cachedProfile`): a
 * directory (policy `on`) or a handle.
 */
export type ProfileCacheRef = string | CacheHandle;

/** What a pass's `profile` hook gets: no target yet, only the store to measure into. */
export interface ProfileContext {
  progress: Progress;
  note: (message: string) => void;
  /** The profile directory (`llmc profile -o DIR`) with the run's cache policy. */
  cacheDir: ProfileCacheRef;
}

export interface Pass<O = unknown> {
  run(unit: CompileUnit, options: O, ctx: PassContext): Promise<PassOutput>;
  /**
   * Optional: every measurement `run` will need, computed once into `ctx.cacheDir` through the same
   * cachedProfile/calibrationSet calls `run` makes (same kinds, same keys), so a later compile with
   * `--profile DIR` finds them all. Target-dependent choices stay in `run`: measure what any target
   * may need. `llmc profile` calls it.
   */
  profile?(source: ModelSource, options: O, ctx: ProfileContext): Promise<void>;
  /**
   * Optional: the record `run` would write for `source`, decided from the measurements `profile`
   * stored (read from `ctx.cacheDir`), without a target and without changing the model, for a
   * pass whose decisions are cheap once measured. `llmc report` on a profile directory shows it.
   */
  preview?(source: ModelSource, options: O, ctx: ProfileContext): Promise<unknown>;
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
  /** Graph features its output carries, which the target must lower (the pass manager refuses the pass otherwise). */
  needs?: readonly GraphFeature[];
  /**
   * Refuse a model the pass cannot work on for this target (a UsageError naming what and why), checked
   * with the target's checkArch once the checkpoint is open and before any pass runs; `llmc list
   * architectures` asks it too. Absent: every model the target takes.
   */
  checkArch?(spec: ArchSpec, target: TargetDescriptor): void;
  /** Checks of the combination with the target and the other passes, before any work; throws UsageError. */
  check?(options: O, target: TargetDescriptor, formats: FormatRequest, run: { passes: readonly string[] }): void;
  load(): Promise<Pass<O>>;
}
