/**
 * The ts target's runner for quality evaluation of a large artifact: the windows' logits computed
 * one model piece at a time (src/exec/runtime/streamed.ts), so memory holds one decoder layer's
 * weights and the windows' hidden states, not the model. It generates nothing.
 */
import type { Artifact, ArtifactRunner, RunOptions } from '../../src/core/pipeline/target.js';
import { LlmcError } from '../../src/core/errors.js';
import { aboveStreamThreshold } from '../../src/exec/stream/size.js';
import { TS_INFO, WEIGHTS_FILE } from '../../src/exec/runtime/format.js';
import { artifactDirSource, nodeWorker, tokenizerFiles } from '../../src/exec/runtime/node.js';
import { StreamedArtifact } from '../../src/exec/runtime/streamed.js';
import { MANIFEST_FILE } from '../../src/core/records/index.js';
import os from 'node:os';
import path from 'node:path';

/** Whether evaluating `a` runs it layer-streamed: as asked, else when its weights are above the streaming threshold. */
export function streamsEvaluation(a: Artifact, windows: NonNullable<RunOptions['windows']>): boolean {
  if (windows.stream !== undefined) return windows.stream;
  const name = TS_INFO.read(a.manifest.targetInfo, path.join(a.dir, MANIFEST_FILE)).weights || WEIGHTS_FILE;
  const bytes = a.manifest.files.find((f) => f.path === name)?.size ?? 0;
  return aboveStreamThreshold(bytes);
}

export async function openStreamedTs(a: Artifact, opts: RunOptions & { windows: NonNullable<RunOptions['windows']> }): Promise<ArtifactRunner> {
  const source = await artifactDirSource(a.dir);
  try {
    const streamed = await StreamedArtifact.open(source);
    const windows = opts.windows.ids;
    // Every core unless told: the pieces' logits are the same bits on any number of threads.
    const threads = opts.threads ?? os.availableParallelism();
    const computed = await streamed.windows(windows, { level: opts.level, progress: opts.windows.progress, threads, pool: { spawn: nodeWorker } });
    const index = new Map(windows.map((w, i) => [w, i]));
    return {
      spec: streamed.spec,
      ...(await tokenizerFiles(a.dir)),
      notes: [`evaluated layer by layer: one decoder layer's weights in memory at a time (${windows.length} windows, ${computed.threads} thread${computed.threads > 1 ? 's' : ''})`],
      engine: 'ts-runtime',
      level: computed.level,
      logits: async (ids) => {
        const i = index.get(ids);
        if (i === undefined) throw new LlmcError('internal: a layer-streamed ts runner gives logits of the windows it was opened with only');
        return computed.logits(i);
      },
      generate: async () => {
        throw new LlmcError('internal: a layer-streamed ts runner evaluates windows; it does not generate');
      },
      close: async () => {
        computed.close();
        await source.close();
      },
    };
  } catch (e) {
    await source.close();
    throw e;
  }
}
