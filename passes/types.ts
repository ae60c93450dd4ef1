/**
 * A pass is a pure function from (model, profile, options) to (model transform, metadata).
 * It never writes files: the transformed model is a lazy ModelSource (tensors are rewritten as a
 * backend reads them) and the metadata goes into every target's manifest.
 */
import type { ModelSource } from '../src/core/checkpoint/source.js';
import type { Progress } from '../src/core/util/progress.js';

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
  /** The compile target, so a pass can align to its quantization blocks. */
  target: string;
  /** The target's weight format, when one was chosen. */
  quant?: string;
}

export interface PassResult {
  model: ModelSource;
  metadata: Record<string, unknown>;
}

export interface Pass<Options = Record<string, unknown>> {
  name: string;
  description: string;
  /** Parse and validate user options (from `--opt key=value` and pass-specific flags). */
  parseOptions(raw: Record<string, string>): Options;
  run(model: ModelSource, options: Options, ctx: PassContext): Promise<PassResult>;
}
