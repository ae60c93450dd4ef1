/**
 * Calibration and held-out token sequences as a cached profile, so every pass (and `llmc report`)
 * measures on the same ids. Without text they are sampled from the model itself (data-free
 * calibration, src/measure), the held-out set from a derived seed.
 */
import { heldOutSequences, idSequencesOf, idWindows, selfGeneratedSequences, textSequences, type Generator } from './sequences.js';
import type { Progress } from '../core/util/progress.js';
import type { ModelSource } from '../core/checkpoint/source.js';
import { Engine } from '../exec/engine/index.js';
import { LlmcError } from '../core/errors.js';
import { loadTokenizer } from '../core/tokenizer/index.js';
import { cachedProfile, type ProfileCache } from './store.js';

export interface CalibrationSpec {
  /** 'self-generated' (data-free) or text: the file's path and sha256 (the key needs the content). */
  source: 'self-generated' | { text: string; sha256: string };
  count: number;
  length: number;
  seed: number;
  /** Held-out sequences (same length, derived seed). */
  heldOut: number;
}

export interface CalibrationSet {
  spec: CalibrationSpec;
  calib: number[][];
  heldOut: number[][];
  /** The profile key (names this exact set in manifests and reports). */
  key: string;
}

const split = (flat: Float64Array, length: number): number[][] => {
  const out: number[][] = [];
  for (let i = 0; i < flat.length; i += length) out.push(Array.from(flat.subarray(i, i + length)));
  return out;
};

/** The calibration set of `source` for `spec`, computed once per (checkpoint, spec) when cached. */
export async function calibrationSet(source: ModelSource, spec: CalibrationSpec, opts: { cacheDir?: ProfileCache; /** Shares the caller's engine (opened only if the set must be computed). */ engine?: () => Promise<Engine>; progress?: Progress } = {}): Promise<CalibrationSet> {
  const profile = await cachedProfile(opts.cacheDir, 'calibration', { checkpoint: await source.identity(), ...spec }, async () => {
    if (spec.source !== 'self-generated') {
      const { calib, held } = await textCalibration(source, spec, spec.source.text);
      return { meta: { ...spec }, arrays: { calib: Float64Array.from(calib.flat()), heldOut: Float64Array.from(held.flat()) } };
    }
    return withEngine(source, opts.engine, async (engine) => {
      const progress = opts.progress;
      const gen = { count: spec.count, length: spec.length, seed: spec.seed, onStep: progress ? () => progress.tick() : undefined };
      progress?.start('calibration: sampling from the model', (spec.length - 1) * (spec.heldOut > 0 ? 2 : 1));
      const calib = await selfGeneratedSequences(engine, gen);
      const held = spec.heldOut > 0 ? await heldOutSequences(engine, { ...gen, count: spec.heldOut }) : [];
      progress?.done();
      return { meta: { ...spec }, arrays: { calib: Float64Array.from(calib.flat()), heldOut: Float64Array.from(held.flat()) } };
    });
  });
  return { spec, calib: split(profile.arrays.calib, spec.length), heldOut: split(profile.arrays.heldOut, spec.length), key: profile.key };
}

/**
 * Run `fn` on a generator for `source`: above the streaming threshold a layer-streamed decoder (no
 * whole-model graph is built; the same tokens, test/stream-generate.test.ts), else the caller's
 * shared engine or one opened and closed after.
 */
async function withEngine<R>(source: ModelSource, shared: (() => Promise<Engine>) | undefined, fn: (engine: Generator) => Promise<R>): Promise<R> {
  const { streams, StreamDecoder } = await import('../exec/stream/index.js');
  if (streams(source.spec)) {
    const decoder = new StreamDecoder(source);
    try {
      return await fn(decoder);
    } finally {
      await decoder.close();
    }
  }
  if (shared) return fn(await shared());
  const engine = await Engine.open(source);
  try {
    return await fn(engine);
  } finally {
    await engine.close();
  }
}

/** A calibration text file's spec: its path and sha256 (so an edited file is a new profile). */
export async function textFileSpec(file: string): Promise<{ text: string; sha256: string }> {
  const { sha256Files } = await import('../core/util/sha256.js');
  const sha256 = await sha256Files([file]).catch(() => {
    throw new LlmcError('cannot read calibration text', file);
  });
  return { text: file, sha256 };
}

/**
 * The file's whole windows of `length` ids, in order: the text tokenized with the model's own
 * tokenizer, or, for a file of token ids (see idSequencesOf), its sequences as they are.
 */
export async function textWindows(source: ModelSource, length: number, file: string): Promise<number[][]> {
  const { readFile } = await import('node:fs/promises');
  const text = await readFile(file, 'utf8');
  const ids = idSequencesOf(text, source.spec.vocabSize, file);
  let all: number[][];
  if (ids) all = ids.flatMap((seq) => idWindows(seq, length));
  else {
    if (!source.assets.tokenizer) {
      throw new LlmcError('calibration text given, but the model has no tokenizer.json to encode it (give token ids as JSON [[1, 5, ...], ...], or omit it for self-generated calibration)', file);
    }
    const tokenizer = loadTokenizer(source.assets.tokenizer, source.assets.tokenizerConfig);
    all = textSequences(tokenizer, [text], { length, bosTokenId: source.spec.bosTokenId });
  }
  return all.filter((w) => w.length === length);
}

/**
 * Text calibration: the file's windows of `length` (textWindows); the first `count` windows
 * calibrate, the next `heldOut` ones are held out (disjoint).
 */
async function textCalibration(source: ModelSource, spec: CalibrationSpec, file: string): Promise<{ calib: number[][]; held: number[][] }> {
  const windows = await textWindows(source, spec.length, file);
  const need = spec.count + spec.heldOut;
  if (windows.length < need) {
    throw new LlmcError(`calibration text gives ${windows.length} windows of ${spec.length} tokens; ${need} needed (${spec.count} calibration + ${spec.heldOut} held-out)`, file);
  }
  return { calib: windows.slice(0, spec.count), held: windows.slice(spec.count, need) };
}

/** The seed training data is sampled with: never the held-out draw's (heldOutSeed) for the same seed. */
export function trainingSeed(seed: number): number {
  return (seed ^ 0x2545f491) >>> 0;
}

export interface TrainingSet {
  seqs: number[][];
  /** The profile key (names this exact set in records). */
  key: string;
  /** Sequences dropped because they equal a held-out one (self-generated draws can repeat). */
  droppedHeldOut: number;
}

/**
 * Training sequences for `calib` (e.g. recovery fine-tuning), `count` of the calibration length,
 * disjoint from its held-out set by construction and by check:
 * - self-generated: sampled from the model with trainingSeed(seed), any that equals a held-out
 *   sequence dropped;
 * - text: the calibration windows, then the windows after the held-out ones (up to `count`).
 */
export async function trainingSet(source: ModelSource, calib: CalibrationSet, count: number, seed: number, opts: { cacheDir?: ProfileCache; engine?: () => Promise<Engine> } = {}): Promise<TrainingSet> {
  const spec = calib.spec;
  const profile = await cachedProfile(opts.cacheDir, 'training-data', { checkpoint: await source.identity(), calibration: calib.key, count, seed }, async () => {
    let seqs: number[][];
    if (spec.source !== 'self-generated') {
      const windows = await textWindows(source, spec.length, spec.source.text);
      seqs = [...windows.slice(0, spec.count), ...windows.slice(spec.count + spec.heldOut)].slice(0, count);
    } else {
      seqs = await withEngine(source, opts.engine, (engine) => selfGeneratedSequences(engine, { count, length: spec.length, seed: trainingSeed(seed), batch: Math.min(count, 64) }));
    }
    const held = new Set(calib.heldOut.map((s) => s.join(',')));
    const kept = seqs.filter((s) => !held.has(s.join(',')));
    return { meta: { count, seed, dropped: seqs.length - kept.length }, arrays: { seqs: Float64Array.from(kept.flat()) } };
  });
  return { seqs: split(profile.arrays.seqs, spec.length), key: profile.key, droppedHeldOut: profile.meta.dropped as number };
}

/** The seed acceptance sequences are sampled with: never the calibration's, held-out's or training's for the same seed. */
export function acceptanceSeed(seed: number): number {
  return (seed ^ 0x68e31da4) >>> 0;
}

export interface AcceptanceSet {
  seqs: number[][];
  /** The profile key (names this exact set in records). */
  key: string;
  /** Where the sequences come from: sampled from the model with acceptanceSeed(seed), or the text's windows after the calibration and held-out ones. */
  source: 'self-generated' | 'text';
}

/**
 * Sequences a pass accepts its result on after choosing it on `calib` (its calibration and held-out
 * sets both select): `count` of the calibration length, disjoint from both by construction and by
 * check. Self-generated: sampled with acceptanceSeed(seed), any that equals a calibration or held-out
 * sequence dropped. Text: the windows after the held-out ones (sampled from the model when the text
 * has too few).
 */
export async function acceptanceSet(source: ModelSource, calib: CalibrationSet, count: number, opts: { cacheDir?: ProfileCache; engine?: () => Promise<Engine> } = {}): Promise<AcceptanceSet> {
  const spec = calib.spec;
  const profile = await cachedProfile(opts.cacheDir, 'acceptance-data', { checkpoint: await source.identity(), calibration: calib.key, count }, async () => {
    let seqs: number[][] | null = null;
    let from: AcceptanceSet['source'] = 'self-generated';
    if (spec.source !== 'self-generated') {
      const windows = (await textWindows(source, spec.length, spec.source.text)).slice(spec.count + spec.heldOut);
      if (windows.length >= count) ((seqs = windows.slice(0, count)), (from = 'text'));
    }
    seqs ??= await withEngine(source, opts.engine, (engine) => selfGeneratedSequences(engine, { count, length: spec.length, seed: acceptanceSeed(spec.seed), batch: Math.min(count, 64) }));
    const used = new Set([...calib.calib, ...calib.heldOut].map((s) => s.join(',')));
    const kept = seqs.filter((s) => !used.has(s.join(',')));
    return { meta: { count, source: from }, arrays: { seqs: Float64Array.from(kept.flat()) } };
  });
  return { seqs: split(profile.arrays.seqs, spec.length), key: profile.key, source: profile.meta.source as AcceptanceSet['source'] };
}
