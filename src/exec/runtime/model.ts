/**
 * The transformer forward pass of the TS runtime: Llama / Mistral / Qwen2 (dense) and Mixtral /
 * Qwen2-MoE (routed experts + optional shared expert), GQA, q/k/v bias, RoPE (every scaling the
 * engine knows, via src/core/ir/rope.ts), tied embeddings, a KV cache, and elastic widths (prefixes of heads / FFN neurons).
 * Browser-safe: no Node imports.
 */
import type { ArchSpec } from '../../core/arch/spec.js';
import { isMoeLayer } from '../../core/arch/spec.js';
import { EMBED, FINAL_NORM, LM_HEAD, layerNames, moeNames } from '../../core/arch/names.js';
import { LlmcError } from '../../core/errors.js';
import { ropeTables } from '../../core/ir/rope.js';
import { Sampler, type SamplingOptions } from './sampling.js';
import { dequantRow, matmul, Weight } from './kernels.js';
import type { ArtifactManifest } from './load.js';

/** Width of one layer when running a sub-model made of prefixes of its units (elastic levels). */
export interface LayerWidth {
  /** KV groups kept (prefix of the KV heads; under MHA a group is one head). */
  kvGroups: number;
  /** Query heads kept in each kept group (prefix within the group); default all. */
  qHeadsPerGroup?: number;
  /**
   * Neurons kept (prefix); default all. Dense models: the MLP. MoE models: each routed expert (as the
   * reorder pass's levels say), while their dense layers (qwen2_moe mlp_only_layers) take `denseFfn`.
   */
  ffn?: number;
  /** MoE layers: neurons kept per routed expert, overriding `ffn`. */
  expertFfn?: number[];
  /** Dense layers of an MoE model: neurons kept; default all. */
  denseFfn?: number;
  /** qwen2_moe: neurons kept in the shared expert; default all. */
  sharedFfn?: number;
}

export interface ForwardOptions {
  /**
   * One entry per layer; omitted = the full model. The reorder pass's level layers
   * (manifest passes[].metadata) have this shape. A KV cache only holds the KV groups that were
   * computed: switching to wider attention mid-sequence needs a fresh cache (or a re-prefill).
   */
  widths?: LayerWidth[];
  /** Return only the last position's logits ([V] instead of [T, V]). */
  lastOnly?: boolean;
}

export interface GenerateOptions extends SamplingOptions {
  /** Tokens to generate (default 32). */
  maxTokens?: number;
  /** Stop after emitting one of these (default: the model's EOS ids; [] = never stop early). */
  stopTokens?: number[];
  widths?: LayerWidth[];
}

interface Mlp {
  gate: Weight;
  up: Weight;
  down: Weight;
  gateBias: Float32Array | null;
  upBias: Float32Array | null;
  downBias: Float32Array | null;
}

interface Layer {
  inputNorm: Float32Array;
  postNorm: Float32Array;
  q: Weight;
  k: Weight;
  v: Weight;
  o: Weight;
  qBias: Float32Array | null;
  kBias: Float32Array | null;
  vBias: Float32Array | null;
  oBias: Float32Array | null;
  mlp: Mlp | null;
  router: Weight | null;
  experts: Mlp[];
  shared: Mlp | null;
  sharedGate: Weight | null;
}

/** Per-layer keys and values of the positions seen so far. Make one with `model.newCache()`. */
export class KvCache {
  length = 0;
  capacity = 0;
  k: Float32Array[];
  v: Float32Array[];
  constructor(
    readonly numLayers: number,
    readonly kvDim: number,
  ) {
    this.k = Array.from({ length: numLayers }, () => new Float32Array(0));
    this.v = Array.from({ length: numLayers }, () => new Float32Array(0));
  }

  reserve(n: number): void {
    if (n <= this.capacity) return;
    const cap = Math.max(n, this.capacity * 2, 16);
    for (let l = 0; l < this.numLayers; l++) {
      const k = new Float32Array(cap * this.kvDim);
      const v = new Float32Array(cap * this.kvDim);
      k.set(this.k[l].subarray(0, this.length * this.kvDim));
      v.set(this.v[l].subarray(0, this.length * this.kvDim));
      this.k[l] = k;
      this.v[l] = v;
    }
    this.capacity = cap;
  }
}

/** Tensor lookup the model is built from (the loader provides it). */
export interface WeightTable {
  weight(name: string): Weight;
  vector(name: string): Float32Array;
  has(name: string): boolean;
}

export class Model {
  readonly layers: Layer[];
  readonly embed: Weight;
  readonly lmHead: Weight;
  readonly finalNorm: Float32Array;

  constructor(
    readonly spec: ArchSpec,
    table: WeightTable,
    /** The artifact's manifest when loaded from one (pass metadata such as elastic levels lives in it). */
    readonly manifest?: ArtifactManifest,
  ) {
    const s = spec;
    const opt = (n: string) => (table.has(n) ? table.vector(n) : null);
    const mlp = (n: { gate: string; up: string; down: string }): Mlp => ({
      gate: table.weight(n.gate),
      up: table.weight(n.up),
      down: table.weight(n.down),
      gateBias: s.mlpBias ? opt(n.gate.replace(/weight$/, 'bias')) : null,
      upBias: s.mlpBias ? opt(n.up.replace(/weight$/, 'bias')) : null,
      downBias: s.mlpBias ? opt(n.down.replace(/weight$/, 'bias')) : null,
    });
    this.layers = [];
    for (let l = 0; l < s.numLayers; l++) {
      const n = layerNames(l);
      const moe = isMoeLayer(s, l) ? moeNames(s, l) : null;
      this.layers.push({
        inputNorm: table.vector(n.inputNorm),
        postNorm: table.vector(n.postNorm),
        q: table.weight(n.q),
        k: table.weight(n.k),
        v: table.weight(n.v),
        o: table.weight(n.o),
        qBias: s.qkvBias ? table.vector(n.qBias) : null,
        kBias: s.qkvBias ? table.vector(n.kBias) : null,
        vBias: s.qkvBias ? table.vector(n.vBias) : null,
        oBias: s.oBias ? table.vector(n.oBias) : null,
        mlp: moe ? null : mlp(n.mlp),
        router: moe ? table.weight(moe.router) : null,
        experts: moe ? moe.experts.map(mlp) : [],
        shared: moe?.shared ? mlp(moe.shared) : null,
        sharedGate: moe?.sharedGate ? table.weight(moe.sharedGate) : null,
      });
    }
    this.embed = table.weight(EMBED);
    this.lmHead = s.tieEmbeddings ? this.embed : table.weight(LM_HEAD);
    this.finalNorm = table.vector(FINAL_NORM);
  }

  newCache(): KvCache {
    return new KvCache(this.spec.numLayers, this.spec.numKvHeads * this.spec.headDim);
  }

  /**
   * Logits for `ids` appended after what `cache` holds (a fresh cache when omitted): [T, V] row-major,
   * or [V] with `lastOnly`. The cache is extended by the T positions.
   */
  forward(ids: ArrayLike<number>, cache: KvCache = this.newCache(), opts: ForwardOptions = {}): Float32Array {
    const s = this.spec;
    const T = ids.length;
    if (T === 0) throw new LlmcError('forward: no input ids');
    const D = s.hiddenSize;
    const V = s.vocabSize;
    const hd = s.headDim;
    const nrep = s.numHeads / s.numKvHeads;
    const qDim = s.numHeads * hd;
    const kvDim = s.numKvHeads * hd;
    const pos0 = cache.length;
    const widths = opts.widths;
    if (widths) this.checkWidths(widths);
    for (let t = 0; t < T; t++) {
      const id = ids[t];
      if (!Number.isInteger(id) || id < 0 || id >= V) throw new LlmcError(`token id ${id} is outside the vocabulary (0..${V - 1})`);
    }
    cache.reserve(pos0 + T);

    const x = new Float32Array(T * D);
    for (let t = 0; t < T; t++) dequantRow(this.embed, ids[t], x, t * D);
    const xn = new Float32Array(T * D);
    const tmp = new Float32Array(T * D);
    const q = new Float32Array(T * qDim);
    const kv = new Float32Array(T * kvDim);
    const att = new Float32Array(T * qDim);
    const { cos, sin } = ropeTables(s, pos0, T); // the engine's own tables (src/core/ir/rope.ts): same scaling rules
    const scores = new Float32Array(pos0 + T);
    const scale = 1 / Math.sqrt(hd);
    const window = s.slidingWindow;

    for (let l = 0; l < s.numLayers; l++) {
      const L = this.layers[l];
      const w = widths?.[l];
      const G = w ? w.kvGroups : s.numKvHeads;
      const qpg = w?.qHeadsPerGroup ?? nrep;
      rmsNorm(x, L.inputNorm, xn, T, D, s.rmsNormEps);

      // q: heads [g*nrep, g*nrep+qpg) of each kept group g (one row range when all heads are kept).
      if (qpg === nrep) matmul(L.q, xn, T, D, q, qDim, { nRows: G * nrep * hd, bias: L.qBias });
      else {
        for (let g = 0; g < G; g++) {
          const r0 = g * nrep * hd;
          matmul(L.q, xn, T, D, q.subarray(r0), qDim, { rowStart: r0, nRows: qpg * hd, bias: L.qBias });
        }
      }
      const kc = cache.k[l];
      const vc = cache.v[l];
      matmul(L.k, xn, T, D, kv, kvDim, { nRows: G * hd, bias: L.kBias });
      for (let t = 0; t < T; t++) {
        for (let g = 0; g < G; g++) rope(kv, t * kvDim + g * hd, hd, cos, sin, t);
        kc.set(kv.subarray(t * kvDim, t * kvDim + G * hd), (pos0 + t) * kvDim);
      }
      matmul(L.v, xn, T, D, kv, kvDim, { nRows: G * hd, bias: L.vBias });
      for (let t = 0; t < T; t++) vc.set(kv.subarray(t * kvDim, t * kvDim + G * hd), (pos0 + t) * kvDim);

      // Causal attention over the cache (dropped heads stay zero, so o_proj's column prefix ignores them).
      if (qpg !== nrep) att.fill(0);
      for (let t = 0; t < T; t++) {
        const p = pos0 + t;
        const pStart = window ? Math.max(0, p - window + 1) : 0;
        for (let g = 0; g < G; g++) {
          for (let hh = 0; hh < qpg; hh++) {
            const h = g * nrep + hh;
            const qo = t * qDim + h * hd;
            rope(q, qo, hd, cos, sin, t);
            let max = -Infinity;
            for (let j = pStart; j <= p; j++) {
              const ko = j * kvDim + g * hd;
              let d = 0;
              for (let i = 0; i < hd; i++) d += q[qo + i] * kc[ko + i];
              d *= scale;
              scores[j] = d;
              if (d > max) max = d;
            }
            let sum = 0;
            for (let j = pStart; j <= p; j++) sum += scores[j] = Math.exp(scores[j] - max);
            const ao = t * qDim + h * hd;
            for (let i = 0; i < hd; i++) att[ao + i] = 0;
            for (let j = pStart; j <= p; j++) {
              const pj = scores[j] / sum;
              const vo = j * kvDim + g * hd;
              for (let i = 0; i < hd; i++) att[ao + i] += pj * vc[vo + i];
            }
          }
        }
      }
      matmul(L.o, att, T, qDim, tmp, D, { nCols: G * nrep * hd, bias: L.oBias });
      for (let i = 0; i < T * D; i++) x[i] += tmp[i];

      rmsNorm(x, L.postNorm, xn, T, D, s.rmsNormEps);
      if (L.mlp) {
        swiglu(L.mlp, xn, T, D, tmp, (s.moe ? w?.denseFfn : w?.ffn) ?? L.mlp.gate.rows);
      } else {
        this.moe(L, xn, T, tmp, w);
      }
      for (let i = 0; i < T * D; i++) x[i] += tmp[i];
    }
    cache.length = pos0 + T;

    const first = opts.lastOnly ? T - 1 : 0;
    const rows = T - first;
    rmsNorm(x.subarray(first * D), this.finalNorm, xn, rows, D, s.rmsNormEps);
    const logits = new Float32Array(rows * V);
    matmul(this.lmHead, xn, rows, D, logits, V);
    return logits;
  }

  /** Generate up to `maxTokens` tokens after `ids`, yielding each as it is chosen. */
  async *generate(ids: ArrayLike<number>, options: GenerateOptions = {}): AsyncGenerator<number, void, undefined> {
    const max = options.maxTokens ?? 32;
    const stop = new Set(options.stopTokens ?? this.spec.eosTokenIds);
    const sampler = new Sampler(options);
    const cache = this.newCache();
    const fopts = { widths: options.widths, lastOnly: true };
    let logits = this.forward(ids, cache, fopts);
    for (let n = 0; n < max; n++) {
      const next = sampler.next(logits);
      yield next;
      if (stop.has(next) || n + 1 === max) return;
      logits = this.forward([next], cache, fopts);
    }
  }

  private moe(L: Layer, xn: Float32Array, T: number, out: Float32Array, w: LayerWidth | undefined): void {
    const s = this.spec;
    const D = s.hiddenSize;
    const moe = s.moe!;
    const E = moe.numExperts;
    const logits = new Float32Array(E);
    const eo = new Float32Array(D);
    const order = Array.from({ length: E }, (_, i) => i);
    out.fill(0);
    for (let t = 0; t < T; t++) {
      const xt = xn.subarray(t * D, (t + 1) * D);
      const ot = out.subarray(t * D, (t + 1) * D);
      matmul(L.router!, xt, 1, D, logits, E);
      let max = -Infinity;
      for (let e = 0; e < E; e++) max = Math.max(max, logits[e]);
      let sum = 0;
      const p = new Float64Array(E);
      for (let e = 0; e < E; e++) sum += p[e] = Math.exp(logits[e] - max);
      for (let e = 0; e < E; e++) p[e] /= sum;
      // top-k by probability, lower index first on ties (as torch.topk on CPU)
      order.sort((a, b) => p[b] - p[a] || a - b);
      let norm = 1;
      if (moe.routing === 'softmax-topk-renorm') {
        norm = 0;
        for (let k = 0; k < moe.topK; k++) norm += p[order[k]];
      }
      for (let k = 0; k < moe.topK; k++) {
        const e = order[k];
        const ex = L.experts[e];
        swiglu(ex, xt, 1, D, eo, w?.expertFfn?.[e] ?? w?.ffn ?? ex.gate.rows);
        const g = p[e] / norm;
        for (let i = 0; i < D; i++) ot[i] += g * eo[i];
      }
      if (L.shared) {
        matmul(L.sharedGate!, xt, 1, D, logits, 1);
        const g = 1 / (1 + Math.exp(-logits[0]));
        swiglu(L.shared, xt, 1, D, eo, w?.sharedFfn ?? L.shared.gate.rows);
        for (let i = 0; i < D; i++) ot[i] += g * eo[i];
      }
    }
  }

  private checkWidths(widths: LayerWidth[]): void {
    const s = this.spec;
    const nrep = s.numHeads / s.numKvHeads;
    if (widths.length !== s.numLayers) throw new LlmcError(`widths: ${widths.length} entries for ${s.numLayers} layers`);
    const within = (v: number | undefined, max: number, what: string, l: number) => {
      if (v !== undefined && (!Number.isInteger(v) || v < 1 || v > max)) throw new LlmcError(`widths[${l}].${what} = ${v} is outside 1..${max}`);
    };
    widths.forEach((w, l) => {
      const L = this.layers[l];
      within(w.kvGroups, s.numKvHeads, 'kvGroups', l);
      if (w.kvGroups === undefined) throw new LlmcError(`widths[${l}].kvGroups is missing`);
      within(w.qHeadsPerGroup, nrep, 'qHeadsPerGroup', l);
      if (L.mlp) within(s.moe ? w.denseFfn : w.ffn, L.mlp.gate.rows, s.moe ? 'denseFfn' : 'ffn', l);
      else within(w.ffn, L.experts[0].gate.rows, 'ffn', l);
      w.expertFfn?.forEach((f, e) => within(f, L.experts[e]?.gate.rows ?? 0, `expertFfn[${e}]`, l));
      if (L.shared) within(w.sharedFfn, L.shared.gate.rows, 'sharedFfn', l);
    });
  }
}

/** Rotate-half RoPE on v[o..o+hd) for new position t (pairs i and i + hd/2). */
function rope(v: Float32Array, o: number, hd: number, cos: Float32Array, sin: Float32Array, t: number): void {
  const half = hd >> 1;
  const c0 = t * half;
  for (let i = 0; i < half; i++) {
    const a = v[o + i];
    const b = v[o + i + half];
    const c = cos[c0 + i];
    const sn = sin[c0 + i];
    v[o + i] = a * c - b * sn;
    v[o + i + half] = b * c + a * sn;
  }
}

function rmsNorm(x: Float32Array, w: Float32Array, out: Float32Array, T: number, D: number, eps: number): void {
  for (let t = 0; t < T; t++) {
    const o = t * D;
    let ss = 0;
    for (let i = 0; i < D; i++) ss += x[o + i] * x[o + i];
    const r = 1 / Math.sqrt(Math.fround(ss / D) + eps);
    for (let i = 0; i < D; i++) out[o + i] = w[i] * Math.fround(x[o + i] * r);
  }
}

/** down(silu(gate(x)) * up(x)) over the first `ffn` neurons; out is [T, D]. */
function swiglu(m: Mlp, x: Float32Array, T: number, D: number, out: Float32Array, ffn: number): void {
  const g = new Float32Array(T * ffn);
  const u = new Float32Array(T * ffn);
  matmul(m.gate, x, T, D, g, ffn, { nRows: ffn, bias: m.gateBias });
  matmul(m.up, x, T, D, u, ffn, { nRows: ffn, bias: m.upBias });
  for (let i = 0; i < T * ffn; i++) {
    const a = g[i];
    g[i] = (a / (1 + Math.exp(-a))) * u[i];
  }
  matmul(m.down, g, T, ffn, out, D, { nCols: ffn, bias: m.downBias });
}
