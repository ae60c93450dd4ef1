/**
 * A quick evaluation of an artifact against the checkpoint it was compiled from, on held-out data:
 * the source runs on the onnxruntime Engine, the artifact on whatever its target's runner uses (the
 * TS runtime, onnxruntime, llama.cpp), at full width or at one of its elastic levels.
 * `evaluateArtifact` is the one entry point (the end-of-compile summary, `llmc check`, `--check` and
 * `llmc report` use it).
 */
import { silentProgress, type Progress } from '../../core/util/progress.js';
import { TARGETS } from '../../../backends/index.js';
import type { ModelSource } from '../../core/checkpoint/source.js';
import { LlmcError, UsageError } from '../../core/errors.js';
import type { Artifact, ArtifactRunner } from '../../core/pipeline/target.js';
import { Engine } from '../../exec/engine/index.js';
import { artifactOffer, checkRunOptions } from '../../core/pipeline/run-usage.js';
import { calibrationSet, textFileSpec, type CalibrationSpec } from '../../measure/calibration.js';
import type { ProfileCache } from '../../measure/store.js';
import { compareModels, type QualityFigures } from './quality.js';
import { evaluableTargets } from './executors.js';

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
  /** What ran the artifact ('ts-runtime', 'onnxruntime', 'llama.cpp'). */
  executor: string;
  /** The elastic level evaluated (null: the full model). */
  level: string | null;
  /** Decode speed of the artifact's runner (when asked). */
  tokensPerSecond?: number;
}

export interface EvaluateOptions {
  /** The artifact (its path, directory and manifest). */
  artifact: Artifact;
  /** The checkpoint it was compiled from (its identity must match the manifest's source hash). */
  source: ModelSource;
  sequences: readonly number[][];
  /** An elastic level (id or size fraction) of an artifact compiled with --passes reorder. */
  level?: string;
  /** Measure the decode speed over this many tokens. */
  speedTokens?: number;
  threads?: number;
  /** One tick per held-out sequence (a big model takes minutes). */
  progress?: Progress;
}

/** The artifact's runner, through its target's descriptor. */
async function openRunner(o: EvaluateOptions): Promise<ArtifactRunner> {
  const { manifest } = o.artifact;
  const target = TARGETS.find((t) => t.name === manifest.target);
  if (!target?.open) throw new UsageError(`a ${manifest.target} artifact has no quality metrics here: llmc runs ${evaluableTargets().join(', ')} artifacts`);
  // --level on an artifact without levels is the same usage error (exit 2) as in llmc run.
  checkRunOptions(artifactOffer(o.artifact, target), { level: o.level });
  const runner = await target.open(o.artifact, { level: o.level, threads: o.threads });
  if (!runner.logits) {
    await runner.close();
    throw new UsageError(`${runner.engine} gives no logits for a ${manifest.target} artifact, so its quality is not measured`);
  }
  return runner;
}

/** Tokens per second of greedy decoding from BOS: the best of two runs after a warm-up (kernels compiled, buffers allocated). */
async function decodeSpeed(runner: ArtifactRunner, tokens: number): Promise<number> {
  const prompt = [runner.spec.bosTokenId ?? 0];
  const run = async (n: number) => {
    const t0 = performance.now();
    const got = await runner.generate(prompt, { maxTokens: n });
    return got.length / ((performance.now() - t0) / 1000);
  };
  await run(Math.min(4, tokens));
  return Math.max(await run(tokens), await run(tokens));
}

/** Perplexity, KL and greedy agreement of the artifact against its source on `sequences` (and its decode speed). */
export async function evaluateArtifact(o: EvaluateOptions): Promise<ArtifactQuality> {
  const [have, want] = [await o.source.identity(), o.artifact.manifest.source.sha256];
  // An empty sha256: a file without llmc's manifest (a llama.cpp GGUF), compared with the source the user named.
  if (want !== '' && have !== want) {
    throw new LlmcError(`is not the checkpoint ${o.artifact.path} was compiled from (sha256 ${have.slice(0, 12)}… ≠ the manifest's ${want.slice(0, 12)}…)`, o.source.description);
  }
  const runner = await openRunner(o);
  const engine = await Engine.open(o.source, { threads: o.threads }).catch(async (e) => {
    await runner.close();
    throw e;
  });
  try {
    const progress = o.progress ?? silentProgress;
    progress.start(`quality: the artifact on ${runner.engine} against the source`, o.sequences.length);
    const figures = await compareModels((ids) => engine.logits(ids), runner.logits!, o.sequences, o.source.spec.vocabSize, () => progress.tick()).finally(() => progress.done());
    const out: ArtifactQuality = { ...figures, executor: runner.engine, level: runner.level ?? null };
    if (o.speedTokens) out.tokensPerSecond = await decodeSpeed(runner, o.speedTokens);
    return out;
  } finally {
    await engine.close();
    await runner.close();
  }
}

/** The end-of-compile evaluation: figures on the default held-out set, or why there are none. */
export type QuickEvaluation =
  | { measured: true; quality: ArtifactQuality; heldOut: { source: CalibrationSpec['source']; sequences: number; length: number; seed: number } }
  | { measured: false; reason: string };

/**
 * Quality of a freshly compiled artifact against its source on the default held-out set (shared with
 * the reorder pass's calibration draw, so usually cached). An artifact llmc cannot run, or whose
 * runner is missing here (node-llama-cpp for GGUF), has no figures and a reason instead: the compile
 * itself succeeded.
 */
export async function quickEvaluation(artifact: Artifact, source: ModelSource, cacheDir?: ProfileCache, progress?: Progress): Promise<QuickEvaluation> {
  if (!TARGETS.find((t) => t.name === artifact.manifest.target)?.open) {
    return { measured: false, reason: `llmc does not run ${artifact.manifest.target} artifacts (it runs ${evaluableTargets().join(', ')})` };
  }
  try {
    const held = await heldOutSet(source, { cacheDir });
    const quality = await evaluateArtifact({ artifact, source, sequences: held.sequences, progress });
    return { measured: true, quality, heldOut: { source: held.spec.source, sequences: held.sequences.length, length: held.spec.length, seed: held.spec.seed } };
  } catch (e) {
    if (!(e instanceof LlmcError)) throw e;
    return { measured: false, reason: e.line };
  }
}
