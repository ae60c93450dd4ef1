/** `llmc run` on an hf artifact: it is a Hugging Face checkpoint, run on onnxruntime like any other. */
import type { Artifact, ArtifactRunner, RunOptions } from '../../src/core/pipeline/target.js';
import { openCheckpointRunner } from '../../src/exec/engine/generator.js';

export async function openHf(a: Artifact, opts: RunOptions): Promise<ArtifactRunner> {
  return openCheckpointRunner(a.dir, { threads: opts.threads });
}
