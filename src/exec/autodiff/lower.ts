/**
 * The tfjs lowering of the model IR (src/core/ir): the same op list the ONNX engine and the TS
 * runtime run, interpreted with tfjs ops so gradients come from tfjs's autodiff.
 *
 * Used where gradients or masked/skipped units are needed (Taylor importance, masked perplexity,
 * recovery training of elastic levels: linears take low-rank terms, `RunOptions.lowRank`).
 * It holds the whole model in memory as f32, so it is meant for models that fit (tiny to small).
 * Head/neuron counts are taken from the weights' shapes, not from the spec, so physically sliced
 * models (per-layer widths) run too. No KV cache: every call processes whole sequences.
 */
import type { ModelSource } from '../../core/checkpoint/source.js';
import { LlmcError } from '../../core/errors.js';
import { buildModel, IO } from '../../core/ir/build.js';
import { primitiveOps } from '../../core/ir/expand.js';
import type { ModelGraph, Op } from '../../core/ir/ir.js';
import { causalWindow } from '../../core/ir/mask.js';
import { localRopeSpec, ropeTables } from '../../core/ir/rope.js';
import { initTf, tf } from './tf.js';

type T = tf.Tensor;

export interface RunOptions {
  /** Per-layer multiplicative mask over attention heads (length = that layer's heads), applied before o_proj. */
  headMask?: (Float32Array | null | undefined)[];
  /** Per-MLP mask over intermediate neurons, keyed by MLP prefix (`model.layers.<l>.mlp`, `...experts.<e>`). */
  neuronMask?: Map<string, Float32Array>;
  /**
   * Low-rank terms added to linears, keyed by weight name: y = x·Wᵀ + scale·(x·at)·bt, with
   * at = Aᵀ [in, r] and bt = Bᵀ [r, out] (LoRA). Gradients flow to at/bt through tfjs's autodiff.
   */
  lowRank?: ReadonlyMap<string, LowRankTerm>;
  /**
   * Observes every linear: its input [rows, in] and its output before low-rank terms and bias
   * [rows, out] (valid until the enclosing tidy ends). Recovery fits adapters from these.
   */
  observeLinear?: (weight: string, x: tf.Tensor2D, y: tf.Tensor2D) => void;
}

/** One low-rank term (LoRA's A and B, transposed: the wasm backend's fast matMuls are untransposed). */
export interface LowRankTerm {
  at: tf.Tensor2D;
  bt: tf.Tensor2D;
  scale: number;
}

export class TfModel {
  /** The graph's ops with the moe op expanded (tfjs runs every expert on every token). */
  private readonly ops: Op[];
  /** rope's rotate-half as a matrix (one head), made once: every rope op of every forward uses it. */
  private readonly rotate: tf.Tensor2D;

  private constructor(
    readonly source: ModelSource,
    readonly graph: ModelGraph,
    private weights: Map<string, T>,
    readonly backend: string,
  ) {
    this.ops = primitiveOps(graph);
    this.rotate = rotateHalf(source.spec.headDim);
  }

  /**
   * `graph`: a piece of the model's graph (src/exec/stream's segments: one decoder layer) to hold
   * only its weights; `forward` runs it. Default: the whole model.
   */
  static async load(source: ModelSource, note?: (m: string) => void, graph: ModelGraph = buildModel(source.spec)): Promise<TfModel> {
    const init = await initTf();
    if (init.note) note?.(init.note);
    // Linear weights are held transposed ([in, out], under `name#T`): the wasm backend's matMul is
    // ~10× slower with transposeB. The embedding table is also kept as is for the lookup.
    const plain = new Set<string>();
    const transposed = new Set<string>();
    for (const op of primitiveOps(graph)) {
      if (op.op === 'embed') plain.add(op.table);
      if (op.op === 'rmsnorm') plain.add(op.weight);
      if (op.op === 'linear') {
        transposed.add(op.weight);
        if (op.bias) plain.add(op.bias);
      }
    }
    const weights = new Map<string, T>();
    for (const name of new Set([...plain, ...transposed])) {
      const meta = source.meta(name);
      if (!meta) throw new LlmcError(`missing tensor "${name}"`, source.description);
      const t = tf.tensor(await source.readF32(name), meta.shape, 'float32');
      if (transposed.has(name)) weights.set(`${name}#T`, tf.transpose(t));
      weights.set(name, t);
    }
    return new TfModel(source, graph, weights, init.backend);
  }

  /** A weight's current values as stored (linears [out, in]); training reads and replaces them. */
  async weight(name: string): Promise<Float32Array> {
    const t = this.weights.get(name);
    if (!t) throw new LlmcError(`tfjs lowering: no weight "${name}"`);
    return (await t.data()) as Float32Array;
  }

  /**
   * Replace a weight (joint elastic distillation trains the shared weights): `data` in the stored
   * layout, or for a linear `transposed` ([in, out], the layout gradients come in); both copies of a
   * linear follow, so the backward's dx = dy·W uses the new values.
   */
  setWeight(name: string, data: Float32Array, transposed = false): void {
    const old = this.weights.get(name);
    const oldT = this.weights.get(`${name}#T`);
    if (!old || (transposed && !oldT)) throw new LlmcError(`tfjs lowering: no ${transposed ? 'linear ' : ''}weight "${name}"`);
    if (transposed) {
      const tT = tf.tensor(data, oldT!.shape, 'float32');
      this.weights.set(name, tf.transpose(tT));
      this.weights.set(`${name}#T`, tT);
    } else {
      const t = tf.tensor(data, old.shape, 'float32');
      this.weights.set(name, t);
      if (oldT) this.weights.set(`${name}#T`, tf.transpose(t));
    }
    old.dispose();
    oldT?.dispose();
  }

  /** Names of the weights the tfjs model holds (linears also under `name#T`). */
  weightNames(): string[] {
    return [...this.weights.keys()].filter((n) => !n.endsWith('#T'));
  }

  dispose(): void {
    for (const t of this.weights.values()) t.dispose();
    this.weights.clear();
    this.rotate.dispose();
  }

  /** Logits [B·T, V] for every position of equal-length sequences (call inside tf.tidy). */
  logits(ids: number[][], opts: RunOptions = {}, override?: Map<string, T>): tf.Tensor2D {
    const B = ids.length;
    const Tn = ids[0].length;
    if (ids.some((s) => s.length !== Tn)) throw new LlmcError('sequences in one batch must have equal length');
    const logits = this.forward(new Map([[IO.ids, tf.tensor2d(ids.flat(), [B, Tn], 'int32')]]), B, Tn, [IO.logits], opts, override)[0];
    return tf.reshape(logits, [B * Tn, logits.shape[2]!]) as tf.Tensor2D;
  }

  /**
   * The graph's ops over `feeds` (its inputs other than the rope tables and logit positions, which
   * are made here: the ids, or a piece's carried hidden states [B, Tn, C]); the values `outputs`
   * name. Call inside tf.tidy / grads.
   */
  forward(feeds: ReadonlyMap<string, T>, B: number, Tn: number, outputs: readonly string[], opts: RunOptions = {}, override?: Map<string, T>): T[] {
    const spec = this.source.spec;
    const W = (name: string): T => override?.get(name) ?? this.weights.get(name)!;
    const hd = spec.headDim;
    const { cos, sin } = ropeTables(spec, 0, Tn);
    const env = new Map<string, T>(feeds);
    // Full-head tables (each half's angle repeated) for the rotate-half-as-matmul lowering of rope.
    const full = (t: Float32Array) => Float32Array.from({ length: Tn * hd }, (_, k) => t[Math.floor(k / hd) * (hd / 2) + (k % (hd / 2))]);
    env.set(IO.cos, tf.tensor2d(full(cos), [Tn, hd]));
    env.set(IO.sin, tf.tensor2d(full(sin), [Tn, hd]));
    const local = localRopeSpec(spec);
    if (local) {
      const t = ropeTables(local, 0, Tn);
      env.set(IO.cosLocal, tf.tensor2d(full(t.cos), [Tn, hd]));
      env.set(IO.sinLocal, tf.tensor2d(full(t.sin), [Tn, hd]));
    }
    env.set(IO.logitPositions, tf.range(0, Tn, 1, 'int32'));
    const headTaps = new Map<string, number>(this.graph.taps.filter((t) => t.kind === 'head-output').map((t) => [t.value, t.layer]));
    const mlpTaps = new Map<string, string>(this.graph.taps.filter((t) => t.kind === 'mlp-act').map((t) => [t.value, t.key]));
    const get = (v: string): T => {
      const t = env.get(v);
      if (!t) throw new LlmcError(`tfjs lowering: value "${v}" used before it is defined`);
      return t;
    };
    const trainable = (name: string) => override?.has(`${name}#T`) ?? false;
    for (const op of this.ops) {
      this.run(op, env, get, W, B, Tn, trainable, opts);
      const out = 'out' in op ? op.out : undefined;
      if (out && headTaps.has(out)) {
        const l = headTaps.get(out)!;
        const x = get(out);
        const H = x.shape[2]! / hd;
        const m = opts.headMask?.[l];
        if (m) {
          const mask = tf.tensor(Float32Array.from({ length: H * hd }, (_, c) => m[Math.floor(c / hd)]), [1, 1, H * hd]);
          env.set(out, tf.mul(x, mask));
        }
      } else if (out && mlpTaps.has(out)) {
        const key = mlpTaps.get(out)!;
        const m = opts.neuronMask?.get(key);
        if (m) env.set(out, tf.mul(get(out), tf.tensor(m, [1, 1, m.length])));
      }
    }
    return outputs.map(get);
  }

  /** Mean next-token cross-entropy over all positions of the batch (call inside tf.tidy / grads). */
  loss(ids: number[][], opts: RunOptions = {}, override?: Map<string, T>): tf.Scalar {
    const B = ids.length;
    const Tn = ids[0].length;
    const logits = tf.reshape(this.logits(ids, opts, override), [B, Tn, -1]);
    const V = logits.shape[2]!;
    const pred = tf.reshape(tf.slice(logits, [0, 0, 0], [B, Tn - 1, V]), [B * (Tn - 1), V]);
    const targets = tf.tensor1d(ids.flatMap((s) => s.slice(1)), 'int32');
    const logp = tf.logSoftmax(pred);
    return tf.neg(tf.mean(tf.sum(tf.mul(logp, tf.oneHot(targets, V)), 1))) as tf.Scalar;
  }

  /** Mean next-token loss over many sequences (evaluated in batches of `batch`). */
  async meanLoss(seqs: number[][], opts: RunOptions = {}, batch = 16): Promise<number> {
    let total = 0;
    let count = 0;
    for (let i = 0; i < seqs.length; i += batch) {
      const part = seqs.slice(i, i + batch);
      const l = tf.tidy(() => this.loss(part, opts));
      const v = (await l.data())[0];
      l.dispose();
      const n = part.length * (part[0].length - 1);
      total += v * n;
      count += n;
    }
    return total / count;
  }

  /** Gradients of the mean loss over the whole batch (one backward, as ELMS) for the named weights. */
  async gradients(seqs: number[][], names: string[]): Promise<{ loss: number; grads: Map<string, Float32Array> }> {
    // Gradients are taken w.r.t. the transposed linear weights and transposed back to [out, in].
    const xs = names.map((n) => W(this.weights, `${n}#T`));
    const res = tf.tidy(() => {
      const f = (...ws: T[]) => this.loss(seqs, {}, new Map(names.map((n, i) => [`${n}#T`, ws[i]])));
      const vg = tf.valueAndGrads(f)(xs);
      return [vg.value, ...vg.grads.map((g) => tf.transpose(g))];
    });
    const loss = (await res[0].data())[0];
    const out = new Map<string, Float32Array>();
    for (let i = 0; i < names.length; i++) out.set(names[i], (await res[i + 1].data()) as Float32Array);
    for (const t of res) t.dispose();
    return { loss, grads: out };
  }

  /** Logits of the last position of one sequence, as a plain array. */
  async lastLogits(ids: number[]): Promise<Float32Array> {
    const t = tf.tidy(() => {
      const l = this.logits([ids]);
      return tf.slice(l, [ids.length - 1, 0], [1, l.shape[1]]);
    });
    const d = (await t.data()) as Float32Array;
    t.dispose();
    return d;
  }

  /** All logits [T·V] of one sequence. */
  async allLogits(ids: number[], opts: RunOptions = {}): Promise<Float32Array> {
    const t = tf.tidy(() => this.logits([ids], opts));
    const d = (await t.data()) as Float32Array;
    t.dispose();
    return d;
  }

  /** Additive causal (and sliding-window) mask over [R·Tn query rows, Tn keys]: 0 visible, -1e30 not. */
  private causalBias(Tn: number, R: number, window: number | null): T {
    const bias = new Float32Array(R * Tn * Tn);
    for (let r = 0; r < R; r++) {
      for (let i = 0; i < Tn; i++) {
        for (let j = 0; j < Tn; j++) {
          const visible = j <= i && (window === null || i - j < window);
          bias[(r * Tn + i) * Tn + j] = visible ? 0 : -1e30;
        }
      }
    }
    return tf.tensor(bias, [1, 1, R * Tn, Tn]);
  }

  private run(
    op: Op,
    env: Map<string, T>,
    get: (v: string) => T,
    W: (n: string) => T,
    B: number,
    Tn: number,
    trainable: (weight: string) => boolean,
    { lowRank, observeLinear }: RunOptions,
  ): void {
    const hd = this.source.spec.headDim;
    switch (op.op) {
      case 'embed':
        env.set(op.out, tf.gather(W(op.table), get(op.ids)));
        return;
      case 'rmsnorm': {
        // Per-head norms (heads): normalized over each head's dim channels.
        const x0 = get(op.x);
        // The heads from the value (a level's sliced projection keeps fewer).
        const x = op.heads ? tf.reshape(x0, [...x0.shape.slice(0, -1), x0.shape[x0.shape.length - 1]! / op.dim, op.dim]) : x0;
        const ms = tf.mean(tf.square(x), -1, true);
        const w = op.offset ? tf.add(W(op.weight), 1) : W(op.weight);
        const y = tf.mul(tf.mul(x, tf.rsqrt(tf.add(ms, op.eps))), w);
        env.set(op.out, op.heads ? tf.reshape(y, x0.shape) : y);
        return;
      }
      case 'scale':
        env.set(op.out, tf.mul(get(op.x), op.by));
        return;
      case 'linear': {
        const x = get(op.x);
        const wT = W(`${op.weight}#T`);
        const w = this.weights.get(op.weight)!;
        const lead = x.shape.slice(0, -1);
        const inF = x.shape[x.shape.length - 1]!;
        // y = x·Wᵀ with every matMul untransposed (wasm's transposed matMuls are ~10× slower):
        // dx = dy·W (W kept as stored, [out, in]), d(Wᵀ) = transpose(x)·dy.
        const x2 = tf.reshape(x, [-1, inF]) as tf.Tensor2D;
        let y: T;
        if (trainable(op.weight)) {
          const lin = tf.customGrad((...args: (T | ((s: T[]) => void))[]) => {
            const [xi, wti, save] = args as [tf.Tensor2D, tf.Tensor2D, (s: T[]) => void];
            save([xi]);
            return {
              value: tf.matMul(xi, wti),
              gradFunc: (dy: T, saved: T[]) => [tf.matMul(dy as tf.Tensor2D, w as tf.Tensor2D), tf.matMul(tf.transpose(saved[0] as tf.Tensor2D), dy as tf.Tensor2D)],
            };
          });
          y = lin(x2, wT);
        } else {
          // A frozen weight: only dx (no wasted xᵀ·dy when just the adapters or masks are differentiated).
          const frozen = tf.customGrad((...args: (T | ((s: T[]) => void))[]) => {
            const xi = args[0] as tf.Tensor2D;
            return { value: tf.matMul(xi, wT as tf.Tensor2D), gradFunc: (dy: T) => [tf.matMul(dy as tf.Tensor2D, w as tf.Tensor2D)] };
          });
          y = frozen(x2);
        }
        observeLinear?.(op.weight, x2, y as tf.Tensor2D);
        const lr = lowRank?.get(op.weight);
        if (lr) y = tf.add(y, tf.mul(tf.matMul(tf.matMul(x2, lr.at), lr.bt), lr.scale));
        if (op.bias) y = tf.add(y, W(op.bias));
        env.set(op.out, tf.reshape(y, [...lead, wT.shape[1]!]));
        return;
      }
      case 'rope': {
        // Rotate-half as one small matmul (rot = x·P) instead of slices and a concat: fewer kernels,
        // and the backward is the transposed matmul. out = x·cos + rot·sin, cos/sin over the full head.
        const x = get(op.x);
        const n = x.shape[2]! / hd;
        const rot = tf.reshape(tf.matMul(tf.reshape(x, [-1, hd]) as tf.Tensor2D, this.rotate), [B, Tn, n, hd]);
        const c = tf.reshape(get(op.cos), [1, Tn, 1, hd]);
        const s = tf.reshape(get(op.sin), [1, Tn, 1, hd]);
        env.set(op.out, tf.reshape(tf.add(tf.mul(tf.reshape(x, [B, Tn, n, hd]), c), tf.mul(rot, s)), [B, Tn, n * hd]));
        return;
      }
      case 'attention': {
        const q = get(op.q);
        const H = q.shape[2]! / hd;
        const G = get(op.k).shape[2]! / hd;
        const R = H / G;
        // Grouped layout: the R query heads of KV group g are R·Tn rows against that group's keys, so
        // no KV head is repeated (tile is the slowest kernel here, and gather's gradient is missing on wasm).
        const qg = tf.reshape(tf.transpose(tf.reshape(q, [B, Tn, G, R, hd]), [0, 2, 3, 1, 4]), [B, G, R * Tn, hd]);
        const kT = tf.transpose(tf.reshape(get(op.k), [B, Tn, G, hd]), [0, 2, 3, 1]);
        const vh = tf.transpose(tf.reshape(get(op.v), [B, Tn, G, hd]), [0, 2, 1, 3]);
        // The mask depends on (R, window) only: built once per forward, kept in env for the other layers.
        const window = causalWindow(op.mask, 'the tfjs lowering');
        const maskKey = `#causal-bias:${R}:${window}`;
        if (!env.has(maskKey)) env.set(maskKey, this.causalBias(Tn, R, window));
        const scaled = tf.mul(tf.matMul(qg, kT), op.scale ?? 1 / Math.sqrt(hd));
        const capped = op.softcap === undefined ? scaled : softcap(scaled, op.softcap);
        const scores = tf.add(capped, get(maskKey));
        const out = tf.matMul(tf.softmax(scores), vh); // [B, G, R·Tn, hd]
        env.set(op.out, tf.reshape(tf.transpose(tf.reshape(out, [B, G, R, Tn, hd]), [0, 3, 1, 2, 4]), [B, Tn, H * hd]));
        return;
      }
      case 'silu': {
        const x = get(op.x);
        env.set(op.out, tf.mul(x, tf.sigmoid(x)));
        return;
      }
      case 'sigmoid':
        env.set(op.out, tf.sigmoid(get(op.x)));
        return;
      case 'gelu_tanh': {
        const x = get(op.x);
        const inner = tf.mul(tf.add(x, tf.mul(tf.pow(x, 3), 0.044715)), Math.sqrt(2 / Math.PI));
        env.set(op.out, tf.mul(tf.mul(x, 0.5), tf.add(tf.tanh(inner), 1)));
        return;
      }
      case 'softcap':
        env.set(op.out, softcap(get(op.x), op.cap));
        return;
      case 'mul':
        env.set(op.out, tf.mul(get(op.a), get(op.b)));
        return;
      case 'add':
        env.set(op.out, tf.add(get(op.a), get(op.b)));
        return;
      case 'router': {
        const logits = get(op.logits);
        // Top-k selection is a discrete choice: computed outside the tape (no gradient flows through it).
        const data = logits.dataSync();
        const E = op.numExperts;
        const sel = new Float32Array(data.length);
        for (let r = 0; r < data.length / E; r++) {
          const row = Array.from(data.subarray(r * E, (r + 1) * E));
          const order = row.map((v, i) => [v, i] as const).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
          for (let k = 0; k < op.topK; k++) sel[r * E + order[k][1]] = 1;
        }
        const mask = tf.tensor(sel, logits.shape);
        let w: T;
        if (op.mode === 'softmax-topk-renorm') {
          const e = tf.mul(tf.exp(tf.sub(logits, tf.max(logits, -1, true))), mask);
          w = tf.div(e, tf.sum(e, -1, true));
        } else {
          w = tf.mul(tf.softmax(logits), mask);
        }
        env.set(op.weights, w);
        env.set(op.mask, mask);
        return;
      }
      case 'column': {
        const x = get(op.x);
        env.set(op.out, tf.slice(x, [0, 0, op.index], [B, Tn, 1]));
        return;
      }
      case 'moe':
        throw new LlmcError('internal: tfjs runs the expanded moe op (primitiveOps)');
      case 'gatherPositions':
        // This lowering always asks for every position (see logits()): the gather is the identity.
        env.set(op.out, get(op.x));
        return;
    }
  }
}

/** cap · tanh(x / cap). */
function softcap(x: T, cap: number): T {
  return tf.mul(tf.tanh(tf.div(x, cap)), cap);
}

function W(weights: Map<string, T>, name: string): T {
  const t = weights.get(name);
  if (!t) throw new LlmcError(`tfjs lowering: no weight "${name}"`);
  return t;
}

/** P with x·P = rotate_half(x) = [-x2, x1] over one head of `hd` channels. */
function rotateHalf(hd: number): tf.Tensor2D {
  const half = hd / 2;
  const p = new Float32Array(hd * hd);
  for (let i = 0; i < half; i++) {
    p[(i + half) * hd + i] = -1;
    p[i * hd + i + half] = 1;
  }
  return tf.tensor2d(p, [hd, hd]);
}
