/** `llmc run` on a ts artifact: the TS runtime, at full width or at an elastic level, experts resident or cached. */
import type { Artifact, ArtifactRunner, RunOptions } from '../../src/core/pipeline/target.js';
import path from 'node:path';
import { LlmcError } from '../../src/core/errors.js';
import { ELASTIC_LEVELS, findRecord, levelWidths, MANIFEST_FILE, requireSpecTree, selectLevel, SPEC_TREE } from '../../src/core/records/index.js';
import { loadDir, tokenizerFiles } from '../../src/exec/runtime/node.js';
import type { Model } from '../../src/exec/runtime/model.js';
import { drafterFor, SpeculativeDecoder, treeFor } from '../../src/exec/runtime/speculative.js';

export async function openTs(a: Artifact, opts: RunOptions): Promise<ArtifactRunner> {
  const notes: string[] = [];
  if (opts.threads !== undefined) notes.push('--threads has no effect on the TS runtime (it runs on one thread)');
  let widths: ReturnType<typeof levelWidths> | undefined;
  let levelId: string | undefined;
  if (opts.level !== undefined) {
    const levels = findRecord(a.manifest.passes, ELASTIC_LEVELS, a.dir)?.levels ?? null;
    const level = selectLevel(levels, opts.level, a.path);
    widths = levelWidths(level);
    levelId = level.id;
    notes.push(`level ${level.id}: ${(100 * level.paramFrac).toFixed(1)}% of the parameters${level.heldOutPpl !== undefined ? `, held-out perplexity ${level.heldOutPpl.toFixed(2)}` : ''}`);
  }
  const model = await loadDir(a.dir, { verifyChecksums: opts.verify, experts: opts.experts });
  const speculative = opts.speculative ? await speculativeDecoder(a, model, opts.speculative.draft) : null;
  let stats: Record<string, unknown> | null = null;
  return {
    spec: model.spec,
    ...(await tokenizerFiles(a.dir)),
    notes,
    engine: 'ts-runtime',
    level: levelId,
    logits: (ids) => model.forwardAsync(ids, undefined, { widths }),
    async generate(promptIds, o) {
      if (speculative) {
        const r = speculative.decoder.generate(promptIds, { maxTokens: o.maxTokens, tree: speculative.tree });
        const steps = r.acceptedPerStep.length;
        stats = {
          draft: speculative.rec.draft,
          mode: speculative.rec.mode,
          target_steps: steps + 1,
          accepted_per_step: r.acceptedPerStep,
          mean_accepted_per_step: steps ? r.acceptedPerStep.reduce((x, y) => x + y, 0) / steps : null,
          tree_nodes: r.treeNodes,
          draft_calls: r.draftCalls,
          predicted: speculative.rec.plans.map((p) => ({ nodes: p.n, ...p.predicted })),
        };
        return r.tokens;
      }
      const out: number[] = [];
      for await (const id of model.generate(promptIds, { ...o, widths })) out.push(id);
      return out;
    },
    speculativeStats: () => stats,
    close: () => model.close(),
    expertStats: () => (model.experts ? { ...model.experts.stats, capacity: model.experts.capacity, policy: model.experts.policy, preload: model.experts.fanout } : null),
  };
}

/** The target's own verification tree (record spec-tree/1) and its draft: an elastic level, skipped layers, or `draft`'s artifact. */
async function speculativeDecoder(a: Artifact, model: Model, draftDir: string | undefined) {
  const file = path.join(a.dir, MANIFEST_FILE);
  const found = findRecord(a.manifest.passes, SPEC_TREE, file);
  if (!found) throw new LlmcError('--speculative needs an artifact compiled with --passes tree-search', a.path);
  const rec = requireSpecTree(found, file);
  const draft = draftDir !== undefined ? await loadDir(draftDir) : undefined;
  return { rec, tree: treeFor(rec), decoder: new SpeculativeDecoder(model, drafterFor(model, rec, draft)) };
}
