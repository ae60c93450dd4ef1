/**
 * The CI step: measure what a budget file asks of an artifact and judge it. Only the metrics the
 * budgets name are measured (bytes are free; quality needs the source checkpoint and a forward pass
 * over held-out data on both; tokens/s a short decode on the artifact's runner). The JSON summary is
 * `llmc-check/1` (docs/ci.md).
 */
import type { ModelSource } from '../../core/checkpoint/source.js';
import { openCheckpoint } from '../../core/checkpoint/index.js';
import { LlmcError, UsageError } from '../../core/errors.js';
import type { Manifest } from '../../core/records/manifest.js';
import type { ProfileCache } from '../../measure/store.js';
import { evaluateArtifact, heldOutFacts, heldOutSet, type ArtifactQuality, type HeldOut, type HeldOutFacts } from '../evaluate/artifact.js';
import type { QualityFigures } from '../evaluate/quality.js';
import type { Artifact } from '../../core/pipeline/target.js';
import { judge, RUN_METRICS, unmeasurable, type BudgetResult, type Budgets, type Metric } from './budgets.js';

export const CHECK_SCHEMA = 'llmc-check/1';
/** Tokens decoded to measure tokens_per_s. */
export const SPEED_TOKENS = 64;

export interface CheckSummary {
  schema: typeof CHECK_SCHEMA;
  artifact: string;
  target: string;
  ok: boolean;
  /** The figures measured (only those the budgets needed). */
  metrics: Partial<Record<Metric, number>>;
  /** One entry per bound, in METRICS order. */
  results: BudgetResult[];
  /** How quality and speed were measured; null when no budget needed them. */
  evaluation: null | {
    executor: string;
    /** What ran the source: 'onnxruntime', or 'onnxruntime, layer-streamed' for a large model. */
    sourceExecutor: string;
    level: string | null;
    heldOut: HeldOutFacts;
    positions: number;
    sourcePpl: number;
    artifactPpl: number;
    speedTokens: number | null;
    /** Every quality figure with its 95% confidence interval (src/app/evaluate/stats.ts). */
    figures: Omit<QualityFigures, 'sequences' | 'positions'>;
  };
}

export interface CheckOptions {
  artifact: Artifact;
  budgets: Budgets;
  budgetFile: string;
  /** The open source checkpoint (compile --check), or its directory; default: the manifest's source path. */
  source?: ModelSource;
  sourceDir?: string;
  level?: string;
  /** Held-out text (default: the built-in text for a model with a tokenizer, else sequences sampled from the source). */
  evalText?: string;
  /** Tokens to score (default DEFAULT_EVAL_TOKENS). */
  evalTokens?: number;
  /** The held-out set, already computed (compile --check reuses the compile's). */
  held?: HeldOut;
  /** The compile's full-width evaluation on this same held-out set (compile --check): reused rather than run again when no level or speed is asked. */
  measured?: { quality: ArtifactQuality; heldOut: HeldOutFacts };
  cacheDir?: ProfileCache;
  /** Why the artifact is not to be run here (compile --check after --no-eval): every budget but bytes fails with it. */
  notRun?: string;
}

export async function checkArtifact(o: CheckOptions): Promise<CheckSummary> {
  const { manifest } = o.artifact;
  const metrics: Partial<Record<Metric, number>> = { bytes: manifest.files.reduce((a, f) => a + f.size, 0) };
  // A budget on a figure that cannot be measured here fails with the reason; it never passes.
  const unmeasured = o.notRun !== undefined ? Object.fromEntries(RUN_METRICS.map((m) => [m, o.notRun!])) : unmeasurable(o.budgets, manifest.target);
  let evaluation: CheckSummary['evaluation'] = null;
  const needsQuality = RUN_METRICS.some((m) => o.budgets[m] && unmeasured[m] === undefined);
  if (needsQuality || (o.level !== undefined && o.notRun === undefined)) {
    if (!o.source && o.sourceDir === undefined && manifest.source.sha256 === '') {
      throw new UsageError(`${o.artifact.path}: a GGUF without llmc's manifest names no source checkpoint for the quality budgets; give it with --source DIR`);
    }
    const speedTokens = o.budgets.tokens_per_s ? SPEED_TOKENS : undefined;
    const reuse = o.measured !== undefined && o.level === undefined && speedTokens === undefined ? o.measured : undefined;
    const opened = o.source || reuse ? undefined : await openSource(o.sourceDir ?? manifest.source.path, o.sourceDir === undefined);
    const source = o.source ?? opened!;
    try {
      let q: ArtifactQuality;
      let heldOut: HeldOutFacts;
      if (reuse) ({ quality: q, heldOut } = reuse);
      else {
        const held = o.held ?? (await heldOutSet(source, { text: o.evalText, tokens: o.evalTokens, cacheDir: o.cacheDir }));
        q = await evaluateArtifact({ artifact: o.artifact, source, sequences: held.sequences, level: o.level, speedTokens });
        heldOut = heldOutFacts(held);
      }
      Object.assign(metrics, { ppl_delta: q.pplDelta, ppl_ratio: q.pplRatio, kl_delta: q.kl, kl_p99: q.klP99, greedy_agreement: q.greedyAgreement });
      if (q.tokensPerSecond !== undefined) metrics.tokens_per_s = q.tokensPerSecond;
      const { executor, sourceExecutor, level, sequences: _s, positions, tokensPerSecond: _t, tokenMs: _m, ...figures } = q;
      evaluation = {
        executor,
        sourceExecutor,
        level,
        heldOut,
        positions,
        sourcePpl: q.referencePpl,
        artifactPpl: q.candidatePpl,
        speedTokens: speedTokens ?? null,
        figures,
      };
    } finally {
      await opened?.close();
    }
  }
  const results = judge(o.budgets, metrics, unmeasured);
  return { schema: CHECK_SCHEMA, artifact: o.artifact.path, target: manifest.target, ok: results.every((r) => r.ok), metrics, results, evaluation };
}

async function openSource(dir: string, fromManifest: boolean) {
  try {
    return await openCheckpoint(dir);
  } catch (e) {
    if (!fromManifest || !(e instanceof LlmcError)) throw e;
    throw new LlmcError(`${e.message} (the artifact's source checkpoint, as its manifest records it; give it with --source DIR)`, e.file);
  }
}
