/** `llmc run` on an hf artifact: it is a Hugging Face checkpoint, run on onnxruntime like any other. */
import { UsageError } from '../../src/core/errors.js';
import type { Artifact, ArtifactRunner, RunOptions } from '../../src/core/pipeline/target.js';
import { openCheckpointRunner } from '../../src/exec/engine/generator.js';

export async function openHf(a: Artifact, opts: RunOptions): Promise<ArtifactRunner> {
  if (opts.level !== undefined) throw new UsageError('--level: an hf artifact is one model; compile --target ts (or gguf-levels) for elastic levels');
  return openCheckpointRunner(a.dir, { threads: opts.threads });
}
