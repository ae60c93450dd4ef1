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
import { createHash } from 'node:crypto';
import { promises as fsp } from 'node:fs';
import type { TensorAnnotation } from '../../src/core/pipeline/unit.js';
import { Weight } from '../../src/exec/runtime/kernels.js';
import type { LowRank, LevelAdapters } from '../../src/exec/runtime/lowrank.js';
import path from 'node:path';
import { openCheckpoint } from '../../src/core/checkpoint/index.js';
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import { LlmcError, UsageError } from '../../src/core/errors.js';
import { calibrationSet, textFileSpec, type CalibrationSet } from '../../src/measure/calibration.js';
import { cachedProfile } from '../../src/measure/store.js';
import type { Engine } from '../../src/exec/engine/engine.js';
import { modelFromTensors } from '../../src/exec/runtime/memory.js';
import type { Model } from '../../src/exec/runtime/model.js';
import { argmax } from '../../src/core/sampling.js';
import type { Drafter } from '../../src/exec/runtime/speculative.js';
import { ELASTIC_LEVELS, findRecord, levelWidths, selectLevel, type DraftSpec, type PassRecord } from '../../src/core/records/index.js';
import type { Progress } from '../../src/core/util/progress.js';
import type { DraftChoice, TreeSearchOptions } from './options.js';
import type { RankTrace } from './trie.js';
import { layersOf } from '../../src/core/checkpoint/layers.js';
import { parseJson } from '../../src/core/util/json.js';
import { phaseRss } from './phase-rss.js';

export interface ResolvedDraft {
  spec: DraftSpec;
  /** Folded into cache keys: what the draft computes. */
  identity: string;
  drafter: Drafter;
  /**
   * Builds the draft's weights if they are not yet (a streamed target's skip draft, resolved with
   * `lazy`: its float32 layers, embedding and head are not held while the target streams). `drafter`
   * is readable after it.
   */
  ready(): Promise<Drafter>;
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
/**
 * A level's recovery adapters from the compile unit's annotations (reorder writes them per level id),
 * as runtime weights: the draft runs the level as the artifact ships it. Null: the level has none.
 */
export function levelAdaptersOf(annotations: ReadonlyMap<string, TensorAnnotation>, levelId: string): { adapters: LevelAdapters; digest: string } | null {
  const out = new Map<string, LowRank>();
  const h = createHash('sha256');
  const f32 = (name: string, rows: number, cols: number, data: Float32Array) => {
    const bytes = new Uint8Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
    h.update(name).update(bytes);
    return new Weight(name, 'F32', rows, cols, bytes);
  };
  for (const name of [...annotations.keys()].sort()) {
    const ad = annotations.get(name)?.adapters?.[levelId];
    if (!ad) continue;
    h.update(`${ad.rank}/${ad.scale}`);
    out.set(name, { rank: ad.rank, scale: ad.scale, a: f32(`${name}.A`, ad.rank, ad.inFeatures, ad.a), b: f32(`${name}.B`, ad.outFeatures, ad.rank, ad.b) });
  }
  return out.size ? { adapters: out, digest: h.digest('hex').slice(0, 16) } : null;
}

/** A draft built by `build`: now, or (`lazy`) at its first ready(), `drafter` unreadable before. */
async function drafted(spec: DraftSpec, identity: string, build: () => Promise<Drafter>, lazy: boolean): Promise<ResolvedDraft> {
  let built: Promise<Drafter> | undefined;
  let drafter: Drafter | undefined;
  const ready = () => (built ??= build().then((d) => (drafter = d)));
  if (!lazy) await ready();
  return {
    spec,
    identity,
    get drafter(): Drafter {
      if (!drafter) throw new Error('tree-search: the draft was read before ready()');
      return drafter;
    },
    ready,
    close: async () => {},
  };
}

export async function resolveDraft(
  choice: DraftChoice,
  source: ModelSource,
  records: readonly PassRecord[],
  target: () => Promise<Model>,
  annotations: ReadonlyMap<string, TensorAnnotation> = new Map(),
  opts: { /** A streamed target's skip or level draft builds its model at `ready()`, not here. */ lazy?: boolean } = {},
): Promise<ResolvedDraft> {
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
    const rec = levelAdaptersOf(annotations, level.id);
    const { streams } = await import('../../src/exec/stream/index.js');
    // the whole target's model: a streamed one builds it at ready(), after the streamed continuations
    return drafted(
      { kind: 'level', level: level.id, nominal: level.nominal },
      `level:${JSON.stringify(levelWidths(level))}${rec ? `+adapters:${rec.digest}` : ''}`,
      async () => ({ model: await target(), widths: levelWidths(level), ...(rec ? { adapters: rec.adapters } : {}) }),
      streams(spec) && opts.lazy === true,
    );
  }
  if (choice.kind === 'skip') {
    if (choice.layers.some((l) => l >= spec.numLayers)) throw new UsageError(`tree-search.draftSkip: the model has layers 0..${spec.numLayers - 1}, got ${choice.layers.join(',')}`);
    if (choice.layers.length >= spec.numLayers) throw new UsageError(`tree-search.draftSkip: skipping all ${spec.numLayers} layers leaves no draft`);
    // a streamed target is never loaded whole: the draft is a model of the layers kept alone (the same computation),
    // built at ready() with `lazy` (after the target's streamed continuations, so the two never peak together)
    const { streams } = await import('../../src/exec/stream/index.js');
    const kept = Array.from({ length: spec.numLayers }, (_, l) => l).filter((l) => !choice.layers.includes(l));
    const streamed = streams(spec);
    return drafted(
      { kind: 'skip', layers: choice.layers },
      `skip:${choice.layers.join(',')}`,
      async () => ({ model: streamed ? await modelFromTensors(layersOf(source, kept)) : (await target()).withoutLayers(choice.layers) }),
      streamed && opts.lazy === true,
    );
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
    const drafter: Drafter = { model };
    return {
      spec: { kind: 'checkpoint', path: path.basename(path.resolve(dir)), sha256, modelType: d.modelType, vocabSize: d.vocabSize },
      identity: `checkpoint:${sha256}`,
      drafter,
      ready: async () => drafter,
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
  /** The same for the held-out prompts (disjoint from the calibration ones): the plan's check, never its choice. */
  heldOut: { sequences: number[][]; ranks: Int32Array[] };
}

/** Draft ranks of `seq`'s tokens after position `from`: ρ_j for j in [from, len). */
export function draftRanks(draft: Drafter, seq: readonly number[], from: number): Int32Array {
  const rows = Array.from({ length: seq.length - from }, (_, i) => from - 1 + i);
  const logits = draft.model.forward(seq, draft.model.newCache(), { widths: draft.widths, adapters: draft.adapters, logitRows: rows });
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
  ctx: { cacheDir?: ProfileCacheRef; progress: Progress; engine: () => Promise<Engine>; /** Continue layer-streamed (default: when the target streams, src/exec/stream). */ stream?: boolean },
): Promise<RankProfile> {
  const calibration = await calibrationSet(
    source,
    { source: o.calibText ? await textFileSpec(o.calibText) : 'self-generated', count: o.calibCount, length: o.calibLength, seed: o.seed, heldOut: o.heldOut },
    { cacheDir: ctx.cacheDir, engine: ctx.engine },
  );
  const P = o.calibLength;
  const G = o.generate;
  if (P + G > source.spec.maxPositions) throw new UsageError(`tree-search: calibLength + generate = ${P + G} exceeds the model's ${source.spec.maxPositions} positions`);
  const prof = await cachedProfile(ctx.cacheDir, 'rank-trace', { checkpoint: await source.identity(), draft: draft.identity, calibration: calibration.key, generate: G }, async () => {
    // a large target continues layer-streamed (one block's weights at a time; the same ids, test/tree-search-stream.test.ts)
    const { StreamEngine, streams } = await import('../../src/exec/stream/index.js');
    const streamed = streams(source.spec, ctx.stream);
    const engine = streamed ? null : await ctx.engine();
    // streamed, the calibration and held-out prompts (both calibLength long) continue in one batch: one weight sweep per token for both
    phaseRss('calibration set');
    const streamedCont = streamed && G > 0 ? await new StreamEngine(source, { progress: ctx.progress }).greedy([...calibration.calib, ...calibration.heldOut], G) : null;
    phaseRss('target continuations');
    // The target's greedy continuations, all prompts of a set in one batch, then the draft's ranks.
    const traced = async (prompts: number[][], what: string, from: number) => {
      if (!prompts.length) return { seqs: [] as number[][], ranks: [] as Int32Array[] };
      let seqs = prompts.map((p) => [...p]);
      if (streamedCont) seqs = prompts.map((p, b) => [...p, ...streamedCont[from + b]]);
      else if (engine) {
        const session = engine.session(prompts.length);
        ctx.progress.start(`tree-search: target continuations (${what})`, G);
        let logits = await session.step(prompts);
        for (let g = 0; g < G; g++) {
          const next = logits.map((l) => argmax(l));
          next.forEach((id, b) => seqs[b].push(id));
          if (g + 1 < G) logits = await session.step(next.map((id) => [id]));
          ctx.progress.tick();
        }
        ctx.progress.done();
      }
      const drafter = await draft.ready();
      ctx.progress.start(`tree-search: draft ranks (${what})`, seqs.length);
      const ranks = seqs.map((s) => {
        const r = draftRanks(drafter, s, P);
        ctx.progress.tick();
        return r;
      });
      ctx.progress.done();
      phaseRss(`draft ranks (${what})`);
      return { seqs, ranks };
    };
    const cal = await traced(calibration.calib, 'calibration', 0);
    const held = await traced(calibration.heldOut, 'held out', calibration.calib.length);
    const flat = (r: Int32Array[]) => Float64Array.from(r.flatMap((x) => Array.from(x)));
    return {
      meta: { prompts: cal.seqs.length, heldOut: held.seqs.length, promptLength: P, generated: G },
      arrays: { sequences: Float64Array.from(cal.seqs.flat()), ranks: flat(cal.ranks), heldOutSequences: Float64Array.from(held.seqs.flat()), heldOutRanks: flat(held.ranks) },
    };
  });
  const L = P + G;
  const unflat = (seqFlat: Float64Array, rankFlat: Float64Array) => {
    const sequences: number[][] = [];
    const ranks: Int32Array[] = [];
    for (let i = 0; i * L < seqFlat.length; i++) {
      sequences.push(Array.from(seqFlat.subarray(i * L, (i + 1) * L)));
      ranks.push(Int32Array.from(rankFlat.subarray(i * G, (i + 1) * G)));
    }
    return { sequences, ranks };
  };
  const cal = unflat(prof.arrays.sequences, prof.arrays.ranks);
  const heldOut = unflat(prof.arrays.heldOutSequences ?? new Float64Array(0), prof.arrays.heldOutRanks ?? new Float64Array(0));
  return { key: prof.key, calibration, sequences: cal.sequences, promptLength: P, ranks: cal.ranks, heldOut };
}

/**
 * Rank traces of depth D over top-K: one per position t whose next D tokens are known (t from the
 * last prompt token on); `starts[s]` is sequence s's first trace (the runtime's first root).
 */
export function tracesOf(p: Pick<RankProfile, 'ranks'>, D: number, K: number): { trace: RankTrace; starts: number[] } {
  const per = p.ranks.length ? p.ranks[0].length - D + 1 : 0;
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
