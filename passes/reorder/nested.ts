/**
 * The nested-training baseline for recovery (bench/recovery.bench.ts; not a product option: per-level
 * adapters measured better). MatFormer / Flextron style: ONE adapter set at the full model's shapes,
 * shared by every level — a level uses its prefix (the rows of Aᵀ up to its in-features, the columns
 * of Bᵀ up to its out-features, as its weights are prefixes of the reordered ones) — trained by
 * distillation from the full model, each step on a level drawn (seeded) uniformly from `levels`.
 * Same loss, data, batches, optimizer and schedule as per-level recovery (recover.ts).
 */
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import { sliceSource } from '../../src/core/pipeline/elastic.js';
import type { LevelLayer } from '../../src/core/records/elastic.js';
import { TfModel, type LowRankTerm } from '../../src/exec/autodiff/lower.js';
import { tf } from '../../src/exec/autodiff/tf.js';
import { Rng } from '../../src/core/util/rng.js';
import { Adam, adapterTargets, distillLoss, fullArgmax, lrAt, measure, Teacher, trainingBatches, type Quality, type RecoverSettings } from './recover.js';

export interface NestedResult {
  full: Quality;
  levels: Map<string, { before: Quality; after: Quality }>;
  /** Steps each level was drawn for. */
  draws: Record<string, number>;
}

export async function trainNested(
  model: ModelSource,
  levels: readonly { id: string; layers: LevelLayer[] }[],
  heldOut: number[][],
  seqs: number[][],
  s: RecoverSettings,
  steps: number,
): Promise<NestedResult> {
  const teacherModel = await TfModel.load(model);
  const students = await Promise.all(levels.map((lv) => TfModel.load(sliceSource(model, lv.layers, 'level'))));
  const { train } = trainingBatches(seqs, s.batch, s.seed);
  const teacher = Teacher.create(teacherModel, train);
  const scale = s.alpha / s.rank;
  const r = s.rank;
  try {
    const ref = await fullArgmax(teacherModel, heldOut);
    const full = await measure(teacherModel, heldOut, ref, {});
    const targets = adapterTargets(model, s.targets);
    const rng = new Rng(s.seed);
    // Full-shape shared parameters: at = Aᵀ [in, r] (A ~ U(±1/√in)), bt = Bᵀ [r, out] = 0.
    const params: Float32Array[] = targets.flatMap((t) => {
      const bound = 1 / Math.sqrt(t.inFeatures);
      return [Float32Array.from({ length: t.inFeatures * r }, () => (rng.next() * 2 - 1) * bound), new Float32Array(r * t.outFeatures)];
    });
    // Each level's shapes for the same weights (adapterTargets lists them in the same order).
    const shapesOf = students.map((m) => adapterTargets(m.source, s.targets));
    const sliceAt = (full: Float32Array, inF: number) => full.subarray(0, inF * r);
    const sliceBt = (full: Float32Array, outFull: number, outF: number) => {
      const out = new Float32Array(r * outF);
      for (let j = 0; j < r; j++) out.set(full.subarray(j * outFull, j * outFull + outF), j * outF);
      return out;
    };
    const adam = new Adam(params);
    const draws: Record<string, number> = Object.fromEntries(levels.map((lv) => [lv.id, 0]));
    const termsFor = (li: number, ps: tf.Tensor[]) =>
      new Map<string, LowRankTerm>(shapesOf[li].map((t, i) => [t.weight, { at: ps[2 * i] as tf.Tensor2D, bt: ps[2 * i + 1] as tf.Tensor2D, scale }]));
    const tensorsFor = (li: number) =>
      shapesOf[li].flatMap((t, i) => [tf.tensor2d(sliceAt(params[2 * i], t.inFeatures).slice(), [t.inFeatures, r]), tf.tensor2d(sliceBt(params[2 * i + 1], targets[i].outFeatures, t.outFeatures), [r, t.outFeatures])]);
    for (let step = 0; step < steps; step++) {
      const li = Math.floor(rng.next() * levels.length);
      draws[levels[li].id]++;
      const bi = step % train.length;
      const { probs, owned } = teacher.probs(bi);
      const tensors = tensorsFor(li);
      const { value, grads } = tf.tidy(() => tf.valueAndGrads((...ps: tf.Tensor[]) => distillLoss(students[li], train[bi], { lowRank: termsFor(li, ps) }, probs, s.ce))(tensors));
      const g = await Promise.all(grads.map(async (t) => (await t.data()) as Float32Array));
      tf.dispose([value, ...grads, ...tensors]);
      if (!owned) probs.dispose();
      // Scatter the level's gradients into full-shape ones (zero outside its prefix).
      const fullGrads = targets.flatMap((t, i) => {
        const lt = shapesOf[li][i];
        const ga = new Float32Array(t.inFeatures * r);
        ga.set(g[2 * i]);
        const gb = new Float32Array(r * t.outFeatures);
        for (let j = 0; j < r; j++) gb.set(g[2 * i + 1].subarray(j * lt.outFeatures, (j + 1) * lt.outFeatures), j * t.outFeatures);
        return [ga, gb];
      });
      adam.step(fullGrads, lrAt(step, steps, s.lr));
    }
    const out = new Map<string, { before: Quality; after: Quality }>();
    for (let li = 0; li < levels.length; li++) {
      const before = await measure(students[li], heldOut, ref, {});
      const tensors = tensorsFor(li);
      const after = await measure(students[li], heldOut, ref, { lowRank: termsFor(li, tensors) });
      tf.dispose(tensors);
      out.set(levels[li].id, { before, after });
    }
    return { full, levels: out, draws };
  } finally {
    teacher.dispose();
    for (const m of students) m.dispose();
    teacherModel.dispose();
  }
}
