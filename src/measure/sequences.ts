/**
 * Calibration data. Without text or a tokenizer, sequences are sampled from the model itself
 * (data-free calibration): start at BOS, sample with a fixed seed at temperature 1. A held-out
 * set comes from a different, derived seed so it never overlaps the calibration draw by design.
 */
import { LlmcError, UsageError } from '../core/errors.js';
import type { ArchSpec } from '../core/arch/spec.js';
import { Sampler } from '../core/sampling.js';
import { Rng } from '../core/util/rng.js';
import { parseJson } from '../core/util/json.js';

export interface SelfGeneratedOptions {
  /** Number of sequences (default 10). */
  count?: number;
  /** Tokens per sequence including the first (BOS) token (default 64). */
  length?: number;
  /** Default 0. */
  seed?: number;
  /** Sampling temperature (default 1: the model's own distribution). */
  temperature?: number;
  /** Sequences advanced together in one batch (default: all). Keep it fixed for reproducible draws. */
  batch?: number;
  /** Told of each sampled token position of a batch (a progress bar's tick). */
  onStep?: () => void;
}

/**
 * What sequences are sampled with: the whole-model Engine, or a layer-streamed decoder
 * (src/exec/stream's StreamDecoder) for a model too large for one graph. A session's step feeds
 * each row's next ids and gives each row's logits at its last position.
 */
export interface Generator {
  readonly spec: ArchSpec;
  session(batch: number): { step(rows: number[][]): Promise<Float32Array[]> };
}

export const DEFAULT_CALIBRATION = { count: 10, length: 64 } as const;

/** The seed `heldOutSequences` uses for a calibration seed. */
export function heldOutSeed(seed: number): number {
  return (seed ^ 0x5bd1e995) >>> 0;
}

/**
 * `count` sequences of `length` ids sampled from the model, each from BOS (or, for a model
 * without bos_token_id, a seeded random first token). Sequence i samples with its own seed. EOS does not stop a sequence: every one has
 * exactly `length` ids.
 */
export async function selfGeneratedSequences(engine: Generator, opts: SelfGeneratedOptions = {}): Promise<number[][]> {
  const count = opts.count ?? DEFAULT_CALIBRATION.count;
  const length = opts.length ?? DEFAULT_CALIBRATION.length;
  const seed = opts.seed ?? 0;
  if (!Number.isInteger(count) || count < 1) throw new UsageError(`calibration count must be a positive integer, got ${count}`);
  if (!Number.isInteger(length) || length < 1) throw new UsageError(`calibration length must be a positive integer, got ${length}`);
  const rng = new Rng(seed);
  const seqs: number[][] = [];
  const samplers: Sampler[] = [];
  for (let i = 0; i < count; i++) {
    const first = engine.spec.bosTokenId ?? rng.int(engine.spec.vocabSize);
    seqs.push([first]);
    samplers.push(new Sampler({ temperature: opts.temperature ?? 1, seed: (seed * 1000003 + i * 7919 + 1) >>> 0 }));
  }
  const batch = Math.max(1, Math.min(opts.batch ?? count, count));
  for (let start = 0; start < count; start += batch) {
    const group = seqs.slice(start, start + batch);
    const session = engine.session(group.length);
    let logits = await session.step(group.map((s) => [s[0]]));
    for (let t = 1; t < length; t++) {
      const next = group.map((s, b) => {
        const id = samplers[start + b].next(logits[b]);
        s.push(id);
        return [id];
      });
      opts.onStep?.();
      if (t + 1 < length) logits = await session.step(next);
    }
  }
  return seqs;
}

/** Held-out sequences: the same recipe with a seed derived from (and different to) `seed`. */
export async function heldOutSequences(engine: Generator, opts: SelfGeneratedOptions = {}): Promise<number[][]> {
  return selfGeneratedSequences(engine, { ...opts, seed: heldOutSeed(opts.seed ?? 0) });
}

/** Anything that maps text to ids (src/core/tokenizer's tokenizer). */
export interface TextTokenizer {
  encode(text: string): number[];
}

/**
 * Calibration from text: each text encoded, prefixed with `bosTokenId` unless the tokenizer
 * already put it first, and cut into windows of `length` ids (a tail shorter than 2 is dropped).
 */
export function textSequences(tokenizer: TextTokenizer, texts: string[], opts: { length?: number; bosTokenId?: number | null } = {}): number[][] {
  const length = opts.length ?? DEFAULT_CALIBRATION.length;
  const out: number[][] = [];
  for (const text of texts) {
    const ids = tokenizer.encode(text);
    out.push(...idWindows(opts.bosTokenId != null && ids[0] !== opts.bosTokenId ? [opts.bosTokenId, ...ids] : ids, length));
  }
  return out;
}

/** Windows of `length` ids (a tail shorter than 2 is dropped). */
export function idWindows(ids: readonly number[], length: number): number[][] {
  const out: number[][] = [];
  for (let i = 0; i < ids.length; i += length) {
    const w = ids.slice(i, i + length);
    if (w.length >= 2) out.push(w);
  }
  return out;
}

/**
 * Token ids given as a file (for models without a tokenizer): JSON, an array of sequences of ids,
 * e.g. [[1, 403, 261], [1, 9, 77]]. Null when `text` is not such JSON; ids outside the vocabulary
 * are an error naming the file and the position.
 */
export function idSequencesOf(text: string, vocabSize: number, file: string): number[][] | null {
  let v: unknown;
  try {
    v = parseJson(text, file);
  } catch {
    return null;
  }
  if (!Array.isArray(v) || !v.every((s) => Array.isArray(s) && s.every((x) => Number.isInteger(x)))) return null;
  (v as number[][]).forEach((seq, i) =>
    seq.forEach((id, t) => {
      if (id < 0 || id >= vocabSize) throw new LlmcError(`[${i}][${t}]: token id ${id} is outside the vocabulary [0, ${vocabSize})`, file);
    }),
  );
  return v as number[][];
}
