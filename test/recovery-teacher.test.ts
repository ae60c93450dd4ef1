/**
 * The compact teacher (reorder.recoverTeacherTopK): each position's top k tokens and the tail mass
 * instead of the full distributions. Checked against float64 brute force: the kept support is the k
 * largest probabilities, the tail the rest's mass, the loss and its gradient the soft cross-entropy on
 * the support plus the tail against the student's mass off it; with the teacher's mass inside the
 * support the loss and gradient are the dense ones.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { compactOf, softTargetLoss, Teacher } from '../passes/reorder/recover.js';
import { parseReorderOptions } from '../passes/reorder/options.js';
import type { TfModel } from '../src/exec/autodiff/lower.js';
import { initTf, tf } from '../src/exec/autodiff/tf.js';
import { Rng } from '../src/core/util/rng.js';

beforeAll(async () => {
  await initTf();
});

const B = 2;
const T = 5;
const V = 40;
const N = B * T;
const ids = Array.from({ length: B }, (_, b) => Array.from({ length: T }, (_, t) => (b * 7 + t * 3) % V));

function randomLogits(seed: number, scale = 3): Float32Array {
  const rng = new Rng(seed);
  return Float32Array.from({ length: N * V }, () => (rng.next() * 2 - 1) * scale);
}

/** Row-wise softmax in float64. */
function softmax64(z: ArrayLike<number>): Float64Array {
  const out = new Float64Array(z.length);
  for (let r = 0; r < N; r++) {
    let m = -Infinity;
    for (let v = 0; v < V; v++) m = Math.max(m, z[r * V + v]);
    let s = 0;
    for (let v = 0; v < V; v++) s += Math.exp(z[r * V + v] - m);
    for (let v = 0; v < V; v++) out[r * V + v] = Math.exp(z[r * V + v] - m) / s;
  }
  return out;
}

/** Brute force: per row, the k largest by sorting, and the float64 sum of the others. */
function topkBrute(p: ArrayLike<number>, k: number): { support: Set<number>[]; tail: number[] } {
  const support: Set<number>[] = [];
  const tail: number[] = [];
  for (let r = 0; r < N; r++) {
    const order = Array.from({ length: V }, (_, v) => v).sort((a, b) => p[r * V + b] - p[r * V + a]);
    support.push(new Set(order.slice(0, k)));
    tail.push(order.slice(k).reduce((s, v) => s + p[r * V + v], 0));
  }
  return { support, tail };
}

/** Predicting rows (not the last of each sequence) weigh 1/(B·(T−1)), as softTargetLoss does. */
const rowWeight = (r: number) => (r % T === T - 1 ? 0 : 1 / (B * (T - 1)));

/** The compact loss and its gradient wrt the student's logits, in float64. */
function compactLoss64(z: Float32Array, p: ArrayLike<number>, support: Set<number>[], tail: number[]): { loss: number; grad: Float64Array } {
  const q = softmax64(z);
  const grad = new Float64Array(N * V);
  let loss = 0;
  for (let r = 0; r < N; r++) {
    const w = rowWeight(r);
    let off = 0;
    for (let v = 0; v < V; v++) if (!support[r].has(v)) off += q[r * V + v];
    for (const v of support[r]) loss -= w * p[r * V + v] * Math.log(q[r * V + v]);
    if (tail[r] > 0) loss -= w * tail[r] * Math.log(off);
    // d/dz_v: q_v · (mass of the targets) − target share of v; targets sum to 1.
    for (let v = 0; v < V; v++) {
      const t = support[r].has(v) ? p[r * V + v] : off > 0 ? (tail[r] * q[r * V + v]) / off : 0;
      grad[r * V + v] = w * (q[r * V + v] - t);
    }
  }
  return { loss, grad };
}

function lossAndGrad(z: Float32Array, probs: tf.Tensor2D, tail?: tf.Tensor2D): { loss: number; grad: Float32Array } {
  const x = tf.tensor2d(z, [N, V]);
  const { value, grad } = tf.valueAndGrad((l: tf.Tensor) => softTargetLoss(l as tf.Tensor2D, ids, probs, 0, tail))(x);
  const out = { loss: value.dataSync()[0], grad: grad.dataSync() as Float32Array };
  tf.dispose([x, value, grad]);
  return out;
}

const maxAbs = (a: ArrayLike<number>, b: ArrayLike<number>) => Array.from(a).reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);

describe('compact teacher', () => {
  it('keeps the k most likely tokens and the rest\'s mass (brute force)', () => {
    const p = softmax64(randomLogits(1));
    const c = compactOf(tf.tensor2d(Float32Array.from(p), [N, V]), 6);
    const brute = topkBrute(Float32Array.from(p), 6);
    for (let r = 0; r < N; r++) {
      expect(new Set(c.ids.subarray(r * 6, r * 6 + 6))).toEqual(brute.support[r]);
      for (let j = 0; j < 6; j++) expect(c.probs[r * 6 + j]).toBeCloseTo(p[r * V + c.ids[r * 6 + j]], 7);
      expect(c.tail[r]).toBeCloseTo(brute.tail[r], 6);
    }
  });

  it('loss and gradient = the float64 support + tail cross-entropy', () => {
    const p = softmax64(randomLogits(2));
    const k = 5;
    const c = compactOf(tf.tensor2d(Float32Array.from(p), [N, V]), k);
    const dense = new Float32Array(N * V);
    for (let r = 0; r < N; r++) for (let j = 0; j < k; j++) dense[r * V + c.ids[r * k + j]] = c.probs[r * k + j];
    const probs = tf.tensor2d(dense, [N, V]);
    const tail = tf.tensor2d(c.tail, [N, 1]);
    const z = randomLogits(3, 2);
    const got = lossAndGrad(z, probs, tail);
    const brute = topkBrute(Float32Array.from(p), k);
    const want = compactLoss64(z, p, brute.support, brute.tail);
    expect(Math.abs(got.loss - want.loss) / want.loss).toBeLessThan(1e-5);
    expect(maxAbs(got.grad, want.grad)).toBeLessThan(1e-6);
    tf.dispose([probs, tail]);
  });

  it('with the teacher\'s mass inside the support: the dense loss and gradient', () => {
    // A teacher with at most 4 tokens of mass per position (the others exactly 0): top 4 covers it.
    const rng = new Rng(4);
    const p = new Float32Array(N * V);
    for (let r = 0; r < N; r++) {
      const w = [1, 2, 3, 4].map(() => 0.1 + rng.next());
      const s = w.reduce((a, b) => a + b, 0);
      w.forEach((x, j) => (p[r * V + ((r * 5 + j * 9) % V)] = x / s));
    }
    const c = compactOf(tf.tensor2d(p, [N, V]), 4);
    expect(Math.max(...c.tail)).toBe(0);
    const z = randomLogits(5);
    const full = tf.tensor2d(p, [N, V]);
    const tail = tf.tensor2d(c.tail, [N, 1]);
    const a = lossAndGrad(z, full);
    const b = lossAndGrad(z, full, tail);
    expect(Math.abs(a.loss - b.loss)).toBeLessThan(1e-6 * Math.abs(a.loss));
    expect(maxAbs(a.grad, b.grad)).toBeLessThan(1e-7);
    tf.dispose([full, tail]);
  });

  it('runs the full model once per batch when kept; k ≥ V is the dense teacher', () => {
    let calls = 0;
    const logits = randomLogits(6);
    const model = { source: { spec: { vocabSize: V } }, logits: () => (calls++, tf.tensor2d(logits, [N, V])) } as unknown as TfModel;
    const teacher = Teacher.create(model, [ids], 1 << 20, 3);
    expect(teacher.topK).toBe(3);
    for (let i = 0; i < 3; i++) {
      const { probs, owned, tail } = teacher.probs(0);
      expect(owned).toBe(false);
      const d = probs.dataSync();
      for (let r = 0; r < N; r++) expect(Array.from(d.subarray(r * V, r * V + V)).filter((x) => x > 0).length).toBe(3);
      tf.dispose([probs, tail!]);
    }
    expect(calls).toBe(1);
    expect(Teacher.create(model, [ids], 1 << 20, V).topK).toBe(0);
    teacher.dispose();
  });

  it('reorder.recoverTeacherTopK: lora only, an integer, absent from the settings unless asked', () => {
    expect(parseReorderOptions({ recoverTeacherTopK: '64' }).recover?.teacherTopK).toBe(64);
    expect(parseReorderOptions({}).recover).not.toHaveProperty('teacherTopK');
    expect(parseReorderOptions({ recoverTeacherTopK: '0' }).recover).not.toHaveProperty('teacherTopK');
    expect(() => parseReorderOptions({ recover: 'distill', recoverTeacherTopK: '64' })).toThrow(/recover=lora only/);
    expect(() => parseReorderOptions({ recoverTeacherTopK: 'x' })).toThrow(/integer/);
  });
});
