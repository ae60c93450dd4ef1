/**
 * A quick evaluation of an artifact against the checkpoint it was compiled from, on held-out
 * data: the source runs on the onnxruntime Engine, a `ts` artifact on the TS runtime (at full width
 * or at one of its elastic levels), an `hf` artifact on the Engine too. `evaluateArtifact` is the one
 * entry point (`llmc check`, `--check`, `llmc report` and the end-of-compile summary use it).
 */
import path from 'node:path';
import type { ModelSource } from '../../core/checkpoint/source.js';
import { openCheckpoint } from '../../core/checkpoint/index.js';
import { LlmcError, UsageError } from '../../core/errors.js';
import { ELASTIC_LEVELS, findRecord, type LayerWidth, levelWidths, MANIFEST_FILE, selectLevel, type Manifest } from '../../core/records/index.js';
import { Engine } from '../../exec/engine/index.js';
import { loadDir } from '../../exec/runtime/node.js';
import { calibrationSet, textFileSpec, type CalibrationSpec } from '../profile/calibration.js';
import type { ProfileCache } from '../profile/store.js';
import { compareModels, type LogitsFn, type QualityFigures } from './quality.js';

import { executorOf, type Executor } from './executors.js';

export { executorOf, type Executor };

/**
 * The held-out set evaluations use by default: the reorder pass's default calibration spec, so
 * one cached draw serves both (its held-out half comes from a derived seed, disjoint from calibration).
 */
export const DEFAULT_EVAL_SPEC: Omit<CalibrationSpec, 'source'> = { count: 10, length: 64, seed: 42, heldOut: 10 };

export interface HeldOut {
  sequences: number[][];
  spec: CalibrationSpec;
  /** The calibration profile key (names this exact set). */
  profile: string;
}

/** Held-out sequences of `source`: sampled from it (seeded), or windows of a text file (`text`). */
export async function heldOutSet(source: ModelSource, opts: { text?: string; sequences?: number; length?: number; seed?: number; cacheDir?: ProfileCache } = {}): Promise<HeldOut> {
  const spec: CalibrationSpec = {
    source: opts.text ? await textFileSpec(opts.text) : 'self-generated',
    count: DEFAULT_EVAL_SPEC.count,
    length: opts.length ?? DEFAULT_EVAL_SPEC.length,
    seed: opts.seed ?? DEFAULT_EVAL_SPEC.seed,
    heldOut: opts.sequences ?? DEFAULT_EVAL_SPEC.heldOut,
  };
  const set = await calibrationSet(source, spec, { cacheDir: opts.cacheDir });
  return { sequences: set.heldOut, spec, profile: set.key };
}

export interface ArtifactQuality extends QualityFigures {
  executor: Executor;
  /** The elastic level evaluated (null: the full model). */
  level: string | null;
  /** Decode speed of the TS runtime (ts artifacts, when asked). */
  tokensPerSecond?: number;
}

export interface EvaluateOptions {
  /** The artifact directory and its manifest (readManifest). */
  dir: string;
  manifest: Manifest;
  /** The checkpoint it was compiled from (its identity must match the manifest's source hash). */
  source: ModelSource;
  sequences: readonly number[][];
  /** An elastic level (id or size fraction) of a ts artifact compiled with --passes reorder. */
  level?: string;
  /** Measure the TS runtime's decode speed over this many tokens (ts artifacts only). */
  speedTokens?: number;
}

/** The artifact's logits (and decode speed) on its own executor. */
async function openArtifact(o: EvaluateOptions): Promise<{ executor: Executor; logits: LogitsFn; level: string | null; speed?: (n: number) => Promise<number>; close(): Promise<void> }> {
  const where = path.join(o.dir, MANIFEST_FILE);
  const executor = executorOf(o.manifest.target);
  if (!executor) throw new UsageError(`a ${o.manifest.target} artifact has no quality metrics here: they run ts artifacts (TS runtime) and hf artifacts (onnxruntime)`);
  if (executor === 'onnxruntime') {
    if (o.level !== undefined) throw new UsageError('--level needs a ts artifact (an hf artifact is the full model)');
    const ckpt = await openCheckpoint(o.dir);
    const engine = await Engine.open(ckpt).catch(async (e) => {
      await ckpt.close();
      throw e;
    });
    return { executor, level: null, logits: (ids) => engine.logits(ids), close: async () => (await engine.close(), await ckpt.close()) };
  }
  const model = await loadDir(o.dir);
  let widths: LayerWidth[] | undefined;
  let level: string | null = null;
  if (o.level !== undefined) {
    const lv = selectLevel(findRecord(o.manifest.passes, ELASTIC_LEVELS, where)?.levels ?? null, o.level, o.dir);
    widths = levelWidths(lv);
    level = lv.id;
  }
  const speed = async (n: number) => {
    const run = async (tokens: number) => {
      const t0 = performance.now();
      let k = 0;
      for await (const _ of model.generate([model.spec.bosTokenId ?? 0], { maxTokens: tokens, stopTokens: [], widths })) k++;
      return k / ((performance.now() - t0) / 1000);
    };
    await run(Math.min(4, n)); // warm-up: kernels compiled, buffers allocated
    return Math.max(await run(n), await run(n));
  };
  return { executor, level, logits: async (ids) => model.forward(ids, undefined, { widths }), speed, close: async () => {} };
}

/** Perplexity, KL and greedy agreement of the artifact against its source on `sequences` (and its decode speed). */
export async function evaluateArtifact(o: EvaluateOptions): Promise<ArtifactQuality> {
  const [have, want] = [await o.source.identity(), o.manifest.source.sha256];
  if (have !== want) {
    throw new LlmcError(`is not the checkpoint ${o.dir} was compiled from (sha256 ${have.slice(0, 12)}… ≠ the manifest's ${want.slice(0, 12)}…)`, o.source.description);
  }
  const artifact = await openArtifact(o);
  const engine = await Engine.open(o.source);
  try {
    const figures = await compareModels((ids) => engine.logits(ids), artifact.logits, o.sequences, o.source.spec.vocabSize);
    const out: ArtifactQuality = { ...figures, executor: artifact.executor, level: artifact.level };
    if (o.speedTokens) {
      if (!artifact.speed) throw new UsageError('tokens/s is measured on the TS runtime: it needs a ts artifact');
      out.tokensPerSecond = await artifact.speed(o.speedTokens);
    }
    return out;
  } finally {
    await engine.close();
    await artifact.close();
  }
}
