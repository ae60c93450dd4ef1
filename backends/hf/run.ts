/** `llmc run` on an hf artifact: it is a Hugging Face checkpoint, run on onnxruntime like any other; --level runs a level's own checkpoint. */
import path from 'node:path';
import type { Artifact, ArtifactRunner, RunOptions } from '../../src/core/pipeline/target.js';
import { ELASTIC_LEVELS, findRecord, levelNotes, selectLevel } from '../../src/core/records/index.js';
import { MANIFEST_FILE } from '../../src/core/records/manifest.js';
import { openCheckpointRunner } from '../../src/exec/engine/generator.js';
import { HF_INFO } from './info.js';

export async function openHf(a: Artifact, opts: RunOptions): Promise<ArtifactRunner> {
  if (opts.level === undefined) return openCheckpointRunner(a.dir, { threads: opts.threads });
  const record = findRecord(a.manifest.passes, ELASTIC_LEVELS, a.dir);
  const level = selectLevel(record?.levels ?? null, opts.level, a.path);
  const dir = HF_INFO.read(a.manifest.targetInfo, path.join(a.dir, MANIFEST_FILE)).levels?.find((l) => l.id === level.id)?.dir;
  const runner = await openCheckpointRunner(dir ? path.join(a.dir, dir) : a.dir, { threads: opts.threads });
  runner.notes.unshift(...levelNotes(level, record!, runner.spec.vocabSize));
  return { ...runner, level: level.id };
}
