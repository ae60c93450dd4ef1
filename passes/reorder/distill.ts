/**
 * Joint elastic distillation (`reorder.recover=distill`; MatFormer / Flextron / Minitron style): the
 * SHARED weights of the reordered model are trained for every level at once, so each level stays a
 * prefix slice of one weight set (no adapters; every target loads every level as it loads the model).
 *   loss per step = Σ over sampled levels of KL(p_teacher ‖ p_level) (+ ce · next-token CE)
 * The teacher is the original full model (frozen). Each step samples levels by the sandwich rule
 * (the full level, re-distilled so it stays the teacher's function; the smallest; and random others),
 * a level being the full model with the units past its prefix masked (SPEC §4.2: the same function as
 * the sliced sub-model). Trained: every decoder layer's linears and RMSNorm weights; embeddings and
 * the head stay (tied tables serve the full level unchanged). Adam, cosine decay; the checkpoint with
 * the lowest validation loss (mean over the levels) is kept, the start included.
 * Runs on the tfjs lowering of the IR (whole model as f32): for models the in-process trainer takes.
 */
import { createHash } from 'node:crypto';
import { transformSource, type ModelSource } from '../../src/core/checkpoint/source.js';
import type { LevelLayer } from '../../src/core/records/elastic.js';
import { Rng } from '../../src/core/util/rng.js';
import { silentProgress, type Progress } from '../../src/core/util/progress.js';
import { letEventLoopTurn } from '../../src/core/util/interrupt.js';
import { primitiveOps } from '../../src/core/ir/expand.js';
import { TfModel, type RunOptions } from '../../src/exec/autodiff/lower.js';
import { tf } from '../../src/exec/autodiff/tf.js';
import { Adam, distillLoss, lrAt, Teacher, trainingBatches } from './recover.js';
import { levelMasks } from './masks.js';

export interface DistillSettings {
  /** Optimizer steps (each sees `batch` sequences at `levelsPerStep` levels). */
  steps: number;
  lr: number;
  batch: number;
  seed: number;
  /** Levels in each step's loss (sandwich: full, smallest, then random others). */
  levelsPerStep: number;
  /** Weight of the next-token cross-entropy beside the KL to the teacher. */
  ce: number;
  /** Weight of the full level's term (the others weigh 1): holds the full model near the teacher. */
  fullWeight: number;
}

export interface DistillResult {
  /** The reordered model with the trained weights (a view over `model`; untrained tensors pass through). */
  source: ModelSource;
  /** Trained tensors in the checkpoint's layout ([out, in] for linears). */
  trained: Map<string, Float32Array>;
  /** Mean validation loss over the levels (soft CE to the teacher) at each checkpoint; step 0 = untrained. */
  validation: { step: number; loss: number }[];
  bestStep: number;
  /** Training tokens seen (steps × batch × length). */
  tokens: number;
}

/** The weights distillation trains: decoder layers' linears (transposed, as tfjs differentiates them) and norms. */
function trainedNames(model: TfModel): { name: string; linear: boolean }[] {
  const linears = new Set<string>();
  for (const op of primitiveOps(model.graph)) if (op.op === 'linear') linears.add(op.weight);
  return model
    .weightNames()
    .filter((n) => n.startsWith('model.layers.'))
    .sort()
    .map((name) => ({ name, linear: linears.has(name) }));
}

/**
 * Train the shared weights of `model` (the reordered model; every level is a prefix slice of it)
 * for all `levels` jointly on `seqs` (never held-out text). Deterministic for the seed.
 */
export async function distillLevels(
  model: ModelSource,
  levels: readonly { id: string; layers: readonly LevelLayer[] }[],
  seqs: number[][],
  s: DistillSettings,
  progress: Progress = silentProgress,
): Promise<DistillResult> {
  const teacherModel = await TfModel.load(model);
  const student = await TfModel.load(model);
  const spec = model.spec;
  const { train, validation: val } = trainingBatches(seqs, s.batch, s.seed);
  const teacher = Teacher.create(teacherModel, [...train, ...val]);
  try {
    // Levels as masks over the reordered model (identity orders: a level keeps each layer's prefix).
    // One entry per distinct level (the full one once, however the caller lists it).
    const distinct = levels.filter((lv, i) => !isFull(spec, lv.layers) || levels.findIndex((x) => isFull(spec, x.layers)) === i);
    const byWidth = [...distinct].sort((a, b) => width(a.layers) - width(b.layers));
    const masks: RunOptions[] = byWidth.map((lv) => (isFull(spec, lv.layers) ? {} : levelMasks(spec, [], [...lv.layers])));
    const fullIdx = byWidth.findIndex((lv) => isFull(spec, lv.layers));
    const names = trainedNames(student);
    const params: Float32Array[] = [];
    const shapes: number[][] = [];
    for (const { name, linear } of names) {
      const w = await student.weight(linear ? `${name}#T` : name);
      params.push(w.slice());
      const meta = model.meta(name)!;
      shapes.push(linear ? [meta.shape[1], meta.shape[0]] : [...meta.shape]);
    }
    const overrideOf = (ps: tf.Tensor[]) => new Map<string, tf.Tensor>(names.map((n, i) => [n.linear ? `${n.name}#T` : n.name, ps[i]]));
    const rng = new Rng(s.seed);
    const pick = (): number[] => {
      const n = Math.min(s.levelsPerStep, byWidth.length);
      const chosen = new Set<number>();
      if (fullIdx >= 0) chosen.add(fullIdx);
      if (chosen.size < n) chosen.add(0);
      const rest = byWidth.map((_, i) => i).filter((i) => !chosen.has(i));
      while (chosen.size < n && rest.length) chosen.add(rest.splice(rng.int(rest.length), 1)[0]);
      return [...chosen].sort((a, b) => a - b);
    };
    const validationLoss = async (): Promise<number> => {
      if (!val.length) return 0;
      let sum = 0;
      for (let v = 0; v < val.length; v++) {
        const { probs, owned } = teacher.probs(train.length + v);
        for (const m of masks) {
          const l = tf.tidy(() => distillLoss(student, val[v], m, probs, 0));
          sum += (await l.data())[0];
          l.dispose();
        }
        if (!owned) probs.dispose();
      }
      return sum / (val.length * masks.length);
    };
    const validation: { step: number; loss: number }[] = [];
    let best = { step: 0, loss: await validationLoss(), params: null as Float32Array[] | null };
    validation.push({ step: 0, loss: best.loss });
    const every = Math.max(1, Math.round(s.steps / 8));
    const adam = new Adam(params);
    progress.start('reorder: joint elastic distillation', s.steps);
    for (let step = 0; step < s.steps; step++) {
      const bi = step % train.length;
      const { probs, owned } = teacher.probs(bi);
      const chosen = pick();
      const tensors = params.map((p, i) => tf.tensor(p, shapes[i], 'float32'));
      const { value, grads } = tf.tidy(() =>
        tf.valueAndGrads((...ps: tf.Tensor[]) => {
          const over = overrideOf(ps);
          const terms = chosen.map((li) => tf.mul(distillLoss(student, train[bi], masks[li], probs, s.ce, over), li === fullIdx ? s.fullWeight : 1));
          return terms.reduce((a, b) => tf.add(a, b)) as tf.Scalar;
        })(tensors),
      );
      const g = await Promise.all(grads.map(async (t) => (await t.data()) as Float32Array));
      tf.dispose([value, ...grads, ...tensors]);
      if (!owned) probs.dispose();
      adam.step(g, lrAt(step, s.steps, s.lr));
      names.forEach((n, i) => student.setWeight(n.name, params[i], n.linear));
      progress.tick();
      if (val.length && ((step + 1) % every === 0 || step + 1 === s.steps)) {
        const loss = await validationLoss();
        validation.push({ step: step + 1, loss });
        if (loss < best.loss) best = { step: step + 1, loss, params: params.map((p) => p.slice()) };
      }
      await letEventLoopTurn();
    }
    progress.done();
    const kept = val.length ? best.params : params;
    const trained = new Map<string, Float32Array>();
    if (kept) names.forEach((n, i) => trained.set(n.name, n.linear ? transpose(kept[i], shapes[i][0], shapes[i][1]) : kept[i]));
    const h = createHash('sha256');
    for (const [k, v] of trained) h.update(k).update(Buffer.from(v.buffer, v.byteOffset, v.byteLength));
    const source = transformSource(model, {
      label: 'distilled',
      paramsHash: h.digest('hex'),
      rewrite: (name, data) => trained.get(name)?.slice() ?? data,
      untouched: (name) => !trained.has(name),
    });
    return { source, trained, validation, bestStep: val.length ? best.step : s.steps, tokens: s.steps * s.batch * (seqs[0]?.length ?? 0) };
  } finally {
    teacher.dispose();
    student.dispose();
    teacherModel.dispose();
  }
}

const width = (layers: readonly LevelLayer[]) => layers.reduce((n, l) => n + l.params, 0);

function isFull(spec: ModelSource['spec'], layers: readonly LevelLayer[]): boolean {
  const R = spec.numHeads / spec.numKvHeads;
  const ffn = spec.moe ? spec.moe.expertIntermediateSize : spec.intermediateSize;
  return layers.every((l) => l.kvGroups === spec.numKvHeads && l.qHeadsPerGroup === R && l.ffn === ffn);
}

/** [rows, cols] row-major → [cols, rows]. */
function transpose(x: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(x.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = x[r * cols + c];
  return out;
}
