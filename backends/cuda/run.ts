/**
 * `llmc run` on a cuda artifact: its onnx/model.onnx on onnxruntime, or with --level the graph of
 * that elastic level (the elastic-prefix record picks the level, targetInfo names its graph), or with
 * --chunk a prefill through its chunk graphs in the scheduled order, then decoding on model.onnx.
 */
import type { Artifact, ArtifactRunner, RunOptions } from '../../src/core/pipeline/target.js';
import { ELASTIC_LEVELS, findRecord, levelNotes, selectLevel } from '../../src/core/records/index.js';
import { openDecoderDir } from '../../src/exec/engine/decoder-dir.js';
import path from 'node:path';
import { MANIFEST_FILE } from '../../src/core/records/manifest.js';
import { CUDA_INFO } from './info.js';

export async function openCuda(a: Artifact, opts: RunOptions): Promise<ArtifactRunner> {
  let graph: string | undefined;
  let notes: string[] = [];
  let levelId: string | undefined;
  if (opts.level !== undefined) {
    const record = findRecord(a.manifest.passes, ELASTIC_LEVELS, a.dir);
    const level = selectLevel(record?.levels ?? null, opts.level, a.path);
    // A level that keeps every unit is the full graph.
    graph = CUDA_INFO.read(a.manifest.targetInfo, path.join(a.dir, MANIFEST_FILE)).levels?.find((l) => l.id === level.id)?.file;
    levelId = level.id;
    notes = levelNotes(level, record!, a.manifest.arch.vocabSize);
  }
  const runner = await openDecoderDir(a.dir, { threads: opts.threads, graph });
  runner.notes.push(...notes);
  if (opts.chunk !== undefined) {
    try {
      return await (await import('./run-chunks.js')).chunkedRunner(a, opts, runner);
    } catch (err) {
      await runner.close();
      throw err;
    }
  }
  return { ...runner, level: levelId };
}
