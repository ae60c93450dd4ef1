/**
 * Recovery of elastic levels (SPEC §1.7, §5 item 5): per level, LoRA adapters on the linears of the
 * level's sub-model (the prefix slice of the reordered weights), trained by distillation from the
 * full model:
 *   loss = KL(p_full ‖ p_level) over next-token distributions + ce · next-token cross-entropy
 * (ce: the paper's loss; on self-generated data it estimates the same thing as the KL, on text it
 * adds the data's own signal). The base weights stay frozen; only A and B train (Adam, cosine decay).
 * The level is trained physically sliced rather than masked: same function (SPEC §4.2), the
 * adapters come out at the level's shapes, and a small level trains faster.
 * Runs on the tfjs lowering of the IR (src/exec/autodiff): the same model definition every executor runs.
 */
import { createHash } from 'node:crypto';
import os from 'node:os';
import { Worker } from 'node:worker_threads';
import { mlpsOf } from '../../src/core/arch/units.js';
import { layerNames } from '../../src/core/arch/names.js';
import type { ModelSource, TensorMeta } from '../../src/core/checkpoint/source.js';
import { LlmcError } from '../../src/core/errors.js';
import { isMoeLayer } from '../../src/core/arch/spec.js';
import { Rng } from '../../src/core/util/rng.js';
import { silentProgress, type Progress } from '../../src/core/util/progress.js';
import { TfModel, type LowRankTerm, type RunOptions } from '../../src/exec/autodiff/lower.js';
import { cachedProfile, cacheHandle, loadProfile, readsCache, saveProfile, writesCache, type ProfileCache, type ProfileData } from '../../src/measure/store.js';
import { sliceSource } from '../../src/core/pipeline/elastic.js';
import type { LevelLayer } from '../../src/core/records/elastic.js';
import { tf } from '../../src/exec/autodiff/tf.js';
import { letEventLoopTurn } from '../../src/core/util/interrupt.js';
import { PROJECTIONS, type Projection, type RecoverOptions } from './options.js';
import { fitAdapters, teacherOutputs, type TeacherOutputs } from './fit-init.js';

export interface RecoverSettings {
  rank: number;
  /** LoRA's alpha: the low-rank term is scaled by alpha / rank. */
  alpha: number;
  steps: number;
  lr: number;
  seed: number;
  /** Sequences per step. */
  batch: number;
  /** Weight of the next-token cross-entropy beside the KL term. */
  ce: number;
  /** The projections that get adapters. */
  targets: readonly Projection[];
  /**
   * The adapters' start: `chain` (levels train largest first in CHAINS fixed chains, each from the
   * next larger level's adapters; a chain's first level from zero), `zero` (B = 0, LoRA's), or `fit`
   * (rank-r least-squares correction toward the full model, fit-init.ts).
   */
  init: 'fit' | 'zero' | 'chain';
  /** The teacher kept as each position's top k tokens and the tail mass (absent: the full distributions). */
  teacherTopK?: number;
}

/** One linear's adapter at the level's shapes: A [rank, in], B [out, rank], row-major. */
export interface Adapter {
  weight: string;
  inFeatures: number;
  outFeatures: number;
  a: Float32Array;
  b: Float32Array;
}

/**
 * The linears that get adapters: the `projections` of every layer (ELMS: all seven; anchors included),
 * attention q/k/v/o and the dense MLPs' gate/up/down, at the shapes `source` has (a level's slice).
 * MoE experts get none (the paper has no MoE; their runtime path is the moe op, not a linear).
 */
export function adapterTargets(source: ModelSource, projections: readonly Projection[] = PROJECTIONS): { weight: string; inFeatures: number; outFeatures: number }[] {
  const spec = source.spec;
  const names: string[] = [];
  const attn = (['q', 'k', 'v', 'o'] as const).filter((p) => projections.includes(p));
  const mlp = (['gate', 'up', 'down'] as const).filter((p) => projections.includes(p));
  for (let l = 0; l < spec.numLayers; l++) {
    const n = layerNames(l);
    for (const p of attn) names.push(n[p]);
    if (!isMoeLayer(spec, l)) for (const m of mlpsOf(spec, l)) for (const p of mlp) names.push(m[p]);
  }
  return names.map((weight) => {
    const shape = source.meta(weight)?.shape;
    if (!shape) throw new LlmcError(`recovery: missing tensor "${weight}"`, source.description);
    return { weight, outFeatures: shape[0], inFeatures: shape[1] };
  });
}

/** Quality of a model variant on held-out sequences against the full model. */
export interface Quality {
  /** exp(mean next-token loss). */
  heldOutPpl: number;
  /** Fraction of positions whose argmax equals the full model's argmax (teacher-forced). */
  agreement: number;
}

/** The full model's next-token argmax at every predicting position of `seqs` (equal lengths). */
export async function fullArgmax(model: TfModel, seqs: number[][], batch = 8): Promise<Int32Array[]> {
  const out: Int32Array[] = [];
  for (let i = 0; i < seqs.length; i += batch) {
    const part = seqs.slice(i, i + batch);
    const t = tf.tidy(() => tf.argMax(model.logits(part), 1));
    const d = (await t.data()) as Int32Array;
    t.dispose();
    const T = part[0].length;
    part.forEach((_, b) => out.push(d.slice(b * T, b * T + T - 1)));
  }
  return out;
}

/** Held-out perplexity and greedy agreement with `reference` (fullArgmax) of the model under `opts`. */
export async function measure(model: TfModel, seqs: number[][], reference: Int32Array[], opts: RunOptions, batch = 8): Promise<Quality> {
  let nll = 0;
  let agree = 0;
  let count = 0;
  for (let i = 0; i < seqs.length; i += batch) {
    const part = seqs.slice(i, i + batch);
    const T = part[0].length;
    const [lossT, argT] = tf.tidy(() => {
      const logits = model.logits(part, opts);
      const V = logits.shape[1];
      const lp = tf.logSoftmax(logits);
      const rows = part.flatMap((s, b) => s.slice(1).map((_, t) => b * T + t));
      const targets = part.flatMap((s) => s.slice(1));
      const picked = tf.gather(tf.reshape(lp, [-1]), tf.tensor1d(rows.map((r, k) => r * V + targets[k]), 'int32'));
      return [tf.neg(tf.sum(picked)), tf.argMax(logits, 1)];
    });
    nll += (await lossT.data())[0];
    const am = (await argT.data()) as Int32Array;
    lossT.dispose();
    argT.dispose();
    part.forEach((_, b) => {
      const ref = reference[i + b];
      for (let t = 0; t < T - 1; t++) if (am[b * T + t] === ref[t]) agree++;
    });
    count += part.length * (T - 1);
  }
  return { heldOutPpl: Math.exp(nll / count), agreement: agree / count };
}

/**
 * The teacher's next-token distributions for each training batch. Kept as tensors when they fit in
 * `budgetBytes` (they serve every level), else recomputed per step. With `topK` (compact teacher,
 * reorder.recoverTeacherTopK): each position's k most likely tokens and the mass of the rest, computed
 * once per batch and kept (k · 8 bytes a token instead of V · 4), so steps past the first pass over
 * the data no longer run the full model; the loss is then the soft cross-entropy on that support plus
 * the tail mass against the student's mass outside it (softTargetLoss's `tail`).
 */
export class Teacher {
  private readonly kept = new Map<number, tf.Tensor2D>();
  private readonly compact = new Map<number, CompactTarget>();
  constructor(
    private readonly model: TfModel,
    readonly batches: number[][][],
    private readonly keep: boolean,
    readonly topK = 0,
  ) {}

  static create(model: TfModel, batches: number[][][], budgetBytes = 256 << 20, topK = 0): Teacher {
    const tokens = batches.reduce((a, b) => a + b.length * b[0].length, 0);
    const V = model.source.spec.vocabSize;
    const k = topK > 0 && topK < V ? topK : 0;
    return new Teacher(model, batches, tokens * (k ? k * 8 + 4 : V * 4) <= budgetBytes, k);
  }

  /**
   * Probabilities [B·T, V] of batch i (owned by the Teacher when kept; else the caller disposes it).
   * Compact: zero outside each position's top k, and `tail` [B·T, 1] the mass left out (the caller
   * disposes both).
   */
  probs(i: number): { probs: tf.Tensor2D; owned: boolean; tail?: tf.Tensor2D } {
    if (this.topK) {
      const c = this.compact.get(i) ?? compactOf(tf.tidy(() => tf.softmax(this.model.logits(this.batches[i])) as tf.Tensor2D), this.topK);
      if (this.keep) this.compact.set(i, c);
      return { ...denseOf(c, this.model.source.spec.vocabSize), owned: false };
    }
    const hit = this.kept.get(i);
    if (hit) return { probs: hit, owned: true };
    const p = tf.tidy(() => tf.softmax(this.model.logits(this.batches[i])) as tf.Tensor2D);
    if (!this.keep) return { probs: p, owned: false };
    this.kept.set(i, p);
    return { probs: p, owned: true };
  }

  dispose(): void {
    for (const t of this.kept.values()) t.dispose();
    this.kept.clear();
    this.compact.clear();
  }
}

/** A batch's teacher as each position's top k: token ids and probabilities [N·k], and the mass outside [N]. */
export interface CompactTarget {
  k: number;
  ids: Int32Array;
  probs: Float32Array;
  tail: Float32Array;
}

/** The top k of each row of `probs` [N, V] (disposed here); the tail summed in float64 over the rows' other entries. */
export function compactOf(probs: tf.Tensor2D, k: number): CompactTarget {
  const [N, V] = probs.shape;
  const all = probs.dataSync() as Float32Array;
  const top = tf.topk(probs, k);
  const ids = top.indices.dataSync() as Int32Array;
  const vals = top.values.dataSync() as Float32Array;
  tf.dispose([probs, top.indices, top.values]);
  const tail = new Float32Array(N);
  const inTop = new Uint8Array(V);
  for (let r = 0; r < N; r++) {
    for (let j = 0; j < k; j++) inTop[ids[r * k + j]] = 1;
    let rest = 0;
    for (let v = 0; v < V; v++) if (inTop[v]) inTop[v] = 0;
    else rest += all[r * V + v];
    tail[r] = rest;
  }
  return { k, ids: ids.slice(), probs: vals.slice(), tail };
}

/** The compact target as softTargetLoss takes it: probabilities [N, V] (zero off the support) and the tail [N, 1]. */
function denseOf(c: CompactTarget, V: number): { probs: tf.Tensor2D; tail: tf.Tensor2D } {
  const N = c.tail.length;
  const dense = new Float32Array(N * V);
  for (let r = 0; r < N; r++) for (let j = 0; j < c.k; j++) dense[r * V + c.ids[r * c.k + j]] = c.probs[r * c.k + j];
  return { probs: tf.tensor2d(dense, [N, V]), tail: tf.tensor2d(c.tail, [N, 1]) };
}

/**
 * The training sequences in a seeded order, cut into batches of `batch`, with a validation part
 * (1/8 of them, at most 16, none below 8 sequences) that only decides which step's adapters to keep.
 * A last partial batch is dropped when full ones exist.
 */
export function trainingBatches(seqs: number[][], batch: number, seed: number): { train: number[][][]; validation: number[][][] } {
  const order = Array.from(new Rng(seed).permutation(seqs.length), (j) => seqs[j]);
  const nVal = seqs.length >= 8 ? Math.min(16, Math.floor(seqs.length / 8)) : 0;
  const cut = (xs: number[][]) => {
    const out: number[][][] = [];
    for (let i = 0; i + batch <= xs.length || (i === 0 && xs.length); i += batch) out.push(xs.slice(i, i + batch));
    return out;
  };
  return { validation: cut(order.slice(0, nVal)), train: cut(order.slice(nVal)) };
}

/** Sequences the adapters' least-squares start is fitted on (recoverInit=fit): the first training batches. */
export const FIT_SEQUENCES = 64;

function fitBatches(train: number[][][]): number[][][] {
  const out: number[][][] = [];
  for (let n = 0, i = 0; i < train.length && n < FIT_SEQUENCES; i++) {
    out.push(train[i]);
    n += train[i].length;
  }
  return out;
}

/** Cosine decay from lr to lr/10 after a short linear warm-up. */
export function lrAt(step: number, steps: number, lr: number): number {
  const warm = Math.max(1, Math.round(steps * 0.05));
  if (step < warm) return (lr * (step + 1)) / warm;
  const p = (step - warm) / Math.max(1, steps - warm);
  return lr * (0.1 + 0.45 * (1 + Math.cos(Math.PI * p)));
}

/**
 * Adam over plain Float32Arrays (one update loop instead of ~10 tfjs kernels per parameter tensor:
 * with 70 small adapter tensors the kernels' overhead dominated the step).
 */
export class Adam {
  private readonly m: Float32Array[];
  private readonly v: Float32Array[];
  private t = 0;
  constructor(
    readonly params: Float32Array[],
    private readonly beta1 = 0.9,
    private readonly beta2 = 0.999,
    private readonly eps = 1e-8,
  ) {
    this.m = params.map((p) => new Float32Array(p.length));
    this.v = params.map((p) => new Float32Array(p.length));
  }

  step(grads: Float32Array[], lr: number): void {
    this.t++;
    const c1 = 1 - this.beta1 ** this.t;
    const c2 = 1 - this.beta2 ** this.t;
    const { beta1: b1, beta2: b2, eps } = this;
    grads.forEach((g, i) => {
      const p = this.params[i];
      const m = this.m[i];
      const v = this.v[i];
      for (let k = 0; k < p.length; k++) {
        m[k] = b1 * m[k] + (1 - b1) * g[k];
        v[k] = b2 * v[k] + (1 - b2) * g[k] * g[k];
        p[k] -= (lr * (m[k] / c1)) / (Math.sqrt(v[k] / c2) + eps);
      }
    });
  }
}

/**
 * Train one level's adapters on `student`, the level's sub-model (a slice of the reordered weights),
 * against `teacher` (whose batches are `train`, then `validation`). The validation loss is taken at
 * the start, every eighth of the steps and at the end; the best point's adapters are kept, none
 * when no point beats the start (the level ships as it is). Deterministic for a seed (the init and
 * the batch order; tfjs's kernels are). Adapters train transposed (at = Aᵀ [in, r], bt = Bᵀ [r, out]).
 * Step k takes training batch (offset + k) mod the batches: a level warm-started in a chain goes on
 * with the data where the previous level stopped instead of repeating its batches.
 */
export async function trainLevel(
  student: TfModel,
  teacher: Teacher,
  split: { train: number; validation: number },
  s: RecoverSettings,
  levelSeed: number,
  progress: Progress = silentProgress,
  init?: Float32Array[],
  offset = 0,
): Promise<{ adapters: Adapter[] | null; validation: { step: number; loss: number }[]; bestStep: number }> {
  const rng = new Rng(levelSeed);
  const scale = s.alpha / s.rank;
  const targets = adapterTargets(student.source, s.targets);
  // A ~ U(-1/√in, 1/√in) (PEFT's kaiming_uniform(a=√5)), B = 0: training starts from the level as it is.
  // With `init` (fitted adapters): those, training starts near the answer.
  const params: Float32Array[] = init ? init.map((p) => p.slice()) : loraInit(targets, s.rank, rng);
  const shapes = targets.flatMap((t) => [[t.inFeatures, s.rank] as [number, number], [s.rank, t.outFeatures] as [number, number]]);
  const lowRankOf = (ps: tf.Tensor[]) => lowRankMap(targets, ps, scale);
  const validationLoss = async (withAdapters = true): Promise<number> => {
    let sum = 0;
    const tensors = withAdapters ? params.map((p, i) => tf.tensor2d(p, shapes[i])) : [];
    const lowRank = withAdapters ? lowRankOf(tensors) : undefined;
    for (let v = 0; v < split.validation; v++) {
      const { probs, owned, tail } = teacher.probs(split.train + v);
      const l = tf.tidy(() => distillLoss(student, teacher.batches[split.train + v], { lowRank }, probs, s.ce, undefined, tail));
      sum += (await l.data())[0];
      l.dispose();
      if (!owned) tf.dispose([probs, ...(tail ? [tail] : [])]);
    }
    tf.dispose(tensors);
    return sum / split.validation;
  };
  const validation: { step: number; loss: number }[] = [];
  // The level as it is is the bar every point must beat (with B = 0 that is step 0 itself).
  let best: { step: number; loss: number; params: Float32Array[] | null } = { step: 0, loss: init && split.validation ? await validationLoss(false) : Infinity, params: null };
  const checkpoint = async (step: number) => {
    if (!split.validation) return;
    const loss = await validationLoss();
    validation.push({ step, loss });
    if (loss < best.loss) best = { step, loss, params: step === 0 && !init ? null : params.map((p) => p.slice()) };
  };
  await checkpoint(0);
  const every = Math.max(1, Math.round(s.steps / 8));
  const adam = new Adam(params);
  for (let step = 0; step < s.steps; step++) {
    const bi = (offset + step) % split.train;
    const { probs, owned, tail } = teacher.probs(bi);
    const tensors = params.map((p, i) => tf.tensor2d(p, shapes[i]));
    const { value, grads } = tf.tidy(() => tf.valueAndGrads((...ps: tf.Tensor[]) => distillLoss(student, teacher.batches[bi], { lowRank: lowRankOf(ps) }, probs, s.ce, undefined, tail))(tensors));
    const g = await Promise.all(grads.map(async (t) => (await t.data()) as Float32Array));
    tf.dispose([value, ...grads, ...tensors]);
    if (!owned) tf.dispose([probs, ...(tail ? [tail] : [])]);
    adam.step(g, lrAt(step, s.steps, s.lr));
    progress.tick();
    if ((step + 1) % every === 0 || step + 1 === s.steps) await checkpoint(step + 1);
    await letEventLoopTurn();
  }
  // Without validation data: the last step's adapters.
  const kept = split.validation ? best.params : params;
  const adapters = kept && targets.map((t, i) => ({ ...t, a: transpose(kept[2 * i], t.inFeatures, s.rank), b: transpose(kept[2 * i + 1], s.rank, t.outFeatures) }));
  return { adapters, validation, bestStep: split.validation ? best.step : s.steps };
}

/**
 * trainLevel's parameters (at [in, r], bt [r, out]) from a larger level's adapters (profile arrays
 * A [r, in'], B [out', r]): the level's units are a prefix of the larger level's, so its adapters are
 * the prefix (rows of Aᵀ, columns of Bᵀ; zeros where the level is wider).
 */
function warmStart(targets: readonly { weight: string; inFeatures: number; outFeatures: number }[], warm: LevelProfile['arrays'], rank: number): Float32Array[] {
  return targets.flatMap((t) => {
    const a = warm[`a:${t.weight}`];
    const b = warm[`b:${t.weight}`];
    const at = new Float32Array(t.inFeatures * rank);
    const bt = new Float32Array(rank * t.outFeatures);
    if (a && b) {
      const inPrev = a.length / rank;
      const outPrev = b.length / rank;
      for (let i = 0; i < Math.min(inPrev, t.inFeatures); i++) for (let j = 0; j < rank; j++) at[i * rank + j] = a[j * inPrev + i];
      for (let j = 0; j < rank; j++) for (let o = 0; o < Math.min(outPrev, t.outFeatures); o++) bt[j * t.outFeatures + o] = b[o * rank + j];
    }
    return [at, bt];
  });
}

/** LoRA's start, A then B per target: A ~ U(-1/√in, 1/√in) (PEFT's kaiming_uniform(a=√5)), B = 0 (the level as it is). */
export function loraInit(targets: readonly { inFeatures: number; outFeatures: number }[], rank: number, rng: Rng): Float32Array[] {
  return targets.flatMap((t) => {
    const bound = 1 / Math.sqrt(t.inFeatures);
    return [Float32Array.from({ length: t.inFeatures * rank }, () => (rng.next() * 2 - 1) * bound), new Float32Array(rank * t.outFeatures)];
  });
}

/** The low-rank terms of `targets` from their A, B tensors laid out as loraInit lays them. */
export function lowRankMap(targets: readonly { weight: string }[], ps: readonly tf.Tensor[], scale: number): Map<string, LowRankTerm> {
  return new Map(targets.map((t, i) => [t.weight, { at: ps[2 * i] as tf.Tensor2D, bt: ps[2 * i + 1] as tf.Tensor2D, scale }]));
}

/** [rows, cols] row-major → [cols, rows]. */
export function transpose(x: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(x.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = x[r * cols + c];
  return out;
}

/** The adapters as the tfjs lowering's low-rank terms (the caller disposes the tensors). */
export function lowRankTerms(adapters: readonly Adapter[], rank: number, scale: number): Map<string, LowRankTerm> {
  return new Map(
    adapters.map((a) => [
      a.weight,
      { at: tf.transpose(tf.tensor2d(a.a, [rank, a.inFeatures])), bt: tf.transpose(tf.tensor2d(a.b, [a.outFeatures, rank])), scale },
    ]),
  );
}

/** Soft cross-entropy against the teacher's probabilities (= KL + the teacher's entropy) + ce · data CE. */
export function distillLoss(model: TfModel, ids: number[][], opts: RunOptions, teacherProbs: tf.Tensor2D, ce: number, override?: Map<string, tf.Tensor>, tail?: tf.Tensor2D): tf.Scalar {
  return softTargetLoss(model.logits(ids, opts, override), ids, teacherProbs, ce, tail);
}

/**
 * distillLoss from the student's logits [B·T, V] (blockwise recovery computes them piece by piece).
 * With `tail` [B·T, 1] (a compact teacher: `teacherProbs` zero off each position's support), the
 * tail mass is a target too, against the student's log-mass off the support: with the support
 * covering the teacher's mass this is the dense loss, and its minimum stays at the teacher's
 * distribution restricted to that partition.
 */
export function softTargetLoss(logits: tf.Tensor2D, ids: number[][], teacherProbs: tf.Tensor2D, ce: number, tail?: tf.Tensor2D): tf.Scalar {
  const B = ids.length;
  const T = ids[0].length;
  const V = logits.shape[1];
  // Predicting positions only (the last has no next token in the data): row weights, not a gather
  // (gather's gradient needs a kernel tfjs's wasm backend lacks).
  const w = Float32Array.from({ length: B * T }, (_, k) => (k % T === T - 1 ? 0 : 1 / (B * (T - 1))));
  const rowW = tf.tensor2d(w, [B * T, 1]);
  const lp = tf.logSoftmax(logits);
  let target: tf.Tensor = teacherProbs;
  if (ce > 0) {
    const next = tf.tensor1d(ids.flatMap((s) => [...s.slice(1), 0]), 'int32');
    target = tf.add(teacherProbs, tf.mul(tf.oneHot(next, V), ce));
  }
  let loss = tf.sum(tf.mul(tf.mul(target, lp), rowW));
  if (tail) {
    // log of the student's mass off the support: logsumexp over those logits (the support's pushed to −1e4) − logsumexp over all.
    const onSupport = tf.cast(tf.greater(teacherProbs, 0), 'float32');
    const off = tf.sub(tf.logSumExp(tf.add(logits, tf.mul(onSupport, -1e4)), 1, true), tf.logSumExp(logits, 1, true));
    loss = tf.add(loss, tf.sum(tf.mul(tf.mul(tail, off), rowW)));
  }
  return tf.neg(loss) as tf.Scalar;
}

/** Per level: its quality without and with adapters, and the adapters (absent when not recovered). */
export interface LevelRecovery {
  before: Quality;
  after?: Quality;
  adapters?: Adapter[];
  /** The training step whose adapters were kept (0: none helped on validation data). */
  bestStep?: number;
}

export interface RecoverRequest {
  /** The reordered model (the teacher; every level is a prefix slice of it). */
  model: ModelSource;
  levels: readonly { id: string; layers: LevelLayer[] }[];
  heldOut: number[][];
  /** Names the held-out set in cache keys. */
  heldOutKey: string;
  /** Training sequences and settings; null: measure only. */
  training: { seqs: number[][]; key: string; settings: RecoverSettings } | null;
  /** Levels trained at once, each on a worker thread (1: in this thread). Default: the cores, at most 4. */
  threads?: number;
  cacheDir?: ProfileCache;
  progress?: Progress;
}

/** What one level's work produces: its profile (quality before/after, validation curve; adapters as arrays). */
export type LevelProfile = ProfileData;

/** The inputs every level shares (sent once to each worker thread). */
export interface LevelWork {
  heldOut: number[][];
  split: { train: number[][][]; validation: number[][][] };
  settings: RecoverSettings | null;
}

/**
 * One thread's level worker: the reordered model as the teacher (loaded once), each level's slice as
 * a student. The same code runs in this thread and in recovery worker threads.
 */
export class LevelTrainer {
  private teacherModel: TfModel | undefined;
  private reference: Int32Array[] | undefined;
  private teacher: Teacher | undefined;
  private fitOutputs: TeacherOutputs | undefined;

  constructor(
    readonly model: ModelSource,
    readonly work: LevelWork,
  ) {}

  private async tfModel(): Promise<TfModel> {
    return (this.teacherModel ??= await TfModel.load(this.model));
  }

  private async ref(): Promise<Int32Array[]> {
    return (this.reference ??= await fullArgmax(await this.tfModel(), this.work.heldOut));
  }

  /** The full model's held-out quality (agreement 1 by definition). */
  async full(): Promise<Quality> {
    return measure(await this.tfModel(), this.work.heldOut, await this.ref(), {});
  }

  /** Measure the level, and with settings train its adapters and measure again. */
  async level(layers: readonly LevelLayer[], progress: Progress = silentProgress, warm: LevelProfile['arrays'] | null = null, offset = 0): Promise<LevelProfile> {
    const s = this.work.settings;
    const student = await TfModel.load(sliceSource(this.model, [...layers], 'level'));
    try {
      const before = await measure(student, this.work.heldOut, await this.ref(), {});
      if (!s) return { meta: { before }, arrays: {} };
      const { train, validation: val } = this.work.split;
      this.teacher ??= Teacher.create(await this.tfModel(), [...train, ...val], undefined, s.teacherTopK);
      // The level's own seed follows its widths (as its cache key does), not its place in the list.
      const levelSeed = createHash('sha256').update(`${s.seed}:${JSON.stringify(layers.map((w) => [w.kvGroups, w.qHeadsPerGroup, w.ffn]))}`).digest().readUInt32LE(0);
      let init: Float32Array[] | undefined;
      if (warm) init = warmStart(adapterTargets(student.source, s.targets), warm, s.rank);
      else if (s.init === 'fit') {
        // Fitted on the first training batches (the teacher's outputs there are shared by every level).
        const batches = fitBatches(train);
        const targets = adapterTargets(student.source, s.targets);
        this.fitOutputs ??= await teacherOutputs(await this.tfModel(), batches, new Set(targets.map((t) => t.weight)));
        init = await fitAdapters(student, batches, this.fitOutputs, targets, s.rank, s.alpha / s.rank);
      }
      const { adapters, validation, bestStep } = await trainLevel(student, this.teacher, { train: train.length, validation: val.length }, s, levelSeed, progress, init, offset);
      if (!adapters) return { meta: { before, validation, bestStep }, arrays: {} };
      const terms = lowRankTerms(adapters, s.rank, s.alpha / s.rank);
      const after = await measure(student, this.work.heldOut, await this.ref(), { lowRank: terms });
      for (const t of terms.values()) tf.dispose([t.at, t.bt]);
      const arrays: Record<string, Float64Array> = {};
      for (const a of adapters) {
        arrays[`a:${a.weight}`] = Float64Array.from(a.a);
        arrays[`b:${a.weight}`] = Float64Array.from(a.b);
      }
      return { meta: { before, after, validation, bestStep }, arrays };
    } finally {
      student.dispose();
    }
  }

  dispose(): void {
    this.teacher?.dispose();
    this.teacherModel?.dispose();
  }
}

/**
 * Measure every level on the held-out set (perplexity, greedy agreement with the full model) and,
 * with `training`, recover it and measure again. Each level is a cached profile (keyed by the
 * level's weights, the held-out and training sets and the settings), as is the full model's quality.
 * Levels not cached are computed `threads` at a time (worker threads; the results do not depend on it).
 */
export async function recoverLevels(req: RecoverRequest): Promise<{ full: Quality; levels: Map<string, LevelRecovery> }> {
  const progress = req.progress ?? silentProgress;
  const s = req.training?.settings ?? null;
  const work: LevelWork = {
    heldOut: req.heldOut,
    split: req.training ? trainingBatches(req.training.seqs, s!.batch, s!.seed) : { train: [], validation: [] },
    settings: s,
  };
  const local = new LevelTrainer(req.model, work);
  try {
    const fullProfile = await cachedProfile(req.cacheDir, 'level-quality', { model: await req.model.identity(), heldOut: req.heldOutKey }, async () => ({
      meta: { ...(await local.full()) },
      arrays: {},
    }));
    const full = fullProfile.meta as unknown as Quality;
    const todo = req.levels.filter((lv) => !isFull(req.model, lv.layers));
    // Levels are looked up first and trained in parallel, so not through cachedProfile (the same policy).
    const cache = cacheHandle(req.cacheDir);
    const chains = s ? recoveryChains(req.model, todo, s.init === 'chain') : todo.map((lv) => [lv]);
    const keys = new Map<string, Record<string, unknown>>();
    for (const chain of chains) {
      let prev: Record<string, unknown> | null = null;
      for (const [i, lv] of chain.entries()) {
        const key: Record<string, unknown> = {
          level: await sliceSource(req.model, lv.layers, 'level').identity(),
          heldOut: req.heldOutKey,
          training: req.training ? { data: req.training.key, settings: s } : null,
          // The key of the level it starts from (the profile store hashes the whole key), and where in the data it starts.
          ...(prev ? { warm: prev, offset: dataOffset(i, s) } : {}),
        };
        keys.set(lv.id, key);
        prev = key;
      }
    }
    const profiles = new Map<string, LevelProfile>();
    // Per chain, the levels from its first cache miss on, and the adapters they start from.
    const jobs: Job[] = [];
    for (const chain of chains) {
      let warm: LevelProfile['arrays'] | null = null;
      for (let i = 0; i < chain.length; i++) {
        const hit = readsCache(cache) ? await loadProfile(cache.dir, 'level-recovery', keys.get(chain[i].id)!) : undefined;
        if (!hit) {
          jobs.push({ chain: chain.slice(i), warm, start: i });
          break;
        }
        profiles.set(chain[i].id, hit);
        if (chain.length > 1 && hit.meta.after) warm = hit.arrays;
      }
    }
    const missing = jobs.reduce((n, j) => n + j.chain.length, 0);
    const unit = s ? s.steps : 1;
    if (s) progress.start(`reorder: recovering ${todo.length} level${todo.length === 1 ? '' : 's'} (LoRA r=${s.rank}, ${s.steps} steps each)`, todo.length * unit);
    else progress.start('reorder: held-out quality per level', todo.length);
    progress.tick((todo.length - missing) * unit);
    const save = async (lv: Job['chain'][number], data: LevelProfile) => {
      profiles.set(lv.id, data);
      if (writesCache(cache)) await saveProfile(cache.dir, 'level-recovery', keys.get(lv.id)!, data);
      if (!s) progress.tick();
    };
    const threads = Math.min(req.threads ?? Math.min(4, os.availableParallelism()), jobs.length);
    if (threads > 1 && s && workerScript()) await inWorkers(req.model, work, jobs, threads, progress, save);
    else for (const job of jobs) await runChain(local, job, progress, save);
    progress.done();

    const out = new Map<string, LevelRecovery>();
    for (const lv of req.levels) {
      const p = profiles.get(lv.id);
      if (!p) {
        out.set(lv.id, { before: full });
        continue;
      }
      const meta = p.meta as { before: Quality; after?: Quality; bestStep?: number };
      if (!meta.after) {
        out.set(lv.id, { before: meta.before, ...(s ? { bestStep: 0 } : {}) });
        continue;
      }
      const sliced = sliceSource(req.model, lv.layers, 'level');
      const adapters = adapterTargets(sliced, s!.targets).map((t) => ({ ...t, a: Float32Array.from(p.arrays[`a:${t.weight}`]), b: Float32Array.from(p.arrays[`b:${t.weight}`]) }));
      out.set(lv.id, { before: meta.before, after: meta.after, adapters, bestStep: meta.bestStep });
    }
    return { full, levels: out };
  } finally {
    local.dispose();
  }
}

/** Levels trained one after another, each starting from the previous one's adapters (or one level, from scratch). */
export interface Job {
  chain: { id: string; layers: LevelLayer[] }[];
  /** The adapters the first level starts from (a larger level's), or null. */
  warm: LevelProfile['arrays'] | null;
  /** The first level's place in its chain (where in the training data it starts: `dataOffset`). */
  start: number;
}

/** The training batch a chain's `i`th level starts at: each level goes on where the previous one stopped. */
export const dataOffset = (i: number, settings: RecoverSettings | null | undefined): number => i * (settings?.steps ?? 0);

/** Number of warm-start chains (reorder.recoverInit=chain): fixed, so the result does not depend on the threads. */
export const CHAINS = 2;

/**
 * recoverSteps=auto: about `perChain` steps on each of the CHAINS chains (two threads), shared by its
 * levels, `min` to `max` per level. Fewer levels asked, more steps each: the default 10 levels (nine
 * trained, chains of 4 and 5) get 80; `0.5,0.75,1` (two trained, one per chain) 240.
 */
const AUTO_STEPS = { perChain: 360, min: 80, max: 240 } as const;

export function autoSteps(trainedLevels: number): number {
  const longest = Math.max(1, Math.ceil(trainedLevels / CHAINS));
  return Math.min(AUTO_STEPS.max, Math.max(AUTO_STEPS.min, Math.round(AUTO_STEPS.perChain / longest)));
}

/**
 * recoverTargets=auto: adapters on o and down (the projections whose inputs a level cuts) for short
 * training, and on up as well from 160 steps: the extra adapters pay off only with the longer
 * training (stories260K at 74.9%, 240 steps: 103 against 109 held-out perplexity), and at 80 steps
 * they cost the largest levels (92.6%: 71 against 60).
 */
function autoTargets(steps: number): readonly Projection[] {
  return steps >= 160 ? ['o', 'up', 'down'] : ['o', 'down'];
}

/** The training settings of `trainedLevels` levels from the pass's options (auto steps and targets resolved). */
export function recoverSettings(o: RecoverOptions, trainedLevels: number): RecoverSettings {
  const { data: _d, threads: _t, steps: asked, targets, ...rest } = o;
  const steps = asked === 'auto' ? autoSteps(trainedLevels) : asked;
  return { ...rest, steps, targets: targets === 'auto' ? autoTargets(steps) : targets };
}

/**
 * The order levels train in. With `chain`: by size, largest first, cut into CHAINS contiguous runs
 * (the larger levels' run one shorter: their steps cost more); every level starts from the adapters
 * of the next larger level, its nearest neighbour. Else each level alone.
 */
function recoveryChains<L extends { id: string; layers: LevelLayer[] }>(model: ModelSource, levels: readonly L[], chain: boolean): L[][] {
  if (!chain) return levels.map((lv) => [lv]);
  const size = (lv: L) => sliceSource(model, lv.layers, 'level').tensors.reduce((n, t) => n + t.shape.reduce((a, b) => a * b, 1), 0);
  const bySize = [...levels].map((lv) => ({ lv, n: size(lv) })).sort((a, b) => b.n - a.n || (a.lv.id < b.lv.id ? -1 : 1));
  const chains = Math.min(CHAINS, levels.length);
  const out: L[][] = [];
  for (let c = 0, at = 0; c < chains; c++) {
    const len = Math.floor((levels.length + c) / chains);
    out.push(bySize.slice(at, at + len).map((x) => x.lv));
    at += len;
  }
  return out;
}

/** Train a job's levels in order on `trainer`, each from the previous one's adapters. */
export async function runChain(trainer: LevelTrainer, job: Job, progress: Progress, save: (lv: Job['chain'][number], data: LevelProfile) => Promise<void>): Promise<void> {
  let warm = job.warm;
  for (const [k, lv] of job.chain.entries()) {
    const data = await trainer.level(lv.layers, progress, warm, dataOffset(job.start + k, trainer.work.settings));
    await save(lv, data);
    if (job.chain.length > 1 && data.meta.after) warm = data.arrays;
  }
}

/** The compiled worker script beside this module, or null when running from TypeScript sources (tests). */
function workerScript(): URL | null {
  return import.meta.url.endsWith('.js') ? new URL('./recover-worker.js', import.meta.url) : null;
}

/** What a worker thread gets: the reordered model's tensors in shared memory, and the shared work. */
export interface WorkerInit {
  spec: ModelSource['spec'];
  assets: ModelSource['assets'];
  description: string;
  dir: string;
  identity: string;
  allowNonFinite: boolean;
  tensors: { meta: TensorMeta; buffer: SharedArrayBuffer }[];
  work: LevelWork;
}

export type ToWorker = { job: Job } | { exit: true };
export type FromWorker = { tick: number } | { done: string; profile: { meta: Record<string, unknown>; arrays: Record<string, Float64Array> } } | { idle: true } | { error: string };

/** Run `jobs` on `threads` worker threads, each holding the model once (shared memory) and taking jobs in turn. */
async function inWorkers(
  model: ModelSource,
  work: LevelWork,
  jobs: readonly Job[],
  threads: number,
  progress: Progress,
  save: (lv: Job['chain'][number], data: LevelProfile) => Promise<void>,
): Promise<void> {
  const tensors: WorkerInit['tensors'] = [];
  for (const meta of model.tensors) {
    const data = await model.readF32(meta.name);
    const buffer = new SharedArrayBuffer(data.byteLength);
    new Float32Array(buffer).set(data);
    tensors.push({ meta, buffer });
  }
  const init: WorkerInit = { spec: model.spec, assets: model.assets, description: model.description, dir: model.dir, identity: await model.identity(), allowNonFinite: model.allowNonFinite, tensors, work };
  const queue = [...jobs];
  const pending: Promise<void>[] = [];
  const workers: Worker[] = [];
  try {
    for (let i = 0; i < threads; i++) {
      const worker = new Worker(workerScript()!, { workerData: init });
      workers.push(worker);
      pending.push(
        new Promise<void>((resolve, reject) => {
          let current: Job | undefined;
          let saving = Promise.resolve();
          const next = () => {
            current = queue.shift();
            worker.postMessage(current ? ({ job: current } satisfies ToWorker) : ({ exit: true } satisfies ToWorker));
            if (!current) resolve();
          };
          worker.on('message', (m: FromWorker) => {
            if ('tick' in m) progress.tick(m.tick);
            else if ('error' in m) reject(new LlmcError(`recovery worker: ${m.error}`));
            else if ('done' in m) saving = saving.then(() => save(current!.chain.find((lv) => lv.id === m.done)!, m.profile));
            else saving.then(next, reject);
          });
          worker.on('error', reject);
          worker.on('exit', (code) => (code === 0 && !current ? resolve() : reject(new LlmcError(`recovery worker exited with code ${code}`))));
          next();
        }),
      );
    }
    await Promise.all(pending);
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
  }
}

/** True when a level keeps every unit (the full model: nothing to recover). */
function isFull(model: ModelSource, layers: readonly LevelLayer[]): boolean {
  const spec = model.spec;
  const R = spec.numHeads / spec.numKvHeads;
  return layers.every((w, l) => w.kvGroups === spec.numKvHeads && w.qHeadsPerGroup === R && mlpsOf(spec, l).every((m) => !m.elastic || w.ffn >= m.width));
}
