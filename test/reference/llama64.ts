/**
 * An independent float64 reference of the supported architectures (llama, mistral, qwen2,
 * mixtral, qwen2_moe) for tests: plain loops over one token at a time, written from the Hugging
 * Face modeling code, sharing nothing with src/core/ir or src/exec/onnx. Test models are tiny, so all
 * weights are loaded up front as float64.
 */
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import type { ArchSpec } from '../../src/core/arch/spec.js';

type Vec = Float64Array;

/** Intermediate values, per token, for comparing taps. */
export interface Trace {
  /** Weight name → the input vectors of that linear, one per token it ran on. */
  linearInputs: Map<string, Vec[]>;
  /** `model.layers.<l>.self_attn` → per token, the attention output before o_proj [H·hd]. */
  headOutputs: Map<string, Vec[]>;
  /** Router weight name → per token router logits. */
  routerLogits: Map<string, Vec[]>;
  /** MLP prefix → per token act(gate)·up (only tokens routed to it, for experts). */
  mlpActs: Map<string, Vec[]>;
}

export function newTrace(): Trace {
  return { linearInputs: new Map(), headOutputs: new Map(), routerLogits: new Map(), mlpActs: new Map() };
}

function record(m: Map<string, Vec[]>, key: string, v: Vec): void {
  const list = m.get(key);
  if (list) list.push(Float64Array.from(v));
  else m.set(key, [Float64Array.from(v)]);
}

export class Llama64 {
  private w = new Map<string, Vec>();
  /** Replaces a linear's W·x (before its bias) where it returns a vector: fake-quantized references. */
  linearOverride: ((name: string, x: Vec) => Vec | null) | null = null;
  /** The first key position query t of layer l sees (default: the architecture's causal or sliding span). */
  firstKey: ((l: number, t: number) => number) | null = null;
  private constructor(readonly spec: ArchSpec) {}

  static async load(source: ModelSource): Promise<Llama64> {
    const m = new Llama64(source.spec);
    for (const t of source.tensors) m.w.set(t.name, Float64Array.from(await source.readF32(t.name)));
    return m;
  }

  get(name: string): Vec {
    const v = this.w.get(name);
    if (!v) throw new Error(`reference: no tensor ${name}`);
    return v;
  }

  private has(name: string): boolean {
    return this.w.has(name);
  }

  /** y = W x (+ b), W stored [out, in]. */
  private linear(name: string, x: Vec, trace: Trace | undefined): Vec {
    if (trace) record(trace.linearInputs, name, x);
    const W = this.get(name);
    const n = x.length;
    let out = this.linearOverride?.(name, x) ?? null;
    if (!out) {
      out = new Float64Array(W.length / n);
      for (let o = 0; o < out.length; o++) {
        let s = 0;
        for (let i = 0; i < n; i++) s += W[o * n + i] * x[i];
        out[o] = s;
      }
    }
    const bname = name.replace(/\.weight$/, '.bias');
    if (this.has(bname)) {
      const b = this.get(bname);
      for (let o = 0; o < out.length; o++) out[o] += b[o];
    }
    return out;
  }

  private rmsnorm(x: Vec, name: string): Vec {
    const w = this.get(name);
    let ss = 0;
    for (const v of x) ss += v * v;
    const r = 1 / Math.sqrt(ss / x.length + this.spec.rmsNormEps);
    return x.map((v, i) => v * r * w[i]);
  }

  /** inv_freq per transformers' rope init (default / linear / llama3 / dynamic / yarn / longrope), in float64. */
  invFreq(seqLen: number): { inv: number[]; scale: number } {
    const s = this.spec;
    const d = s.headDim;
    let base = s.ropeTheta;
    const rs = s.ropeScaling;
    if (rs && rs.type === 'dynamic') {
      const L = Math.max(seqLen, s.maxPositions);
      base *= ((rs.factor * L) / s.maxPositions - (rs.factor - 1)) ** (d / (d - 2));
    }
    const inv: number[] = [];
    for (let j = 0; j < d; j += 2) inv.push(1 / Math.pow(base, j / d));
    if (rs && rs.type === 'linear') return { inv: inv.map((f) => f / rs.factor), scale: 1 };
    if (rs && rs.type === 'llama3') {
      const old = rs.originalMaxPositions;
      return {
        inv: inv.map((f) => {
          const wavelen = (2 * Math.PI) / f;
          if (wavelen < old / rs.highFreqFactor) return f;
          if (wavelen > old / rs.lowFreqFactor) return f / rs.factor;
          const smooth = (old / wavelen - rs.lowFreqFactor) / (rs.highFreqFactor - rs.lowFreqFactor);
          return (1 - smooth) * (f / rs.factor) + smooth * f;
        }),
        scale: 1,
      };
    }
    if (rs && rs.type === 'yarn') {
      const dimAt = (rot: number) => (d * Math.log(rs.originalMaxPositions / (rot * 2 * Math.PI))) / (2 * Math.log(base));
      const cut = (x: number, up: boolean) => (rs.truncate ? (up ? Math.ceil(x) : Math.floor(x)) : x);
      const lo = Math.max(cut(dimAt(rs.betaFast), false), 0);
      let hi = Math.min(cut(dimAt(rs.betaSlow), true), d - 1);
      if (lo === hi) hi += 0.001;
      return {
        inv: inv.map((f, j) => {
          const ramp = Math.min(1, Math.max(0, (j - lo) / (hi - lo)));
          return (f / rs.factor) * ramp + f * (1 - ramp);
        }),
        scale: rs.attentionFactor,
      };
    }
    if (rs && rs.type === 'longrope') {
      const ext = seqLen > rs.originalMaxPositions ? rs.longFactor : rs.shortFactor;
      return { inv: inv.map((f, j) => f / ext[j]), scale: rs.attentionFactor };
    }
    return { inv, scale: 1 };
  }

  /** HF rotate_half rope of one head vector at position `pos`. */
  private rope(x: Vec, off: number, pos: number, freq: { inv: number[]; scale: number }): void {
    const half = this.spec.headDim / 2;
    for (let j = 0; j < half; j++) {
      const c = Math.cos(pos * freq.inv[j]) * freq.scale;
      const sn = Math.sin(pos * freq.inv[j]) * freq.scale;
      const a = x[off + j];
      const b = x[off + j + half];
      x[off + j] = a * c - b * sn;
      x[off + j + half] = b * c + a * sn;
    }
  }

  private swiglu(prefix: string, names: { gate: string; up: string; down: string }, x: Vec, trace?: Trace): Vec {
    const g = this.linear(names.gate, x, trace);
    const u = this.linear(names.up, x, trace);
    const h = g.map((v, i) => (v / (1 + Math.exp(-v))) * u[i]);
    if (trace) record(trace.mlpActs, prefix, h);
    return this.linear(names.down, h, trace);
  }

  private moe(l: number, x: Vec, trace?: Trace): Vec {
    const s = this.spec;
    const m = s.moe!;
    const mixtral = s.modelType === 'mixtral';
    const p = mixtral ? `model.layers.${l}.block_sparse_moe` : `model.layers.${l}.mlp`;
    const logits = this.linear(`${p}.gate.weight`, x, trace);
    if (trace) record(trace.routerLogits, `${p}.gate.weight`, logits);
    const mx = Math.max(...logits);
    const ex = logits.map((v) => Math.exp(v - mx));
    const z = ex.reduce((a, b) => a + b, 0);
    const probs = ex.map((v) => v / z);
    const order = [...probs.keys()].sort((a, b) => probs[b] - probs[a] || a - b).slice(0, m.topK);
    let wsum = 0;
    for (const e of order) wsum += probs[e];
    const renorm = m.routing === 'softmax-topk-renorm';
    const out = new Float64Array(x.length);
    for (const e of [...order].sort((a, b) => a - b)) {
      const ep = `${p}.experts.${e}`;
      const names = mixtral
        ? { gate: `${ep}.w1.weight`, down: `${ep}.w2.weight`, up: `${ep}.w3.weight` }
        : { gate: `${ep}.gate_proj.weight`, up: `${ep}.up_proj.weight`, down: `${ep}.down_proj.weight` };
      const y = this.swiglu(ep, names, x, trace);
      const wgt = renorm ? probs[e] / wsum : probs[e];
      for (let i = 0; i < x.length; i++) out[i] += wgt * y[i];
    }
    if (m.sharedExpertIntermediateSize) {
      const sp = `${p}.shared_expert`;
      const y = this.swiglu(sp, { gate: `${sp}.gate_proj.weight`, up: `${sp}.up_proj.weight`, down: `${sp}.down_proj.weight` }, x, trace);
      const g = this.linear(`${p}.shared_expert_gate.weight`, x, trace)[0];
      const sig = 1 / (1 + Math.exp(-g));
      for (let i = 0; i < x.length; i++) out[i] += sig * y[i];
    }
    return out;
  }

  /** Logits at every position of `ids` (a fresh sequence starting at position 0). */
  forward(ids: number[], trace?: Trace): Vec[] {
    const s = this.spec;
    const D = s.hiddenSize;
    const hd = s.headDim;
    const H = s.numHeads;
    const KV = s.numKvHeads;
    const T = ids.length;
    const emb = this.get('model.embed_tokens.weight');
    let hs: Vec[] = ids.map((id) => emb.slice(id * D, (id + 1) * D));
    const freq = this.invFreq(T);
    for (let l = 0; l < s.numLayers; l++) {
      const a = `model.layers.${l}.self_attn`;
      const qs: Vec[] = [];
      const ks: Vec[] = [];
      const vs: Vec[] = [];
      for (let t = 0; t < T; t++) {
        const x = this.rmsnorm(hs[t], `model.layers.${l}.input_layernorm.weight`);
        const q = this.linear(`${a}.q_proj.weight`, x, trace);
        const k = this.linear(`${a}.k_proj.weight`, x, trace);
        for (let h = 0; h < H; h++) this.rope(q, h * hd, t, freq);
        for (let h = 0; h < KV; h++) this.rope(k, h * hd, t, freq);
        qs.push(q);
        ks.push(k);
        vs.push(this.linear(`${a}.v_proj.weight`, x, trace));
      }
      const next: Vec[] = [];
      for (let t = 0; t < T; t++) {
        const ctx = new Float64Array(H * hd);
        for (let h = 0; h < H; h++) {
          const kvh = Math.floor(h / (H / KV));
          const w = s.slidingWindow !== null && (s.slidingLayers === null || s.slidingLayers.includes(l)) ? s.slidingWindow : null;
          const lo = Math.max(0, this.firstKey ? this.firstKey(l, t) : w ? t - w + 1 : 0);
          const sc: number[] = [];
          for (let j = lo; j <= t; j++) {
            let d = 0;
            for (let i = 0; i < hd; i++) d += qs[t][h * hd + i] * ks[j][kvh * hd + i];
            sc.push(d / Math.sqrt(hd));
          }
          const mx = Math.max(...sc);
          const e = sc.map((v) => Math.exp(v - mx));
          const z = e.reduce((u, v) => u + v, 0);
          for (let j = lo; j <= t; j++) {
            const p = e[j - lo] / z;
            for (let i = 0; i < hd; i++) ctx[h * hd + i] += p * vs[j][kvh * hd + i];
          }
        }
        if (trace) record(trace.headOutputs, a, ctx);
        const o = this.linear(`${a}.o_proj.weight`, ctx, trace);
        const r1 = hs[t].map((v, i) => v + o[i]);
        const x2 = this.rmsnorm(r1, `model.layers.${l}.post_attention_layernorm.weight`);
        const isMoe = s.moe !== null && !s.moe.denseLayers.includes(l);
        const mp = `model.layers.${l}.mlp`;
        const y = isMoe
          ? this.moe(l, x2, trace)
          : this.swiglu(mp, { gate: `${mp}.gate_proj.weight`, up: `${mp}.up_proj.weight`, down: `${mp}.down_proj.weight` }, x2, trace);
        next.push(r1.map((v, i) => v + y[i]));
      }
      hs = next;
    }
    const head = s.tieEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight';
    return hs.map((h) => this.linear(head, this.rmsnorm(h, 'model.norm.weight'), trace));
  }
}

/** Index of the largest value (lowest index on ties). */
export function argmax64(v: ArrayLike<number>): number {
  let b = 0;
  for (let i = 1; i < v.length; i++) if (v[i] > v[b]) b = i;
  return b;
}
