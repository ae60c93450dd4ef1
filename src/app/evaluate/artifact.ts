/**
 * A quick evaluation of an artifact against the checkpoint it was compiled from, on held-out data:
 * the source runs on onnxruntime (the whole-model Engine, or layer by layer for a model whose float32
 * graph is large: src/exec/stream), the artifact on whatever its target's runner uses (the
 * TS runtime, onnxruntime, llama.cpp), at full width or at one of its elastic levels.
 * `evaluateArtifact` is the one entry point (the end-of-compile summary, `llmc check`, `--check` and
 * `llmc report` use it).
 */
import { silentProgress, type Progress } from '../../core/util/progress.js';
import { TARGETS } from '../../../backends/index.js';
import type { ModelSource } from '../../core/checkpoint/source.js';
import { LlmcError, UsageError } from '../../core/errors.js';
import type { Artifact, ArtifactRunner, RunOptions, TargetDescriptor } from '../../core/pipeline/target.js';
import { sourceLogits } from '../../measure/source-logits.js';
import { artifactOffer, checkRunOptions } from '../../core/pipeline/run-usage.js';
import { calibrationSet, textFileSpec, type CalibrationSpec } from '../../measure/calibration.js';
import { idSequencesOf, idWindows } from '../../measure/sequences.js';
import { loadTokenizer } from '../../core/tokenizer/index.js';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { ProfileCache } from '../../measure/store.js';
import { DEFAULT_EVAL_TOKENS, EVAL_DRAW_SEED, EVAL_SEED, EVAL_WINDOW, SELF_GENERATED_LENGTH } from './defaults.js';
import { compareModels, type QualityFigures } from './quality.js';
import { evaluableTargets } from './executors.js';
import { RUN_CATALOG } from '../artifact.js';

export { DEFAULT_EVAL_TOKENS, EVAL_WINDOW, SELF_GENERATED_LENGTH, EVAL_SEED };

/** Where the held-out windows come from. */
export type HeldOutSource = 'self-generated' | { text: string; sha256: string; builtIn?: true };

export interface HeldOut {
  /** The windows (sequences), each scored at every position but the last. */
  sequences: number[][];
  source: HeldOutSource;
  /** Tokens scored: Σ (window length − 1). */
  tokens: number;
  /** Length of each window. */
  length: number;
  /** Seed of a self-generated set (null for text). */
  seed: number | null;
  /** Names this exact set: the calibration profile key of a self-generated set, sha256:… of a text. */
  profile: string;
}

/** llmc's built-in held-out text (data/eval/heldout.txt; see data/eval/README.md), from src/ or dist/. */
export function builtInEvalText(): string {
  for (const rel of ['../../../data/eval/heldout.txt', '../../../../data/eval/heldout.txt', '../data/eval/heldout.txt']) {
    const file = fileURLToPath(new URL(rel, import.meta.url));
    if (existsSync(file)) return file;
  }
  throw new LlmcError('internal: the built-in held-out text data/eval/heldout.txt is missing from this install');
}

export interface HeldOutOptions {
  /** A text file (or JSON token ids); default: the built-in text when the model has a tokenizer, else sampled from the model. */
  text?: string;
  /** Tokens to score (default DEFAULT_EVAL_TOKENS): whole windows, so a little more. */
  tokens?: number;
  cacheDir?: ProfileCache;
}

/**
 * The held-out windows of `source`: of the given text, else of the built-in held-out text when the
 * model has a tokenizer, else sequences sampled from the model (seeded, disjoint from calibration).
 */
export async function heldOutSet(source: ModelSource, opts: HeldOutOptions = {}): Promise<HeldOut> {
  const tokens = opts.tokens ?? DEFAULT_EVAL_TOKENS;
  if (!Number.isInteger(tokens) || tokens < 1) throw new UsageError(`--eval-tokens must be a positive integer, got ${tokens}`);
  const text = opts.text ?? (source.assets.tokenizer ? builtInEvalText() : undefined);
  if (text !== undefined) return textHeldOut(source, text, tokens, opts.text === undefined);
  const length = Math.min(SELF_GENERATED_LENGTH, source.spec.maxPositions);
  const spec: CalibrationSpec = { source: 'self-generated', count: 10, length, seed: EVAL_DRAW_SEED, heldOut: Math.ceil(tokens / (length - 1)) };
  const set = await calibrationSet(source, spec, { cacheDir: opts.cacheDir });
  return { sequences: set.heldOut, source: 'self-generated', tokens: set.heldOut.length * (length - 1), length, seed: EVAL_DRAW_SEED, profile: set.key };
}

/** Whole windows of `file` (text through the model's tokenizer, or JSON token ids), enough for `tokens` scored tokens. */
async function textHeldOut(source: ModelSource, file: string, tokens: number, builtIn: boolean): Promise<HeldOut> {
  const content = await readFile(file, 'utf8').catch((e: NodeJS.ErrnoException) => {
    throw new LlmcError(`cannot read the held-out text: ${e.code ?? e.message}`, file);
  });
  const sha256 = createHash('sha256').update(content).digest('hex');
  const length = Math.min(EVAL_WINDOW, source.spec.maxPositions);
  const bos = source.spec.bosTokenId;
  const idSeqs = idSequencesOf(content, source.spec.vocabSize, file);
  let windows: number[][];
  if (idSeqs) windows = idSeqs.flatMap((s) => idWindows(s, length)).filter((w) => w.length === length);
  else {
    if (!source.assets.tokenizer) {
      throw new LlmcError('held-out text given, but the model has no tokenizer.json to encode it (give token ids as JSON [[1, 5, ...], ...], or leave --eval-text out for sequences sampled from the model)', file);
    }
    const ids = loadTokenizer(source.assets.tokenizer, source.assets.tokenizerConfig).encode(content);
    const body = bos != null && ids[0] === bos ? ids.slice(1) : ids;
    // Every window starts like a document: BOS, then the next length − 1 tokens of the text.
    const step = bos != null ? length - 1 : length;
    windows = [];
    for (let i = 0; i + step <= body.length; i += step) windows.push(bos != null ? [bos, ...body.slice(i, i + step)] : body.slice(i, i + step));
  }
  const need = Math.ceil(tokens / (length - 1));
  if (windows.length === 0) throw new LlmcError(`is shorter than one window of ${length} tokens: give a longer held-out text`, file);
  if (windows.length < need) {
    throw new LlmcError(`gives ${windows.length} whole windows of ${length} tokens, ${need} needed to score ${tokens} tokens: give a longer text, or fewer with --eval-tokens ${windows.length * (length - 1)}`, file);
  }
  // Spread evenly over the text, so a short evaluation still samples all of it.
  const sequences = Array.from({ length: need }, (_, k) => windows[Math.floor((k * windows.length) / need)]);
  return { sequences, source: { text: file, sha256, ...(builtIn ? { builtIn: true as const } : {}) }, tokens: need * (length - 1), length, seed: null, profile: `sha256:${sha256}` };
}

export interface ArtifactQuality extends QualityFigures {
  /** What ran the artifact ('ts-runtime', 'onnxruntime', 'llama.cpp'). */
  executor: string;
  /** The elastic level evaluated (null: the full model). */
  level: string | null;
  /** What ran the source: 'onnxruntime' (one graph) or 'onnxruntime, layer-streamed' (a large model). */
  sourceExecutor: string;
  /** Decode speed of the artifact's runner (when asked). */
  tokensPerSecond?: number;
  /** That run's latency per token in ms (when asked). */
  tokenMs?: number[];
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
  /** One tick per held-out window (a big model takes minutes). */
  progress?: Progress;
  /** The profile cache: a layer-streamed source's pieces are stored there (a stopped evaluation resumes per block). */
  cacheDir?: ProfileCache;
  /** Run the source (and a ts artifact) layer-streamed (true) or whole (false); default: streamed for a large model. */
  stream?: boolean;
}

/** The artifact's target, checked to run it as asked (before any work). */
function runnableTarget(o: EvaluateOptions): TargetDescriptor & Required<Pick<TargetDescriptor, 'open'>> {
  const { manifest } = o.artifact;
  const target = TARGETS.find((t) => t.name === manifest.target);
  if (!target?.open) throw new UsageError(`a ${manifest.target} artifact has no quality metrics here: llmc runs ${evaluableTargets().join(', ')} artifacts`);
  // --level on an artifact without levels is the same usage error (exit 2) as in llmc run.
  checkRunOptions(artifactOffer(o.artifact, target), { level: o.level }, RUN_CATALOG);
  return target as TargetDescriptor & Required<Pick<TargetDescriptor, 'open'>>;
}

/** The artifact's runner, through its target's descriptor. */
async function openRunner(o: EvaluateOptions, windows?: RunOptions['windows']): Promise<ArtifactRunner> {
  const { manifest } = o.artifact;
  const target = runnableTarget(o);
  const runner = await target.open(o.artifact, { level: o.level, threads: o.threads, windows });
  if (!runner.logits) {
    await runner.close();
    throw new UsageError(`${runner.engine} gives no logits for a ${manifest.target} artifact, so its quality is not measured`);
  }
  return runner;
}

/** Decode speed: tokens per second and each token's latency (ms after the one before; the first's includes the prompt's prefill). */
export interface DecodeSpeed {
  tokensPerSecond: number;
  tokenMs: number[];
}

/** Greedy decoding from BOS: the faster of two runs after a warm-up (kernels compiled, buffers allocated), timed per token. */
async function decodeSpeed(runner: ArtifactRunner, tokens: number): Promise<DecodeSpeed> {
  const prompt = [runner.spec.bosTokenId ?? 0];
  const run = async (n: number): Promise<DecodeSpeed> => {
    const t0 = performance.now();
    const at: number[] = [];
    const got = await runner.generate(prompt, { maxTokens: n, onToken: () => at.push(performance.now()) });
    const ms = performance.now() - t0;
    return { tokensPerSecond: got.length / (ms / 1000), tokenMs: at.map((t, i) => Number((t - (i ? at[i - 1] : t0)).toFixed(3))) };
  };
  await run(Math.min(4, tokens));
  const [a, b] = [await run(tokens), await run(tokens)];
  return a.tokensPerSecond >= b.tokensPerSecond ? a : b;
}

/** Perplexity, KL and greedy agreement of the artifact against its source on `sequences` (and its decode speed). */
export async function evaluateArtifact(o: EvaluateOptions): Promise<ArtifactQuality> {
  const [have, want] = [await o.source.identity(), o.artifact.manifest.source.sha256];
  // An empty sha256: a file without llmc's manifest (a llama.cpp GGUF), compared with the source the user named.
  if (want !== '' && have !== want) {
    throw new LlmcError(`is not the checkpoint ${o.artifact.path} was compiled from (sha256 ${have.slice(0, 12)}… ≠ the manifest's ${want.slice(0, 12)}…)`, o.source.description);
  }
  runnableTarget(o);
  const progress = o.progress ?? silentProgress;
  // the source first: streamed, its logits go to disk before the artifact's runner takes memory
  const cache = typeof o.cacheDir === 'string' ? o.cacheDir : o.cacheDir?.policy === 'on' ? o.cacheDir.dir : undefined;
  const reference = await sourceLogits(o.source, o.sequences, { threads: o.threads, stream: o.stream, progress, cacheDir: cache });
  // Without a speed run the runner only scores the windows: a large ts artifact then runs layer by layer.
  const windows = o.speedTokens ? undefined : { ids: o.sequences, stream: o.stream, progress };
  const runner = await openRunner(o, windows).catch(async (e) => {
    await reference.close();
    throw e;
  });
  try {
    progress.start(`quality: the artifact on ${runner.engine} against the source, ${o.sequences.length} windows`, o.sequences.length);
    const figures = await compareModels(reference.logits, runner.logits!, o.sequences, o.source.spec.vocabSize, () => progress.tick()).finally(() => progress.done());
    const out: ArtifactQuality = { ...figures, executor: runner.engine, level: runner.level ?? null, sourceExecutor: reference.executor };
    if (o.speedTokens) Object.assign(out, await decodeSpeed(runner, o.speedTokens));
    return out;
  } finally {
    await reference.close();
    await runner.close();
  }
}

/** What a held-out set was, for summaries: everything but the ids. */
export type HeldOutFacts = Omit<HeldOut, 'sequences'> & { sequences: number };

export const heldOutFacts = (h: HeldOut): HeldOutFacts => ({ ...h, sequences: h.sequences.length });

/** The end-of-compile evaluation: figures on the held-out set, or why there are none. */
export type QuickEvaluation = { measured: true; quality: ArtifactQuality; heldOut: HeldOutFacts } | { measured: false; reason: string };

/**
 * Quality of a freshly compiled artifact against its source on `held` (default: heldOutSet's default
 * for the model). An artifact llmc cannot run, or whose runner is missing here (node-llama-cpp for
 * GGUF), has no figures and a reason instead: the compile itself succeeded.
 */
export async function quickEvaluation(artifact: Artifact, source: ModelSource, o: { held?: HeldOut; tokens?: number; cacheDir?: ProfileCache; progress?: Progress } = {}): Promise<QuickEvaluation> {
  if (!TARGETS.find((t) => t.name === artifact.manifest.target)?.open) {
    return { measured: false, reason: `llmc does not run ${artifact.manifest.target} artifacts (it runs ${evaluableTargets().join(', ')})` };
  }
  try {
    const held = o.held ?? (await heldOutSet(source, { tokens: o.tokens, cacheDir: o.cacheDir }));
    const quality = await evaluateArtifact({ artifact, source, sequences: held.sequences, progress: o.progress, cacheDir: o.cacheDir });
    return { measured: true, quality, heldOut: heldOutFacts(held) };
  } catch (e) {
    if (!(e instanceof LlmcError)) throw e;
    return { measured: false, reason: e.line };
  }
}
