/**
 * A backend turns a model (already transformed by passes) and pass metadata into an artifact
 * directory. It writes its own files (atomically) and returns their paths; the compile driver
 * writes llmc-manifest.json over them.
 */
import type { ModelSource } from '../src/core/checkpoint/source.js';
import type { PassRecord } from '../src/app/compile/manifest.js';
import type { Progress } from '../src/core/util/progress.js';

export interface CompileOptions {
  /** Weight format for the whole model (`--quant`), target-defined default when absent. */
  quant?: string;
  /** Per-tensor overrides (`--tensor-type REGEX=TYPE`), applied in order, last match wins. */
  tensorTypes?: { pattern: RegExp; type: string }[];
  /** Target-specific extra options (`--opt key=value`). */
  extra: Record<string, string>;
}

export interface BackendContext {
  source: ModelSource;
  outDir: string;
  passes: PassRecord[];
  options: CompileOptions;
  progress: Progress;
  /** Notes for the user (one line each, stderr unless --json). */
  note: (message: string) => void;
}

export interface BackendResult {
  /** Paths relative to outDir, every file the artifact consists of (not the manifest). */
  files: string[];
  /** Goes into the manifest's `targetInfo`. */
  targetInfo: Record<string, unknown>;
}

export interface Backend {
  name: string;
  description: string;
  emit(ctx: BackendContext): Promise<BackendResult>;
}
