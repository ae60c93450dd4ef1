/** `llmc run` on a gguf-levels artifact: the level's GGUF in llama.cpp (--level picks it; default the largest). */
import path from 'node:path';
import type { Artifact, ArtifactRunner, RunOptions } from '../../src/core/pipeline/target.js';
import { ELASTIC_LEVELS, findRecord, selectLevel } from '../../src/core/records/index.js';
import { openGgufFile } from '../gguf/run.js';

export async function openGgufLevels(a: Artifact, opts: RunOptions): Promise<ArtifactRunner> {
  const levels = findRecord(a.manifest.passes, ELASTIC_LEVELS, a.dir)?.levels ?? null;
  const level = selectLevel(levels, opts.level ?? '1', a.path);
  const files = (a.manifest.targetInfo.levels as { id: string; file: string }[] | undefined) ?? [];
  const file = files.find((l) => l.id === level.id)?.file ?? `${level.id}/model.gguf`;
  const runner = await openGgufFile(path.join(a.dir, file), a, { ...opts, level: undefined });
  runner.notes.unshift(`level ${level.id}: ${(100 * level.paramFrac).toFixed(1)}% of the parameters`);
  return { ...runner, level: level.id };
}
