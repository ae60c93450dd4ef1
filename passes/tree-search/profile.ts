/**
 * Profiling for the tree search (SPEC §4): the draft, and rank traces on calibration data.
 *
 * The target continues each calibration prompt greedily; greedy decoding is deterministic, so at
 * every position t of that continuation the target's next D greedy tokens are just the next D
 * tokens of it, and the runtime visits exactly such positions. One draft forward over the whole
 * sequence gives, at each position j, the rank of the true next token among the draft's candidates
 * conditioned on the true prefix (ρ_j; ties go to the lower id, as argmax and the runtime's
 * candidate order). The trace at t is (ρ_{t+1}, …, ρ_{t+D}), ranks ≥ K as misses.
 */
import type { ProfileCacheRef } from '../../src/core/pipeline/pass.js';
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { openCheckpoint } from '../../src/core/checkpoint/index.js';
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import { LlmcError, UsageError } from '../../src/core/errors.js';
import { calibrationSet, textFileSpec, type CalibrationSet } from '../../src/measure/calibration.js';
import { cachedProfile } from '../../src/measure/store.js';
import type { Engine } from '../../src/exec/engine/engine.js';
import { modelFromTensors } from '../../src/exec/runtime/memory.js';
import type { Model } from '../../src/exec/runtime/model.js';
import { argmax } from '../../src/exec/runtime/sampling.js';
import type { Drafter } from '../../src/exec/runtime/speculative.js';
import { ELASTIC_LEVELS, findRecord, levelWidths, selectLevel, type DraftSpec, type PassRecord } from '../../src/core/records/index.js';
import type { Progress } from '../../src/core/util/progress.js';
import type { DraftChoice, TreeSearchOptions } from './options.js';
import type { RankTrace } from './trie.js';
import { parseJson } from '../../src/core/util/json.js';

export interface ResolvedDraft {
  spec: DraftSpec;
  /** Folded into cache keys: what the draft computes. */
  identity: string;
  drafter: Drafter;
  close(): Promise<void>;
}

/** The canonical vocabulary of a tokenizer.json (its model section), for pairing checks. */
function vocabOf(tokenizerJson: string | undefined): string | null {
  if (!tokenizerJson) return null;
  try {
    const t = parseJson(tokenizerJson, undefined) as { model?: { vocab?: unknown }; added_tokens?: unknown };
    return JSON.stringify([t.model?.vocab ?? null, t.added_tokens ?? null]);
  } catch {
    return null;
  }
}

/** The draft a run asked for, as a runnable model (the target's own model for a level or skipped layers). */
export async function resolveDraft(choice: DraftChoice, source: ModelSource, records: readonly PassRecord[], target: () => Promise<Model>): Promise<ResolvedDraft> {
  const spec = source.spec;
  if (choice.kind === 'level') {
    const levels = findRecord(records, ELASTIC_LEVELS)?.levels ?? null;
    if (!levels) throw new UsageError('tree-search.draftLevel needs the reorder pass to run first (no elastic levels)');
    let level;
    try {
      level = selectLevel(levels, choice.level);
    } catch (e) {
      throw new UsageError(`tree-search.draftLevel: ${(e as Error).message}`);
    }
    return {
      spec: { kind: 'level', level: level.id, nominal: level.nominal },
      identity: `level:${JSON.stringify(levelWidths(level))}`,
      drafter: { model: await target(), widths: levelWidths(level) },
      close: async () => {},
    };
  }
  if (choice.kind === 'skip') {
    if (choice.layers.some((l) => l >= spec.numLayers)) throw new UsageError(`tree-search.draftSkip: the model has layers 0..${spec.numLayers - 1}, got ${choice.layers.join(',')}`);
    if (choice.layers.length >= spec.numLayers) throw new UsageError(`tree-search.draftSkip: skipping all ${spec.numLayers} layers leaves no draft`);
    return { spec: { kind: 'skip', layers: choice.layers }, identity: `skip:${choice.layers.join(',')}`, drafter: { model: (await target()).withoutLayers(choice.layers) }, close: async () => {} };
  }
  const dir = choice.dir;
  const stat = await fsp.stat(dir).catch(() => null);
  if (!stat?.isDirectory()) throw new UsageError(`--draft ${dir}: not a directory`);
  let draft;
  try {
    draft = await openCheckpoint(dir);
  } catch (e) {
    // A model the runtime cannot run (unknown architecture, no weights) cannot be paired.
    throw new UsageError(`--draft ${dir}: ${e instanceof LlmcError ? e.line : (e as Error).message}`);
  }
  try {
    const d = draft.spec;
    if (d.vocabSize !== spec.vocabSize) throw new UsageError(`--draft ${dir}: its vocabulary has ${d.vocabSize} tokens, the model's ${spec.vocabSize}; a draft must share the vocabulary`);
    const dv = vocabOf(draft.assets.tokenizer);
    const tv = vocabOf(source.assets.tokenizer);
    if (dv && tv && dv !== tv) throw new UsageError(`--draft ${dir}: its tokenizer's vocabulary differs from the model's (same size, other tokens)`);
    if (d.bosTokenId !== spec.bosTokenId || JSON.stringify(d.eosTokenIds) !== JSON.stringify(spec.eosTokenIds)) {
      throw new UsageError(`--draft ${dir}: its BOS/EOS ids (${d.bosTokenId}/${d.eosTokenIds}) differ from the model's (${spec.bosTokenId}/${spec.eosTokenIds})`);
    }
    const sha256 = await draft.identity();
    const model = await modelFromTensors(draft);
    return {
      spec: { kind: 'checkpoint', path: path.basename(path.resolve(dir)), sha256, modelType: d.modelType, vocabSize: d.vocabSize },
      identity: `checkpoint:${sha256}`,
      drafter: { model },
      close: () => draft.close(),
    };
  } catch (e) {
    await draft.close();
    throw e;
  }
}

/** Calibration prompts, their greedy continuations and the draft ranks along them. */
export interface RankProfile {
  key: string;
  calibration: CalibrationSet;
  /** Prompt + continuation per prompt. */
  sequences: number[][];
  promptLength: number;
  /** ρ per sequence: the draft rank of each continuation token (index j − promptLength). */
  ranks: Int32Array[];
}

/** Draft ranks of `seq`'s tokens after position `from`: ρ_j for j in [from, len). */
export function draftRanks(draft: Drafter, seq: readonly number[], from: number): Int32Array {
  const rows = Array.from({ length: seq.length - from }, (_, i) => from - 1 + i);
  const logits = draft.model.forward(seq, draft.model.newCache(), { widths: draft.widths, logitRows: rows });
  const V = draft.model.spec.vocabSize;
  return Int32Array.from(rows, (r, i) => {
    const l = logits.subarray(i * V, (i + 1) * V);
    const y = seq[r + 1];
    const ly = l[y];
    let rank = 0;
    for (let k = 0; k < V; k++) if (l[k] > ly || (l[k] === ly && k < y)) rank++;
    return rank;
  });
}

export async function rankProfile(
  source: ModelSource,
  draft: ResolvedDraft,
  o: TreeSearchOptions,
  ctx: { cacheDir?: ProfileCacheRef; progress: Progress; engine: () => Promise<Engine> },
): Promise<RankProfile> {
  const calibration = await calibrationSet(
    source,
    { source: o.calibText ? await textFileSpec(o.calibText) : 'self-generated', count: o.calibCount, length: o.calibLength, seed: o.seed, heldOut: 0 },
    { cacheDir: ctx.cacheDir, engine: ctx.engine },
  );
  const P = o.calibLength;
  const G = o.generate;
  if (P + G > source.spec.maxPositions) throw new UsageError(`tree-search: calibLength + generate = ${P + G} exceeds the model's ${source.spec.maxPositions} positions`);
  const prof = await cachedProfile(ctx.cacheDir, 'rank-trace', { checkpoint: await source.identity(), draft: draft.identity, calibration: calibration.key, generate: G }, async () => {
    // The target's greedy continuations, all prompts in one batch.
    const engine = await ctx.engine();
    const prompts = calibration.calib;
    const session = engine.session(prompts.length);
    const seqs = prompts.map((p) => [...p]);
    ctx.progress.start('tree-search: target continuations', G);
    let logits = await session.step(prompts);
    for (let g = 0; g < G; g++) {
      const next = logits.map((l) => argmax(l));
      next.forEach((id, b) => seqs[b].push(id));
      if (g + 1 < G) logits = await session.step(next.map((id) => [id]));
      ctx.progress.tick();
    }
    ctx.progress.done();
    ctx.progress.start('tree-search: draft ranks', seqs.length);
    const ranks = seqs.map((s) => {
      const r = draftRanks(draft.drafter, s, P);
      ctx.progress.tick();
      return r;
    });
    ctx.progress.done();
    return { meta: { prompts: seqs.length, promptLength: P, generated: G }, arrays: { sequences: Float64Array.from(seqs.flat()), ranks: Float64Array.from(ranks.flatMap((r) => Array.from(r))) } };
  });
  const L = P + G;
  const flat = prof.arrays.sequences;
  const sequences: number[][] = [];
  const ranks: Int32Array[] = [];
  for (let i = 0; i * L < flat.length; i++) {
    sequences.push(Array.from(flat.subarray(i * L, (i + 1) * L)));
    ranks.push(Int32Array.from(prof.arrays.ranks.subarray(i * G, (i + 1) * G)));
  }
  return { key: prof.key, calibration, sequences, promptLength: P, ranks };
}

/**
 * Rank traces of depth D over top-K: one per position t whose next D tokens are known (t from the
 * last prompt token on); `starts[s]` is sequence s's first trace (the runtime's first root).
 */
export function tracesOf(p: RankProfile, D: number, K: number): { trace: RankTrace; starts: number[] } {
  const per = p.ranks[0].length - D + 1;
  const N = per * p.ranks.length;
  const out = new Int16Array(N * D);
  const starts: number[] = [];
  p.ranks.forEach((rho, s) => {
    starts.push(s * per);
    for (let t = 0; t < per; t++) {
      for (let k = 0; k < D; k++) out[(s * per + t) * D + k] = rho[t + k] < K ? rho[t + k] : -1;
    }
  });
  return { trace: { N, D, K, ranks: out }, starts };
}
