/** `llmc run` on a ts artifact: the TS runtime, at full width or at an elastic level, experts resident or cached. */
import type { Artifact, ArtifactRunner, RunOptions } from '../../src/core/pipeline/target.js';
import { ELASTIC_LEVELS, findRecord, levelWidths, selectLevel } from '../../src/core/records/index.js';
import { loadDir, tokenizerFiles } from '../../src/exec/runtime/node.js';

export async function openTs(a: Artifact, opts: RunOptions): Promise<ArtifactRunner> {
  const notes: string[] = [];
  if (opts.threads !== undefined) notes.push('--threads has no effect on the TS runtime (it runs on one thread)');
  let widths: ReturnType<typeof levelWidths> | undefined;
  if (opts.level !== undefined) {
    const levels = findRecord(a.manifest.passes, ELASTIC_LEVELS, a.dir)?.levels ?? null;
    const level = selectLevel(levels, opts.level, a.path);
    widths = levelWidths(level);
    notes.push(`level ${level.id}: ${(100 * level.paramFrac).toFixed(1)}% of the parameters${level.heldOutPpl !== undefined ? `, held-out perplexity ${level.heldOutPpl.toFixed(2)}` : ''}`);
  }
  const model = await loadDir(a.dir, { verifyChecksums: opts.verify, experts: opts.experts });
  return {
    spec: model.spec,
    ...(await tokenizerFiles(a.dir)),
    notes,
    async generate(promptIds, o) {
      const out: number[] = [];
      for await (const id of model.generate(promptIds, { ...o, widths })) out.push(id);
      return out;
    },
    close: () => model.close(),
    expertStats: () => (model.experts ? { ...model.experts.stats, capacity: model.experts.capacity, policy: model.experts.policy, preload: model.experts.fanout } : null),
  };
}
