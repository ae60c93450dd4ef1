/**
 * `llmc run` on a cuda artifact: its onnx/model.onnx on onnxruntime, or with --level the graph of
 * that elastic level (the elastic-prefix record picks the level, targetInfo names its graph).
 */
import type { Artifact, ArtifactRunner, RunOptions } from '../../src/core/pipeline/target.js';
import { ELASTIC_LEVELS, findRecord, selectLevel } from '../../src/core/records/index.js';
import { openDecoderDir } from '../../src/exec/engine/decoder-dir.js';

export async function openCuda(a: Artifact, opts: RunOptions): Promise<ArtifactRunner> {
  let graph: string | undefined;
  let note: string | null = null;
  let levelId: string | undefined;
  if (opts.level !== undefined) {
    const level = selectLevel(findRecord(a.manifest.passes, ELASTIC_LEVELS, a.dir)?.levels ?? null, opts.level, a.path);
    // A level that keeps every unit is the full graph.
    graph = (a.manifest.targetInfo.levels as { id: string; file: string }[] | undefined)?.find((l) => l.id === level.id)?.file;
    levelId = level.id;
    note = `level ${level.id}: ${(100 * level.paramFrac).toFixed(1)}% of the parameters`;
  }
  const runner = await openDecoderDir(a.dir, { threads: opts.threads, graph });
  if (note) runner.notes.push(note);
  return { ...runner, level: levelId };
}
