/**
 * Blockwise recovery of elastic levels (`reorder.recover=blockwise`): per-level LoRA adapters (the
 * adapters, record and artifacts of recover.ts's LoRA recovery) trained one decoder block at a time,
 * so memory is one block plus the calibration activations and time is one pass over the layers:
 *   1. local: for each decoder block in turn and each level, the level's adapters on its narrowed
 *      block are trained so that, on the level's OWN inputs X (its recovered earlier blocks' outputs),
 *      the block's output matches the full block's output F(X) (`own`), or the full model's hidden
 *      state at that depth (`teacher`: the block also undoes what its narrower earlier blocks left):
 *        loss (`recoverLoss`) = lens (default): KL from the full model's head on the target state to the head
 *          on the block's output (the logit lens; on stories260K's held-out text 370 / 266 at the 50 / 75%
 *          levels against mse's 1676 / 348, docs/lab/reorder-history.md); mse: mean ‖G(X; A, B) − target‖²;
 *          norm: the same on RMS-normalized states; each ÷ its value for skipping the block (first batch)
 *      The full level has no adapters and never changes: exact by construction.
 *   2. end to end (optional, `endToEnd` steps per level): recover.ts's loss (KL to the full model at
 *      the head) on the adapters of the last `endToEndBlocks` blocks, its gradient carried back piece
 *      by piece (each block recomputed from its saved input), so memory stays one block plus one
 *      batch's block inputs.
 * As recover.ts: the best point on the held-back validation sequences is kept, the start included
 * (so a level whose training helps nothing ships without adapters). Deterministic for the seed.
 * Runs every piece on the tfjs lowering of its part of the IR (src/exec/stream/tf-pieces.ts).
 */
import { createHash } from 'node:crypto';
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import { LlmcError } from '../../src/core/errors.js';
import { primitiveOps } from '../../src/core/ir/expand.js';
import { sliceSource } from '../../src/core/pipeline/elastic.js';
import type { LevelLayer } from '../../src/core/records/elastic.js';
import { Rng } from '../../src/core/util/rng.js';
import { silentProgress, type Progress } from '../../src/core/util/progress.js';
import { letEventLoopTurn } from '../../src/core/util/interrupt.js';
import type { LowRankTerm, TfModel } from '../../src/exec/autodiff/lower.js';
import { tf } from '../../src/exec/autodiff/tf.js';
import { streams } from '../../src/exec/stream/index.js';
import { TfPieces } from '../../src/exec/stream/tf-pieces.js';
import { cachedProfile, type ProfileCache } from '../../src/measure/store.js';
import { BLOCKWISE_DEFAULTS, type Projection, type RecoverOptions } from './options.js';
import { Adam, adapterTargets, loraInit, lowRankMap, lrAt, softTargetLoss, trainingBatches, transpose, type Adapter, type LevelRecovery, type Quality, type RecoverSettings } from './recover.js';

export interface BlockwiseSettings {
  /** Local steps per decoder block and level. */
  blockSteps: number;
  /** What a level's block output is matched to: the full block on the level's input, or the full model's state there. */
  target: 'own' | 'teacher';
  /** End-to-end steps per level after the local pass (0: none). */
  endToEnd: number;
  /** The last blocks the end-to-end steps train (0: every block). */
  endToEndBlocks: number;
  /** Learning rate of the end-to-end steps. */
  endToEndLr: number;
  /** The local loss: mean squared error of the states, of the RMS-normalized states, the head's KL on them (logit lens), or that KL on the teacher's top vocabulary rows only (topk). */
  loss: 'mse' | 'norm' | 'lens' | 'topk';
}

/** The LoRA settings and the blockwise ones from the pass's options (reorder.recover=blockwise). */
export function blockwiseSettings(o: RecoverOptions): { settings: RecoverSettings; blockwise: BlockwiseSettings } {
  const steps = o.steps === 'auto' ? BLOCKWISE_DEFAULTS.steps : o.steps;
  const settings: RecoverSettings = { rank: o.rank, alpha: o.alpha, steps, lr: o.lr, seed: o.seed, batch: o.batch, ce: o.ce, targets: o.targets === 'auto' ? BLOCKWISE_TARGETS : o.targets, init: 'zero' };
  const endToEnd = o.endToEnd ?? BLOCKWISE_DEFAULTS.endToEnd;
  return { settings, blockwise: { blockSteps: steps, target: o.target ?? BLOCKWISE_DEFAULTS.target, endToEnd, endToEndBlocks: 0, endToEndLr: o.lr, loss: o.loss ?? BLOCKWISE_DEFAULTS.loss } };
}

/** recoverTargets=auto under blockwise. */
const BLOCKWISE_TARGETS: readonly Projection[] = ['o', 'up', 'down'];

export interface BlockwiseRequest {
  /** The reordered model (the teacher; every level is a prefix slice of it). */
  model: ModelSource;
  levels: readonly { id: string; layers: LevelLayer[] }[];
  heldOut: number[][];
  /** Training sequences (equal lengths) and their profile key; the LoRA settings (rank, alpha, lr, batch, ce, targets, seed). */
  training: { seqs: number[][]; key: string; settings: RecoverSettings };
  blockwise: BlockwiseSettings;
  /** Keep every piece loaded (default: unless the model is large enough to stream, src/exec/stream). */
  keepPieces?: boolean;
  cacheDir?: ProfileCache;
  progress?: Progress;
}

/** Per level and block: the local loss untrained and kept (validation), and the step kept. */
export interface BlockStat {
  layer: number;
  before: number;
  after: number;
  bestStep: number;
}

export interface BlockwiseOutcome {
  full: Quality;
  levels: Map<string, LevelRecovery>;
  /** Per level: the local pass's blocks, and the end-to-end pass's validation loss at its start and kept. */
  stats: Map<string, { blocks: BlockStat[]; endToEnd?: { before: number; after: number; bestStep: number } }>;
  /** The most calibration activations held at once (bytes): every level's states, targets and held-out states. */
  activationBytes: number;
  /** The most pieces (embedding, decoder blocks, head) any one model or level held at once: all of them unless streamed. */
  peakPieces: number;
}

type Target = { weight: string; inFeatures: number; outFeatures: number };

/** One level's work: its slice, pieces, adapters' params (at [in, r], bt [r, out]) per decoder block. */
interface LevelState {
  id: string;
  layers: LevelLayer[];
  pieces: TfPieces;
  /** Per decoder layer: the adapted linears and their params (null: none kept). */
  blocks: { targets: Target[]; params: Float32Array[] | null }[];
  stats: BlockStat[];
  /** Training/validation states at the current depth, and at the end-to-end pass's start depth. */
  x: Float32Array[];
  start: Float32Array[] | null;
  /** Held-out states: unrecovered, recovered. */
  hoBefore: Float32Array[];
  hoAfter: Float32Array[];
}

const sha = (x: unknown) => createHash('sha256').update(JSON.stringify(x)).digest('hex');

export async function blockwiseRecoverLevels(req: BlockwiseRequest): Promise<BlockwiseOutcome> {
  const { model, training } = req;
  const s = training.settings;
  const bw = req.blockwise;
  const progress = req.progress ?? silentProgress;
  const spec = model.spec;
  const L = spec.numLayers;
  const T = training.seqs[0]?.length ?? 0;
  if (T < 2 || training.seqs.some((q) => q.length !== T)) throw new LlmcError('blockwise recovery: training sequences must have one length of at least 2 tokens');
  if (req.heldOut.some((q) => q.length !== req.heldOut[0].length)) throw new LlmcError('blockwise recovery: held-out sequences must have one length');
  const split = trainingBatches(training.seqs, s.batch, s.seed);
  const batches = [...split.train, ...split.validation];
  const nTrain = split.train.length;
  const nVal = split.validation.length;
  const hoBatches = cut(req.heldOut, 8);
  const keep = req.keepPieces ?? !streams(spec);
  const full = new TfPieces(model, keep);
  const decoder = full.decoder;
  const e2eFrom = bw.endToEnd > 0 ? Math.max(0, L - (bw.endToEndBlocks || L)) : L;
  const isFull = (layers: readonly LevelLayer[]) => layers.every((w) => w.kvGroups === spec.numKvHeads && w.qHeadsPerGroup === spec.numHeads / spec.numKvHeads && w.ffn >= (spec.moe ? spec.moe.expertIntermediateSize : spec.intermediateSize));
  const todo = req.levels.filter((lv) => !isFull(lv.layers));
  // What every cached piece of this run shares in its key.
  const baseKey = { model: await model.identity(), data: training.key, settings: s, blockwise: { blockSteps: bw.blockSteps, target: bw.target, loss: bw.loss } };
  const levels: LevelState[] = todo.map((lv) => {
    const src = sliceSource(model, lv.layers, 'level');
    const pieces = new TfPieces(src, keep);
    const all = adapterTargets(src, s.targets);
    const blocks = decoder.map((i) => {
      const linears = new Set(primitiveOps(pieces.segments[i].graph).flatMap((op) => (op.op === 'linear' ? [op.weight] : [])));
      return { targets: all.filter((t) => linears.has(t.weight)), params: null };
    });
    return { id: lv.id, layers: lv.layers, pieces, blocks, stats: [], x: [], start: null, hoBefore: [], hoAfter: [] };
  });
  let activationBytes = 0;
  const count = (xs: Float32Array[][]) => {
    activationBytes = Math.max(activationBytes, [...new Set(xs.flat())].reduce((n, x) => n + x.byteLength, 0));
  };
  // topk: the head's weight (where the head is one RMSNorm and one linear; else the norm loss) and, per block, its rows for the teacher's top tokens.
  let lens: Awaited<ReturnType<typeof topkHead>> = null;
  let rows: tf.Tensor2D | null = null;
  try {
    progress.start(`reorder: blockwise recovery of ${levels.length} level${levels.length === 1 ? '' : 's'} (${L} blocks × ${bw.blockSteps} steps${bw.endToEnd ? `, then ${bw.endToEnd} end-to-end steps` : ''})`, levels.length * (L * bw.blockSteps + bw.endToEnd));
    // The embedding: every level (and the full model) starts from the same states.
    const embed = await full.piece(0);
    const ids = (b: number[][]) => tf.tensor2d(b.flat(), [b.length, b[0].length], 'int32');
    const x0 = await mapBatches(batches, (b) => full.run(embed, 0, ids(b)));
    const ho0 = await mapBatches(hoBatches, (b) => full.run(embed, 0, ids(b)));
    full.release(0);
    let teacher = x0;
    let teacherHo = ho0;
    for (const lv of levels) {
      lv.x = x0;
      lv.hoBefore = ho0;
      lv.hoAfter = ho0;
      if (e2eFrom === 0) lv.start = x0;
    }
    const shape = (xs: number[][][], bi: number, D: number) => [xs[bi].length, xs[bi][0].length, D] as [number, number, number];
    const D = x0[0].length / (batches[0].length * T);
    const lensHead = bw.loss === 'lens' ? await full.piece(full.headIndex) : null;
    lens = bw.loss === 'topk' ? await topkHead(full) : null;
    // The local loss of a block's output against its target on batch bi (inside tidy / grads).
    const rms = (x: tf.Tensor) => tf.mul(x, tf.rsqrt(tf.add(tf.mean(tf.square(x), -1, true), 1e-6)));
    const compare = (out: tf.Tensor, target: tf.Tensor, bi: number): tf.Scalar => {
      if (lens && rows) {
        const logits = (x: tf.Tensor) => tf.matMul(tf.reshape(lens!.norm(x), [-1, D]), rows!, false, true);
        const lp = tf.logSoftmax(logits(target));
        return tf.mean(tf.sum(tf.mul(tf.exp(lp), tf.sub(lp, tf.logSoftmax(logits(out)))), -1));
      }
      if (lensHead) {
        const p = tf.softmax(full.run(lensHead, full.headIndex, target)) as tf.Tensor2D;
        return softTargetLoss(full.run(lensHead, full.headIndex, out) as tf.Tensor2D, batches[bi], p, 0);
      }
      return bw.loss === 'norm' || bw.loss === 'topk' ? tf.mean(tf.squaredDifference(rms(out), rms(target))) : tf.mean(tf.squaredDifference(out, target));
    };
    for (const [l, i] of decoder.entries()) {
      // The full block: the teacher's states (and, for `own`, each level's targets) move on through it.
      const fullBlock = await full.piece(i);
      const through = (xs: Float32Array[], bs: number[][][], m: TfModel, lowRank?: ReadonlyMap<string, LowRankTerm>) => mapBatches(bs, (_, bi) => full.run(m, i, tf.tensor3d(xs[bi], shape(bs, bi, D)), lowRank ? { lowRank } : {}));
      const nextTeacher = await through(teacher, batches, fullBlock);
      const nextTeacherHo = await through(teacherHo, hoBatches, fullBlock);
      const ownTargets = bw.target === 'own' ? await Promise.all(levels.map((lv) => through(lv.x, batches, fullBlock))) : null;
      full.release(i);
      if (lens) {
        rows?.dispose();
        rows = await lens.rowsFor(nextTeacher.slice(0, nTrain), (bi) => shape(batches, bi, D));
      }
      for (const [k, lv] of levels.entries()) {
        const target = ownTargets ? ownTargets[k] : nextTeacher;
        count([teacher, nextTeacher, teacherHo, nextTeacherHo, ...levels.flatMap((v) => [v.x, v.hoBefore, v.hoAfter, v.start ?? []]), ...(ownTargets ?? [])]);
        const piece = await lv.pieces.piece(i);
        const targets = lv.blocks[l].targets;
        const seed = createHash('sha256').update(`${s.seed}:${JSON.stringify(lv.layers.map((w) => [w.kvGroups, w.qHeadsPerGroup, w.ffn]))}:${l}`).digest().readUInt32LE(0);
        const key = { ...baseKey, level: lv.layers.map((w) => [w.kvGroups, w.qHeadsPerGroup, w.ffn]), layer: l };
        // Per level and block a cached profile: a stopped run resumes from the last finished block.
        const prof = await cachedProfile(req.cacheDir, 'blockwise-block', key, async () => {
          const r = await trainBlock({ lv, i, piece, targets, x: lv.x, y: target, batches, nTrain, nVal, D, s, steps: bw.blockSteps, seed, offset: l * bw.blockSteps, progress, compare });
          const arrays: Record<string, Float64Array> = {};
          r.params?.forEach((p, j) => (arrays[`p${j}`] = Float64Array.from(p)));
          return { meta: { before: r.before, after: r.after, bestStep: r.bestStep, kept: r.params !== null }, arrays };
        });
        if (prof.cached) progress.tick(bw.blockSteps);
        const params = prof.meta.kept ? targets.flatMap((_, j) => [Float32Array.from(prof.arrays[`p${2 * j}`]), Float32Array.from(prof.arrays[`p${2 * j + 1}`])]) : null;
        lv.blocks[l].params = params;
        lv.stats.push({ layer: l, before: prof.meta.before as number, after: prof.meta.after as number, bestStep: prof.meta.bestStep as number });
        // The level's states move on through its kept block; held-out states with and without adapters.
        const terms = params ? lowRankOf(targets, params.map((p, j) => tf.tensor2d(p, paramShape(targets[j >> 1], s.rank, j))), s) : undefined;
        const run = (xs: Float32Array[], bs: number[][][], lowRank?: Map<string, LowRankTerm>) => mapBatches(bs, (_, bi) => lv.pieces.run(piece, i, tf.tensor3d(xs[bi], shape(bs, bi, D)), lowRank ? { lowRank } : {}));
        lv.x = await run(lv.x, batches, terms);
        lv.hoAfter = await run(lv.hoAfter, hoBatches, terms);
        lv.hoBefore = await run(lv.hoBefore, hoBatches);
        if (terms) tf.dispose([...terms.values()].flatMap((t) => [t.at, t.bt]));
        if (l + 1 === e2eFrom) lv.start = lv.x;
        lv.pieces.release(i);
        await letEventLoopTurn();
      }
      teacher = nextTeacher;
      teacherHo = nextTeacherHo;
    }
    // The head: the full model's held-out quality and argmax (the agreement's reference), each level's before and after.
    const head = await full.piece(full.headIndex);
    const fullQ = await headQuality(full, head, teacherHo, hoBatches, null);
    const out = new Map<string, LevelRecovery>();
    const stats: BlockwiseOutcome['stats'] = new Map();
    for (const lv of levels) {
      const before = (await headQuality(full, head, lv.hoBefore, hoBatches, fullQ.argmax)).q;
      let after = (await headQuality(full, head, lv.hoAfter, hoBatches, fullQ.argmax)).q;
      let e2e: { before: number; after: number; bestStep: number } | undefined;
      if (bw.endToEnd > 0) {
        const key = { ...baseKey, level: lv.layers.map((w) => [w.kvGroups, w.qHeadsPerGroup, w.ffn]), endToEnd: { steps: bw.endToEnd, blocks: bw.endToEndBlocks, lr: bw.endToEndLr } };
        const prof = await cachedProfile(req.cacheDir, 'blockwise-end-to-end', key, async () => {
          const r = await endToEnd({ lv, full, head, teacher, batches, nTrain, nVal, D, s, bw, from: e2eFrom, decoder, progress });
          const arrays: Record<string, Float64Array> = {};
          lv.blocks.forEach((b, l) => b.params?.forEach((p, j) => (arrays[`${l}.${j}`] = Float64Array.from(p))));
          return { meta: { ...r }, arrays };
        });
        if (prof.cached) progress.tick(bw.endToEnd);
        lv.blocks.forEach((b, l) => (b.params = b.targets.length && prof.arrays[`${l}.0`] ? b.targets.flatMap((_, j) => [Float32Array.from(prof.arrays[`${l}.${2 * j}`]), Float32Array.from(prof.arrays[`${l}.${2 * j + 1}`])]) : null));
        e2e = prof.meta as typeof e2e;
        if (e2e!.bestStep > 0) after = await levelQuality(lv, full, head, ho0, hoBatches, D, s, decoder, fullQ.argmax);
      }
      stats.set(lv.id, { blocks: lv.stats, ...(e2e ? { endToEnd: e2e } : {}) });
      const adapters: Adapter[] = lv.blocks.flatMap((b) => (b.params ? b.targets.map((t, j) => ({ ...t, a: transpose(b.params![2 * j], t.inFeatures, s.rank), b: transpose(b.params![2 * j + 1], s.rank, t.outFeatures) })) : []));
      const bestStep = e2e && e2e.bestStep > 0 ? e2e.bestStep : lv.stats.some((b) => b.bestStep > 0) ? bw.blockSteps : 0;
      out.set(lv.id, adapters.length ? { before, after, adapters, bestStep } : { before, bestStep: 0 });
    }
    full.release(full.headIndex);
    progress.done();
    // Full levels (nothing to recover): the full model's quality, as recoverLevels reports them.
    const levelsOut = new Map(req.levels.map((lv) => [lv.id, out.get(lv.id) ?? { before: fullQ.q }]));
    return { full: fullQ.q, levels: levelsOut, stats, activationBytes, peakPieces: Math.max(full.peakHeld, ...levels.map((lv) => lv.pieces.peakHeld)) };
  } finally {
    rows?.dispose();
    lens?.dispose();
    full.dispose();
    for (const lv of levels) lv.pieces.dispose();
  }
}

/** Vocabulary rows the top-k lens keeps per block. */
export const TOPK_ROWS = 256;

/**
 * The top-k lens's head: the final RMSNorm and the head's weight [V, D] as one tensor, and per block
 * the weight's rows of the TOPK_ROWS tokens with the most teacher probability summed over the training
 * positions (ties: the lower id), so each step's lens costs TOPK_ROWS × D per token instead of V × D.
 * null where the head is more than one RMSNorm and one linear (soft-capped or scaled logits): the norm loss then.
 */
async function topkHead(full: TfPieces): Promise<{ norm: (x: tf.Tensor) => tf.Tensor; rowsFor: (xs: Float32Array[], shape: (bi: number) => [number, number, number]) => Promise<tf.Tensor2D>; dispose: () => void } | null> {
  // gatherPositions: every position here (TfPieces.run's head gives [B·T, V]).
  const ops = primitiveOps(full.segments[full.headIndex].graph).filter((op) => op.op !== 'gatherPositions');
  const [n, l] = ops;
  if (ops.length !== 2 || n.op !== 'rmsnorm' || n.heads || l.op !== 'linear' || l.x !== n.out || l.bias) return null;
  const src = full.source;
  const g = await src.readF32(n.weight);
  const gamma = tf.tensor1d(n.offset ? g.map((v) => v + 1) : g);
  const weight = tf.tensor2d(await src.readF32(l.weight), [l.outFeatures, l.inFeatures]);
  const norm = (x: tf.Tensor) => tf.mul(tf.mul(x, tf.rsqrt(tf.add(tf.mean(tf.square(x), -1, true), n.eps))), gamma);
  const V = l.outFeatures;
  const rowsFor = async (xs: Float32Array[], shape: (bi: number) => [number, number, number]) => {
    const mass = new Float64Array(V);
    for (const [bi, x] of xs.entries()) {
      const p = tf.tidy(() => tf.sum(tf.softmax(tf.matMul(tf.reshape(norm(tf.tensor3d(x, shape(bi))), [-1, l.inFeatures]), weight, false, true)), 0));
      const d = await p.data();
      p.dispose();
      for (let v = 0; v < V; v++) mass[v] += d[v];
    }
    const top = Array.from({ length: V }, (_, v) => v)
      .sort((a, b) => mass[b] - mass[a] || a - b)
      .slice(0, Math.min(TOPK_ROWS, V))
      .sort((a, b) => a - b);
    return tf.tidy(() => tf.gather(weight, tf.tensor1d(top, 'int32')) as tf.Tensor2D);
  };
  return { norm, rowsFor, dispose: () => tf.dispose([gamma, weight]) };
}

/** xs cut into batches of n (the last may be shorter). */
const cut = <X>(xs: X[], n: number): X[][] => Array.from({ length: Math.ceil(xs.length / n) }, (_, i) => xs.slice(i * n, i * n + n));

/** f over every batch (inside tidy), each result read back as a plain array. */
async function mapBatches<B>(bs: B[], f: (b: B, bi: number) => tf.Tensor): Promise<Float32Array[]> {
  const out: Float32Array[] = [];
  for (const [bi, b] of bs.entries()) {
    const t = tf.tidy(() => f(b, bi));
    out.push((await t.data()) as Float32Array);
    t.dispose();
  }
  return out;
}

/** Param j of a target's pair: at [in, r] (even), bt [r, out] (odd). */
const paramShape = (t: Target, rank: number, j: number): [number, number] => (j % 2 === 0 ? [t.inFeatures, rank] : [rank, t.outFeatures]);

const lowRankOf = (targets: readonly Target[], ps: tf.Tensor[], s: RecoverSettings) => lowRankMap(targets, ps, s.alpha / s.rank);

/** Validation points: the start, every eighth of the steps, the end. */
const checkpointAt = (step: number, steps: number) => (step + 1) % Math.max(1, Math.round(steps / 8)) === 0 || step + 1 === steps;

interface BlockJob {
  lv: LevelState;
  i: number;
  piece: TfModel;
  targets: Target[];
  x: Float32Array[];
  y: Float32Array[];
  batches: number[][][];
  nTrain: number;
  nVal: number;
  D: number;
  s: RecoverSettings;
  steps: number;
  seed: number;
  offset: number;
  progress: Progress;
  compare: (out: tf.Tensor, target: tf.Tensor, bi: number) => tf.Scalar;
}

/** Phase 1 for one level and block: the adapters matching the block's output to the target. */
async function trainBlock(j: BlockJob): Promise<{ params: Float32Array[] | null; before: number; after: number; bestStep: number }> {
  const { lv, i, piece, targets, x, y, batches, nTrain, nVal, D, s } = j;
  if (!targets.length) return { params: null, before: NaN, after: NaN, bestStep: 0 };
  const shape = (bi: number) => [batches[bi].length, batches[bi][0].length, D] as [number, number, number];
  // In units of the loss of skipping the block on the first batch (1 = as far off as that).
  const s0 = tf.tidy(() => j.compare(tf.tensor3d(x[0], shape(0)), tf.tensor3d(y[0], shape(0)), 0));
  const scale = Math.max((await s0.data())[0], 1e-12);
  s0.dispose();
  const loss = (bi: number, lowRank?: Map<string, LowRankTerm>) => tf.div(j.compare(lv.pieces.run(piece, i, tf.tensor3d(x[bi], shape(bi)), lowRank ? { lowRank } : {}), tf.tensor3d(y[bi], shape(bi)), bi), scale) as tf.Scalar;
  const params = loraInit(targets, s.rank, new Rng(j.seed));
  const tensorsOf = (ps: Float32Array[]) => ps.map((p, k) => tf.tensor2d(p, paramShape(targets[k >> 1], s.rank, k)));
  const validation = async (ps: Float32Array[] | null): Promise<number> => {
    const ts = ps ? tensorsOf(ps) : [];
    const lowRank = ps ? lowRankOf(targets, ts, s) : undefined;
    let sum = 0;
    for (let v = 0; v < nVal; v++) {
      const l = tf.tidy(() => loss(nTrain + v, lowRank));
      sum += (await l.data())[0];
      l.dispose();
    }
    tf.dispose(ts);
    return sum / Math.max(1, nVal);
  };
  const before = nVal ? await validation(null) : NaN;
  let best = { step: 0, loss: before, params: null as Float32Array[] | null };
  const adam = new Adam(params);
  for (let step = 0; step < j.steps; step++) {
    const bi = (j.offset + step) % nTrain;
    const ts = tensorsOf(params);
    const { value, grads } = tf.tidy(() => tf.valueAndGrads((...ps: tf.Tensor[]) => loss(bi, lowRankOf(targets, ps, s)))(ts));
    const g = await Promise.all(grads.map(async (t) => (await t.data()) as Float32Array));
    tf.dispose([value, ...grads, ...ts]);
    adam.step(g, lrAt(step, j.steps, s.lr));
    j.progress.tick();
    if (nVal && checkpointAt(step, j.steps)) {
      const l = await validation(params);
      if (l < best.loss) best = { step: step + 1, loss: l, params: params.map((p) => p.slice()) };
    }
    await letEventLoopTurn();
  }
  return nVal ? { params: best.params, before, after: best.loss, bestStep: best.step } : { params, before, after: NaN, bestStep: j.steps };
}

/** Held-out quality from final hidden states: perplexity, agreement with `reference` (the full model's argmax), and the argmax. */
async function headQuality(full: TfPieces, head: TfModel, hidden: Float32Array[], hoBatches: number[][][], reference: Int32Array[] | null): Promise<{ q: Quality; argmax: Int32Array[] }> {
  let nll = 0;
  let agree = 0;
  let n = 0;
  const argmax: Int32Array[] = [];
  for (const [bi, part] of hoBatches.entries()) {
    const T = part[0].length;
    const D = hidden[bi].length / (part.length * T);
    const [lossT, argT] = tf.tidy(() => {
      const logits = full.run(head, full.headIndex, tf.tensor3d(hidden[bi], [part.length, T, D])) as tf.Tensor2D;
      const V = logits.shape[1];
      const lp = tf.logSoftmax(logits);
      const picks = part.flatMap((seq, b) => seq.slice(1).map((tok, t) => (b * T + t) * V + tok));
      return [tf.neg(tf.sum(tf.gather(tf.reshape(lp, [-1]), tf.tensor1d(picks, 'int32')))), tf.argMax(logits, 1)];
    });
    nll += (await lossT.data())[0];
    const am = (await argT.data()) as Int32Array;
    tf.dispose([lossT, argT]);
    part.forEach((_, b) => {
      const mine = am.slice(b * T, b * T + T - 1);
      argmax.push(mine);
      const ref = reference?.[argmax.length - 1];
      for (let t = 0; t < T - 1; t++) if (!ref || mine[t] === ref[t]) agree++;
    });
    n += part.length * (T - 1);
  }
  return { q: { heldOutPpl: Math.exp(nll / n), agreement: agree / n }, argmax };
}

/** A level's held-out quality with its current adapters: the states from the embedding through every block, then the head. */
async function levelQuality(lv: LevelState, full: TfPieces, head: TfModel, ho0: Float32Array[], hoBatches: number[][][], D: number, s: RecoverSettings, decoder: number[], reference: Int32Array[]): Promise<Quality> {
  let h = ho0;
  for (const [l, i] of decoder.entries()) {
    const piece = await lv.pieces.piece(i);
    const { targets, params } = lv.blocks[l];
    const ts = params ? params.map((p, k) => tf.tensor2d(p, paramShape(targets[k >> 1], s.rank, k))) : [];
    const lowRank = params ? lowRankOf(targets, ts, s) : undefined;
    h = await mapBatches(hoBatches, (b, bi) => lv.pieces.run(piece, i, tf.tensor3d(h[bi], [b.length, b[0].length, D]), lowRank ? { lowRank } : {}));
    tf.dispose(ts);
    lv.pieces.release(i);
  }
  return (await headQuality(full, head, h, hoBatches, reference)).q;
}

interface EndToEndJob {
  lv: LevelState;
  full: TfPieces;
  head: TfModel;
  /** The full model's final states per batch (the teacher's distributions come from them through the head). */
  teacher: Float32Array[];
  batches: number[][][];
  nTrain: number;
  nVal: number;
  D: number;
  s: RecoverSettings;
  bw: BlockwiseSettings;
  /** The first block trained (its input states are lv.start). */
  from: number;
  decoder: number[];
  progress: Progress;
}

/**
 * Phase 2 for one level: Adam steps on the adapters of blocks from..L−1 with recover.ts's head loss,
 * the gradient carried back piece by piece. Updates lv.blocks' params to the best validation point.
 */
async function endToEnd(j: EndToEndJob): Promise<{ before: number; after: number; bestStep: number }> {
  const { lv, full, head, teacher, batches, nTrain, nVal, D, s, bw, from, decoder } = j;
  const trained = decoder.map((_, l) => l).filter((l) => l >= from && lv.blocks[l].targets.length);
  // Blocks whose local pass kept nothing start from LoRA's init (B = 0: unchanged); back to none if the start stays best.
  const untrained = trained.filter((l) => !lv.blocks[l].params);
  for (const l of untrained) lv.blocks[l].params = loraInit(lv.blocks[l].targets, s.rank, new Rng(s.seed + l));
  const flat = trained.flatMap((l) => lv.blocks[l].params!);
  const start = flat.map((p) => p.slice());
  const shape = (bi: number) => [batches[bi].length, batches[bi][0].length, D] as [number, number, number];
  const probsOf = (bi: number) => tf.tidy(() => tf.softmax(full.run(head, full.headIndex, tf.tensor3d(teacher[bi], shape(bi)))) as tf.Tensor2D);
  const probs = new Map<number, tf.Tensor2D>();
  const V = head.source.spec.vocabSize;
  const keepProbs = batches.reduce((n, b) => n + b.length * b[0].length, 0) * V * 4 <= 256 << 20;
  const teacherProbs = (bi: number) => {
    const hit = probs.get(bi);
    if (hit) return { p: hit, owned: true };
    const p = probsOf(bi);
    if (keepProbs) probs.set(bi, p);
    return { p, owned: keepProbs };
  };
  const tensorsOf = (l: number) => lv.blocks[l].params?.map((p, k) => tf.tensor2d(p, paramShape(lv.blocks[l].targets[k >> 1], s.rank, k))) ?? [];
  /** Forward of batch bi from the start depth; with `grad`, the adapters' gradients too (in `flat`'s order). */
  const pass = async (bi: number, grad: boolean): Promise<{ loss: number; grads?: Float32Array[] }> => {
    const inputs: tf.Tensor[] = [];
    let h: tf.Tensor = tf.tensor3d(lv.start![bi], shape(bi));
    for (const l of decoder.keys()) {
      if (l < from) continue;
      const i = decoder[l];
      const piece = await lv.pieces.piece(i);
      const ts = tensorsOf(l);
      inputs.push(h);
      h = tf.tidy(() => lv.pieces.run(piece, i, inputs[inputs.length - 1], ts.length ? { lowRank: lowRankOf(lv.blocks[l].targets, ts, s) } : {}));
      tf.dispose(ts);
      lv.pieces.release(i);
    }
    const { p, owned } = teacherProbs(bi);
    const ids = batches[bi];
    const lossOf = (x: tf.Tensor) => softTargetLoss(full.run(head, full.headIndex, x) as tf.Tensor2D, ids, p, s.ce);
    if (!grad) {
      const l = tf.tidy(() => lossOf(h));
      const loss = (await l.data())[0];
      tf.dispose([l, h, ...inputs]);
      if (!owned) p.dispose();
      return { loss };
    }
    const vg = tf.tidy(() => tf.valueAndGrads((x: tf.Tensor) => lossOf(x))([h]));
    const loss = (await vg.value.data())[0];
    let dy: tf.Tensor = vg.grads[0];
    vg.value.dispose();
    h.dispose();
    if (!owned) p.dispose();
    const grads = new Map<number, Float32Array[]>();
    for (let l = decoder.length - 1; l >= from; l--) {
      const i = decoder[l];
      const x = inputs.pop()!;
      const piece = await lv.pieces.piece(i);
      const b = lv.blocks[l];
      const ps = tensorsOf(l);
      const g = tf.tidy(() => tf.grads((xi: tf.Tensor, ...pi: tf.Tensor[]) => lv.pieces.run(piece, i, xi, pi.length ? { lowRank: lowRankOf(b.targets, pi, s) } : {}))([x, ...ps], dy));
      tf.dispose([x, dy, ...ps]);
      dy = g[0];
      if (b.params) grads.set(l, await Promise.all(g.slice(1).map(async (t) => (await t.data()) as Float32Array)));
      tf.dispose(g.slice(1));
      lv.pieces.release(i);
    }
    dy.dispose();
    return { loss, grads: trained.flatMap((l) => grads.get(l)!) };
  };
  const validation = async () => {
    let sum = 0;
    for (let v = 0; v < nVal; v++) sum += (await pass(nTrain + v, false)).loss;
    return sum / Math.max(1, nVal);
  };
  const before = nVal ? await validation() : NaN;
  let best = { step: 0, loss: before, params: null as Float32Array[] | null };
  const adam = new Adam(flat);
  for (let step = 0; step < bw.endToEnd; step++) {
    const { grads } = await pass(step % nTrain, true);
    adam.step(grads!, lrAt(step, bw.endToEnd, bw.endToEndLr));
    j.progress.tick();
    if (nVal && checkpointAt(step, bw.endToEnd)) {
      const l = await validation();
      if (l < best.loss) best = { step: step + 1, loss: l, params: flat.map((p) => p.slice()) };
    }
    await letEventLoopTurn();
  }
  for (const t of probs.values()) t.dispose();
  if (!nVal) return { before, after: NaN, bestStep: bw.endToEnd };
  // The kept point back into the blocks (flat's arrays are the blocks' own); the start: the local pass's.
  flat.forEach((p, k) => p.set((best.params ?? start)[k]));
  if (!best.params) for (const l of untrained) lv.blocks[l].params = null;
  return { before, after: best.loss, bestStep: best.step };
}
