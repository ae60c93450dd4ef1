/** `llmc run` on a gguf-levels artifact: the level's GGUF in llama.cpp (--level picks it; default the largest). */
import path from 'node:path';
import type { Artifact, ArtifactRunner, RunOptions } from '../../../src/core/pipeline/target.js';
import { ELASTIC_LEVELS, findRecord, levelNotes, selectLevel } from '../../../src/core/records/index.js';
import { openGgufFile } from '../run.js';
import { MANIFEST_FILE } from '../../../src/core/records/manifest.js';
import { TARGET_INFO_LEVELS, targetInfoAs } from '../../../src/core/records/target-info.js';

export async function openGgufLevels(a: Artifact, opts: RunOptions): Promise<ArtifactRunner> {
  const record = findRecord(a.manifest.passes, ELASTIC_LEVELS, a.dir);
  const level = selectLevel(record?.levels ?? null, opts.level ?? '1', a.path);
  const files = targetInfoAs(TARGET_INFO_LEVELS, a.manifest.targetInfo, path.join(a.dir, MANIFEST_FILE)).levels ?? [];
  const file = files.find((l) => l.id === level.id)?.file ?? `${level.id}/model.gguf`;
  const runner = await openGgufFile(path.join(a.dir, file), a, { ...opts, level: undefined });
  runner.notes.unshift(...levelNotes(level, record!, runner.spec.vocabSize));
  return { ...runner, level: level.id };
}
