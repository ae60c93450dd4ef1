/**
 * Measurements on the onnxruntime Engine (the one model definition), with every expert weight a
 * swappable graph input so one session runs the model with any expert quantized:
 *  - routing: router logits and the MoE inputs (tap points) on calibration data → per token and MoE
 *    layer the selected experts and their weights, replicated as the executors route (softmax,
 *    top-k with the lower index on ties, renormalized where the model says so);
 *  - teacher-forced KL of the next-token distributions (SPEC §4.4 b): one forward per candidate,
 *    only the item's tensors quantized (quantize → dequantize with the target's own codecs);
 *  - activation-aware reconstruction error (SPEC §4.4 e): ‖g·(E(x) − Ê(x))‖² on the inputs routed
 *    to the expert, in float64, as the expected error added to the residual per token;
 *  - perplexity of any plan on a split (acceptance, EdgeMoE's oracle).
 * Experts that fewer than minTokens calibration tokens reach are force-routed: a router bias lifts
 * their logit to the top one's on average (routed on about half the tokens, with ordinary routing
 * weights); the KL runs biased against a reference biased the same way, the reconstruction on the
 * tokens the biased router sends them, and both are rescaled from the forced frequency to the
 * smoothed natural one, (n + ½)/N: every expert gets a finite, non-zero sensitivity.
 */
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import { moeNames } from '../../src/core/arch/names.js';
import { LlmcError } from '../../src/core/errors.js';
import { dequantize, quantize } from '../../src/core/quant/quantize.js';
import type { QuantType } from '../../src/core/quant/types.js';
import type { Progress } from '../../src/core/util/progress.js';
import { Engine, type Swap } from '../../src/exec/engine/index.js';
import { StreamEngine, streams, type DivergenceBranch, type Tapper } from '../../src/exec/stream/index.js';
import { transformSource } from '../../src/core/checkpoint/source.js';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ExpertRef, Item, Proj } from './items.js';
import { PROJS } from './items.js';
import { Gemm } from './gemm.js';
import { onInterrupt } from '../../src/core/util/interrupt.js';

export interface Routing {
  /** Tokens observed (sequence-major). */
  N: number;
  E: number;
  topK: number;
  /** Per MoE layer: per token, the selected experts (by weight, descending) and their weights. */
  sel: Int32Array[];
  weight: Float64Array[];
  /** Per MoE layer: softmax probabilities [N, E]. */
  probs: Float64Array[];
  /** Per MoE layer: the MoE input [N, D]. */
  x: Float32Array[];
  /** Per sequence, per token, per MoE layer: the selected experts, ascending (routing traces). */
  traces: number[][][][];
}

export interface ExpertProfile {
  ref: ExpertRef;
  tokens: number;
  meanGate: number;
  forced: boolean;
  /** Smoothed routing frequency per token: n/N, or (n + ½)/N when forced; 1 for a shared expert. */
  pi: number;
  /** Forced: the router bias of its layer (only its entry non-zero) and the frequency it routes at with it. */
  force: { bias: number; pi: number } | null;
}

/** Formats whose quantizers are slow enough that their bytes are kept on disk between uses (Q8_0 and F16 quantize faster than they read back). */
const KEPT_ON_DISK: ReadonlySet<QuantType> = new Set(['Q2_K', 'Q3_K', 'Q4_0', 'Q4_1', 'Q4_K', 'Q5_0', 'Q5_1', 'Q5_K', 'Q6_K']);

/** A Swap, and for a streamed Lab the formats its tensors are read at (quantized as each piece loads). */
export type LabSwap = Swap & { formats?: ReadonlyMap<string, QuantType> };

/**
 * The Engine with every planned tensor swappable, and the quantized values it feeds; or, for a model
 * that streams (src/exec/stream: float32 weights above 1 GiB, or `stream` forcing it), the
 * layer-streamed executor, where a swap is a view of the checkpoint whose planned tensors are read
 * quantized and the sensitivities are branches of one sweep (klSensitivities): one decoder block's
 * weights in memory, never the whole graph. Both give the same figures (test/expert-bits-stream.test.ts).
 */
export class Lab {
  private readonly cache = new Map<string, Float32Array>();
  private cached = 0;
  private product?: Promise<Gemm>;
  private scratch?: string;
  private dropScratch?: () => void;

  private constructor(
    readonly source: ModelSource,
    private readonly opened: Engine | null,
    private readonly cacheFloats: number,
  ) {}

  static async open(source: ModelSource, tensors: readonly string[], cacheFloats?: number, stream?: boolean): Promise<Lab> {
    // streamed, the quantized values are re-read from the scratch directory: a small LRU keeps memory near one piece's
    if (streams(source.spec, stream)) return new Lab(source, null, cacheFloats ?? 16 << 20);
    cacheFloats ??= 64 << 20;
    return new Lab(source, await Engine.open(source, { swappable: [...new Set(tensors)], routerBias: true }), cacheFloats);
  }

  /** Layer-streamed: no whole-model graph. */
  get streamed(): boolean {
    return this.opened === null;
  }

  /** The whole-model Engine, every planned tensor swappable (none when streamed). */
  get engine(): Engine {
    if (!this.opened) throw new LlmcError('internal: a streamed Lab has no swappable engine');
    return this.opened;
  }

  /** What calibration statistics are tapped with. */
  tapper(): Tapper {
    return this.opened ?? new StreamEngine(this.source);
  }

  /** `source` with `swap.formats`' tensors read through their formats (quantized as the piece reading them loads). */
  swapped(swap: LabSwap): ModelSource {
    const formats = swap.formats ?? new Map<string, QuantType>();
    if (!formats.size) return this.source;
    const h = createHash('sha256');
    for (const [t, f] of [...formats].sort((a, b) => (a[0] < b[0] ? -1 : 1))) h.update(`${t}=${f};`);
    return transformSource(this.source, { label: 'quantized experts', paramsHash: h.digest('hex'), rewrite: async (name, data) => (formats.has(name) ? this.quantized(name, formats.get(name)!, data) : data), untouched: (name) => !formats.has(name) });
  }

  async close(): Promise<void> {
    await this.opened?.close();
    await (await this.product)?.close();
    this.dropScratch?.();
  }

  /** The scratch directory of quantized bytes (created on first use; removed by close() or on Ctrl-C). */
  private scratchDir(): string {
    if (this.scratch) return this.scratch;
    const dir = mkdtempSync(path.join(os.tmpdir(), 'llmc-expert-bits-'));
    const remove = () => rmSync(dir, { recursive: true, force: true });
    const unregister = onInterrupt(remove);
    this.dropScratch = () => {
      unregister();
      remove();
    };
    return (this.scratch = dir);
  }

  /** The float32 matrix product the reconstruction errors run on (one onnxruntime session, opened on first use). */
  gemm(): Promise<Gemm> {
    return (this.product ??= Gemm.open());
  }

  /**
   * The tensor's values after a round trip through `format`: the latest up to cacheFloats values
   * held (least recently used dropped first), and every slow format's quantized bytes kept on disk
   * (a scratch directory removed by close()), so each (tensor, format) is quantized once per pass:
   * the reconstruction errors, the per-layer KLs and every plan's perplexity read it back
   * (dequantizing is 3–7× faster than the K-quants' quantizers; on a 0.9B mixtral with the default candidates, 1.5 GB on disk).
   */
  async quantized(name: string, format: QuantType, stored?: Float32Array): Promise<Float32Array> {
    const key = `${name}|${format}`;
    const hit = this.cache.get(key);
    if (hit) {
      this.cache.delete(key);
      this.cache.set(key, hit);
      return hit;
    }
    const meta = this.source.meta(name)!;
    const count = meta.shape.reduce((a, b) => a * b, 1);
    let v: Float32Array;
    const file = KEPT_ON_DISK.has(format) ? path.join(this.scratchDir(), `${createHash('sha256').update(key).digest('hex').slice(0, 32)}.q`) : null;
    if (file && existsSync(file)) v = dequantize(format, new Uint8Array(readFileSync(file)), count);
    else {
      const w = stored ?? (await this.source.readF32(name));
      if (format === 'F32') v = w;
      else {
        const q = quantize(format, w, meta.shape[meta.shape.length - 1]);
        if (file) writeFileSync(file, q);
        v = dequantize(format, q, w.length);
      }
    }
    if (v.length > this.cacheFloats) return v;
    for (const [k, x] of this.cache) {
      if (this.cached + v.length <= this.cacheFloats) break;
      this.cache.delete(k);
      this.cached -= x.length;
    }
    this.cache.set(key, v);
    this.cached += v.length;
    return v;
  }

  /** Swapped weights for tensors → formats. */
  async swap(assign: Iterable<[string, QuantType]>, routerBias?: Swap['routerBias']): Promise<LabSwap> {
    if (this.streamed) return { formats: new Map(assign), routerBias };
    const weights = new Map<string, Float32Array>();
    for (const [t, f] of assign) weights.set(t, await this.quantized(t, f));
    return { weights, routerBias };
  }

  /** Logits [B·T, V] at every position of equal-length sequences (whole graph only: streamed sensitivities are klSensitivities' branches). */
  async logits(seqs: number[][], swap: Swap = {}): Promise<Float32Array> {
    const T = seqs[0].length;
    return (await this.engine.forward(seqs, null, Array.from({ length: T }, (_, t) => t), [], swap)).logits;
  }

  /** Log-probabilities [B·T, V] in float64 (the reference of a KL). */
  async logProbs(seqs: number[][], swap: Swap = {}): Promise<Float64Array> {
    const z = await this.logits(seqs, swap);
    const V = this.source.spec.vocabSize;
    const out = new Float64Array(z.length);
    for (let o = 0; o < z.length; o += V) {
      const lse = logSumExp(z, o, V);
      for (let i = 0; i < V; i++) out[o + i] = z[o + i] - lse;
    }
    return out;
  }

  /** Mean KL(p_ref ‖ p_swap) over every position. */
  async kl(ref: Float64Array, seqs: number[][], swap: Swap): Promise<number> {
    const z = await this.logits(seqs, swap);
    const V = this.source.spec.vocabSize;
    const rows = z.length / V;
    let sum = 0;
    for (let r = 0; r < rows; r++) {
      const o = r * V;
      const lse = logSumExp(z, o, V);
      let kl = 0;
      for (let i = 0; i < V; i++) {
        const lp = ref[o + i];
        kl += Math.exp(lp) * (lp - (z[o + i] - lse));
      }
      sum += Math.max(0, kl);
    }
    return sum / rows;
  }

  /** Perplexity of next-token prediction over the sequences. */
  async ppl(seqs: number[][], swap: LabSwap = {}): Promise<number> {
    if (this.streamed) {
      if (swap.routerBias) throw new LlmcError('internal: a streamed perplexity takes no router bias');
      return Math.exp((await new StreamEngine(this.swapped(swap)).losses(seqs)).base);
    }
    const z = await this.logits(seqs, swap);
    const V = this.source.spec.vocabSize;
    const T = seqs[0].length;
    let nll = 0;
    let count = 0;
    seqs.forEach((seq, b) => {
      for (let t = 0; t + 1 < T; t++) {
        const o = (b * T + t) * V;
        nll += logSumExp(z, o, V) - z[o + seq[t + 1]];
        count++;
      }
    });
    return Math.exp(nll / count);
  }
}

/** log Σ exp(z[o..o+n)), stable. */
function logSumExp(z: Float32Array, o: number, n: number): number {
  let max = -Infinity;
  for (let i = 0; i < n; i++) max = Math.max(max, z[o + i]);
  let s = 0;
  for (let i = 0; i < n; i++) s += Math.exp(z[o + i] - max);
  return max + Math.log(s);
}

/** Route every token of `seqs` (equal lengths) as the executors do; the MoE inputs with them. */
export async function routeTokens(lab: Lab, seqs: number[][], moeLayers: readonly number[]): Promise<Routing> {
  const spec = lab.source.spec;
  const moe = spec.moe!;
  const E = moe.numExperts;
  const K = moe.topK;
  const D = spec.hiddenSize;
  const res = await lab.tapper().tap(seqs, [{ kind: 'router-logits', layers: [...moeLayers] }, { kind: 'linear-input', layers: [...moeLayers], full: true }]);
  const T = seqs[0].length;
  const N = seqs.length * T;
  // Token index of (block row) in sequence-major order.
  const order: number[] = [];
  for (const b of res.batches) for (const s of b.sequences) for (let t = 0; t < T; t++) order.push(s * T + t);
  const sel: Int32Array[] = [];
  const weight: Float64Array[] = [];
  const probs: Float64Array[] = [];
  const xs: Float32Array[] = [];
  const traces: number[][][][] = seqs.map(() => Array.from({ length: T }, () => []));
  moeLayers.forEach((layer, n) => {
    const router = moeNames(spec, layer).router;
    const logits = flatten(res.routerLogits.get(router)!.logits, order, E);
    const x = flatten(res.linearInputs.get(router)!.full!, order, D);
    const s = new Int32Array(N * K);
    const w = new Float64Array(N * K);
    const p = new Float64Array(N * E);
    const idx = Array.from({ length: E }, (_, i) => i);
    for (let t = 0; t < N; t++) {
      let max = -Infinity;
      for (let e = 0; e < E; e++) max = Math.max(max, logits[t * E + e]);
      let sum = 0;
      for (let e = 0; e < E; e++) sum += p[t * E + e] = Math.exp(logits[t * E + e] - max);
      for (let e = 0; e < E; e++) p[t * E + e] /= sum;
      idx.sort((a, b) => p[t * E + b] - p[t * E + a] || a - b);
      let norm = 1;
      if (moe.routing === 'softmax-topk-renorm') {
        norm = 0;
        for (let k = 0; k < K; k++) norm += p[t * E + idx[k]];
      }
      for (let k = 0; k < K; k++) {
        s[t * K + k] = idx[k];
        w[t * K + k] = p[t * E + idx[k]] / norm;
      }
      traces[Math.floor(t / T)][t % T][n] = idx.slice(0, K).sort((a, b) => a - b);
    }
    sel.push(s);
    weight.push(w);
    probs.push(p);
    xs.push(x);
  });
  return { N, E, topK: K, sel, weight, probs, x: xs, traces };
}

/** Concatenate tap blocks and put rows in sequence-major order. */
function flatten(blocks: Float32Array[], order: number[], C: number): Float32Array {
  const out = new Float32Array(order.length * C);
  let r = 0;
  for (const b of blocks) for (let i = 0; i < b.length / C; i++, r++) out.set(b.subarray(i * C, (i + 1) * C), order[r] * C);
  return out;
}

const sigmoid = (v: number) => 1 / (1 + Math.exp(-v));

/** Who each expert's calibration tokens are, with their routing weights (force-routed when too few). */
export async function expertTokens(
  source: ModelSource,
  routing: Routing,
  ref: ExpertRef,
  minTokens: number,
): Promise<{ profile: ExpertProfile; tokens: Int32Array; gates: Float64Array }> {
  const { N, E, topK: K } = routing;
  const n = ref.n;
  if (ref.expert < 0) {
    // The shared expert sees every token, scaled by sigmoid(shared_expert_gate · x).
    const gw = await source.readF32(moeNames(source.spec, ref.layer).sharedGate!);
    const D = source.spec.hiddenSize;
    const x = routing.x[n];
    const gates = new Float64Array(N);
    for (let t = 0; t < N; t++) {
      let z = 0;
      for (let c = 0; c < D; c++) z += gw[c] * x[t * D + c];
      gates[t] = sigmoid(z);
    }
    const mean = gates.reduce((a, b) => a + b, 0) / N;
    return { profile: { ref, tokens: N, meanGate: mean, forced: false, pi: 1, force: null }, tokens: Int32Array.from({ length: N }, (_, t) => t), gates };
  }
  const routed = select(routing, n, ref.expert, 0, source.spec.moe!.routing);
  const count = routed.tokens.length;
  const meanGate = count ? routed.gates.reduce((a, b) => a + b, 0) / count : 0;
  if (count >= minTokens) return { profile: { ref, tokens: count, meanGate, forced: false, pi: count / N, force: null }, ...routed };
  // Force-routed: lift its logit by the mean gap to each token's top logit (log p_max − log p_e).
  const p = routing.probs[n];
  let gap = 0;
  for (let t = 0; t < N; t++) {
    let max = 0;
    for (let e = 0; e < E; e++) max = Math.max(max, p[t * E + e]);
    gap += Math.log(max) - Math.log(Math.max(p[t * E + ref.expert], 1e-300));
  }
  const bias = gap / N;
  const forced = select(routing, n, ref.expert, bias, source.spec.moe!.routing);
  if (forced.tokens.length === 0) throw new LlmcError(`internal: expert ${ref.key} is not routed even with a router bias of ${bias}`);
  return { profile: { ref, tokens: count, meanGate, forced: true, pi: (count + 0.5) / N, force: { bias, pi: forced.tokens.length / N } }, ...forced };
}

/** The tokens routed to expert `x` (its logit shifted by `bias`) and their routing weights, as the executors route. */
function select(routing: Routing, n: number, x: number, bias: number, mode: 'softmax-topk-renorm' | 'softmax-topk'): { tokens: Int32Array; gates: Float64Array } {
  const { N, E, topK: K } = routing;
  const p = routing.probs[n];
  const q = new Float64Array(E);
  const idx = Array.from({ length: E }, (_, i) => i);
  const toks: number[] = [];
  const gates: number[] = [];
  const lift = Math.exp(bias);
  for (let t = 0; t < N; t++) {
    let sum = 0;
    for (let e = 0; e < E; e++) sum += q[e] = e === x ? Math.max(p[t * E + e], 1e-300) * lift : p[t * E + e];
    for (let e = 0; e < E; e++) q[e] /= sum;
    idx.sort((a, b) => q[b] - q[a] || a - b);
    const k = idx.indexOf(x);
    if (k >= K) continue;
    let norm = 1;
    if (mode === 'softmax-topk-renorm') {
      norm = 0;
      for (let j = 0; j < K; j++) norm += q[idx[j]];
    }
    toks.push(t);
    gates.push(q[x] / norm);
  }
  return { tokens: Int32Array.from(toks), gates: Float64Array.from(gates) };
}

/** Evenly spaced subset of at most `max` entries (deterministic). */
function sample(n: number, max: number): number[] {
  if (n <= max) return Array.from({ length: n }, (_, i) => i);
  return Array.from({ length: max }, (_, i) => Math.floor((i * n) / max));
}

const silu = (a: number) => a / (1 + Math.exp(-a));

/** h = silu(g) · u, float64. */
function siluMul(g: ArrayLike<number>, u: ArrayLike<number>): Float64Array {
  const h = new Float64Array(g.length);
  for (let i = 0; i < g.length; i++) h[i] = silu(g[i]) * u[i];
  return h;
}

/** a + b elementwise, float64. */
function plus(a: ArrayLike<number>, b: ArrayLike<number>): Float64Array {
  const out = new Float64Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = a[i] + b[i];
  return out;
}

/** a − b elementwise, rounded to float32 (a difference of nearby values: the small operand of a product). */
function minus32(a: ArrayLike<number>, b: ArrayLike<number>): Float32Array {
  const out = new Float32Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = a[i] - b[i];
  return out;
}

/**
 * Reconstruction errors of one expert on its (sampled) tokens: per projection and written format
 * with only that projection quantized, and per full choice (all three at their formats).
 * Each value is π · mean_t g_t²‖E(x_t) − Ê(x_t)‖². The products run in float32 on onnxruntime (./gemm.ts)
 * over differences: ΔG = X·(W_q − W)ᵀ, and E − Ê = W_d·(H − Ĥ) + (W_d − Ŵ_d)·Ĥ, so the error is
 * computed to float32 rounding of itself, not of the outputs.
 */
export async function reconErrors(
  lab: Lab,
  routing: Routing,
  tok: { profile: ExpertProfile; tokens: Int32Array; gates: Float64Array },
  perProj: Record<Proj, QuantType[]>,
  tuples: QuantType[][],
  maxTokens: number,
): Promise<ExpertRecon> {
  const ref = tok.profile.ref;
  const D = lab.source.spec.hiddenSize;
  const pick = sample(tok.tokens.length, maxTokens);
  const n = pick.length;
  const X = new Float32Array(n * D);
  const g2 = new Float64Array(n);
  pick.forEach((i, r) => {
    const t = tok.tokens[i];
    X.set(routing.x[ref.n].subarray(t * D, (t + 1) * D), r * D);
    g2[r] = tok.gates[i] ** 2;
  });
  const gemm = await lab.gemm();
  const W = {
    gate: await lab.source.readF32(ref.tensors.gate),
    up: await lab.source.readF32(ref.tensors.up),
    down: await lab.source.readF32(ref.tensors.down),
  };
  const I = W.gate.length / D;
  const G = await gemm.abT(X, n, D, W.gate, I);
  const U = await gemm.abT(X, n, D, W.up, I);
  const H = siluMul(G, U);
  const H32 = Float32Array.from(H);
  const sq = (dY: Float32Array, plus?: Float32Array) => {
    let s = 0;
    for (let r = 0; r < n; r++) {
      let e = 0;
      for (let c = r * D; c < (r + 1) * D; c++) e += (dY[c] + (plus ? plus[c] : 0)) ** 2;
      s += g2[r] * e;
    }
    return (tok.profile.pi * s) / n;
  };
  /** E − Ê for hidden states hq (H itself when null) through down weights at format fd (W_d itself when null). */
  const dOut = async (hq: Float64Array | null, dWd: Float32Array | null): Promise<number> => {
    const viaH = hq ? await gemm.abT(minus32(hq, H), n, I, W.down, D) : null;
    const viaW = dWd ? await gemm.abT(hq ? Float32Array.from(hq) : H32, n, I, dWd, D) : null;
    return viaH && viaW ? sq(viaH, viaW) : sq((viaH ?? viaW)!);
  };
  const Gq = new Map<QuantType, Float64Array>();
  const Uq = new Map<QuantType, Float64Array>();
  const dWd = new Map<QuantType, Float32Array | null>();
  const need = (p: Proj) => new Set([...perProj[p], ...tuples.map((t) => t[PROJS.indexOf(p)])]);
  const delta = async (name: string, f: QuantType, w: Float32Array) => (f === 'F32' ? null : minus32(await lab.quantized(name, f), w));
  for (const f of need('gate')) {
    const d = await delta(ref.tensors.gate, f, W.gate);
    Gq.set(f, d ? plus(G, await gemm.abT(X, n, D, d, I)) : Float64Array.from(G));
  }
  for (const f of need('up')) {
    const d = await delta(ref.tensors.up, f, W.up);
    Uq.set(f, d ? plus(U, await gemm.abT(X, n, D, d, I)) : Float64Array.from(U));
  }
  for (const f of need('down')) dWd.set(f, await delta(ref.tensors.down, f, W.down));
  const proj: Record<Proj, Record<string, number>> = { gate: {}, up: {}, down: {} };
  for (const f of perProj.gate) proj.gate[f] = await dOut(siluMul(Gq.get(f)!, U), null);
  for (const f of perProj.up) proj.up[f] = await dOut(siluMul(G, Uq.get(f)!), null);
  for (const f of perProj.down) proj.down[f] = dWd.get(f) ? await dOut(null, dWd.get(f)!) : 0;
  const tuple: Record<string, number> = {};
  for (const t of tuples) {
    const hq = t[0] === 'F32' && t[1] === 'F32' ? null : siluMul(Gq.get(t[0])!, Uq.get(t[1])!);
    tuple[t.join(',')] = hq || dWd.get(t[2]) ? await dOut(hq, dWd.get(t[2]) ?? null) : 0;
  }
  return { proj, tuple };
}

/** Reconstruction errors of one expert, as the profile stores them: per projection and written format, and per whole-expert format tuple ("gate,up,down"). */
export interface ExpertRecon {
  proj: Record<Proj, Record<string, number>>;
  tuple: Record<string, number>;
}

/** What the KL measurement needs to know of an expert: is it force-routed, with which bias, at what frequencies. */
export type ForceInfo = Pick<ExpertProfile, 'forced' | 'pi' | 'force'> & { layer: number; expert: number };

/**
 * Teacher-forced KL of every item and choice: one forward per (item, choice) on the calibration
 * sequences; force-routed experts against their own biased reference, rescaled to their natural
 * frequency.
 */
export async function klSensitivities(lab: Lab, items: readonly Item[], calib: number[][], experts: ReadonlyMap<string, ForceInfo>, E: number, progress: Progress): Promise<number[][]> {
  if (lab.streamed) return streamedKl(lab, items, calib, experts, E, progress);
  const ref = await lab.logProbs(calib);
  const kl: number[][] = [];
  progress.start('expert-bits: sensitivities', items.reduce((s, it) => s + it.choices.length, 0));
  for (const it of items) {
    const one = it.experts.length === 1 ? experts.get(it.experts[0].key)! : null;
    let base = ref;
    let bias: Swap['routerBias'];
    let scale = 1;
    if (one?.force) {
      const b = new Float32Array(E);
      b[one.expert] = one.force.bias;
      bias = new Map([[one.layer, b]]);
      base = await lab.logProbs(calib, { routerBias: bias });
      scale = one.pi / one.force.pi;
    }
    const row: number[] = [];
    for (const [j, ch] of it.choices.entries()) {
      const v = scale * (await lab.kl(base, calib, await lab.swap(it.tensors.map((t, i) => [t, ch.written[i]] as [string, QuantType]), bias)));
      if (!Number.isFinite(v)) throw new LlmcError(`internal: KL of ${it.key} choice ${j} is ${v}`);
      row.push(v);
      progress.tick();
    }
    kl.push(row);
  }
  progress.done();
  return kl;
}

/** An item's reconstruction error: a whole expert's measured tuple, or the sum over its experts of the projection's error. */
export function itemRecon(it: Item, written: readonly QuantType[], recon: Readonly<Record<string, ExpertRecon>>): number {
  const v = it.projs.length === 3 ? recon[it.experts[0].key].tuple[written.join(',')] : it.experts.reduce((s, e, i) => s + recon[e.key].proj[it.projs[0]][written[i]], 0);
  if (!Number.isFinite(v)) throw new LlmcError(`internal: reconstruction error of ${it.key} at ${written.join(',')} is ${v}`);
  return v;
}

/** Hidden states a branch holds, at most (the calibration batch's, each): more branches go to another sweep. */
const BRANCH_STATE_BYTES = 1 << 30;

/**
 * klSensitivities layer-streamed: each (item, choice) is a branch of a StreamEngine sweep leaving
 * the model at its layer with that item's tensors quantized (a force-routed expert against a
 * reference branch biased the same way), so an item at layer l costs the pieces from l on, and only
 * one block's weights are loaded at a time. Branches go in sweeps of at most BRANCH_STATE_BYTES of
 * hidden states; the figures equal the whole graph's to float32 rounding.
 */
async function streamedKl(lab: Lab, items: readonly Item[], calib: number[][], experts: ReadonlyMap<string, ForceInfo>, E: number, progress: Progress): Promise<number[][]> {
  const engine = new StreamEngine(lab.source);
  const at = (l: number) => engine.segments.findIndex((g) => g.layer === l);
  // per item: its branches (a biased reference first where force-routed) and where each choice's KL lands
  const groups: { branches: DivergenceBranch[]; out: [number, number, number][] }[] = [];
  for (const it of items) {
    const one = it.experts.length === 1 ? experts.get(it.experts[0].key)! : null;
    const layers = it.experts.map((e) => e.layer);
    const from = at(Math.min(...layers));
    const until = at(Math.max(...layers)) + 1;
    const branches: DivergenceBranch[] = [];
    let bias: Map<number, Float32Array> | undefined;
    let scale = 1;
    if (one?.force) {
      const b = new Float32Array(E);
      b[one.expert] = one.force.bias;
      bias = new Map([[one.layer, b]]);
      branches.push({ source: lab.source, from, until, routerBias: bias });
      scale = one.pi / one.force.pi;
    }
    const out: [number, number, number][] = [];
    for (const [j, ch] of it.choices.entries()) {
      const swap = await lab.swap(it.tensors.map((t, k) => [t, ch.written[k]] as [string, QuantType]));
      out.push([j, branches.length, scale]);
      branches.push({ source: lab.swapped(swap), from, until, routerBias: bias, reference: bias ? 0 : -1 });
    }
    groups.push({ branches, out });
  }
  const tokens = calib.reduce((a, q) => a + q.length, 0);
  const perSweep = Math.max(1, Math.floor(BRANCH_STATE_BYTES / (tokens * lab.source.spec.hiddenSize * 4)));
  const kl: number[][] = items.map((it) => new Array<number>(it.choices.length));
  progress.start('expert-bits: sensitivities (layer-streamed)', items.reduce((s, it) => s + it.choices.length, 0));
  for (let g = 0; g < groups.length; ) {
    // whole items per sweep, so a reference and the branches measured against it run together
    const sweep: typeof groups = [];
    let n = 0;
    while (g < groups.length && (sweep.length === 0 || n + groups[g].branches.length <= perSweep)) {
      n += groups[g].branches.length;
      sweep.push(groups[g++]);
    }
    const branches: DivergenceBranch[] = [];
    const offsets = sweep.map((x) => {
      const o = branches.length;
      for (const b of x.branches) branches.push({ ...b, reference: b.reference === undefined || b.reference < 0 ? b.reference : b.reference + o });
      return o;
    });
    const got = await engine.divergences(calib, branches);
    sweep.forEach((x, k) => {
      const i = g - sweep.length + k;
      for (const [j, b, scale] of x.out) {
        const v = scale * got[offsets[k] + b];
        if (!Number.isFinite(v)) throw new LlmcError(`internal: KL of ${items[i].key} choice ${j} is ${v}`);
        kl[i][j] = v;
        progress.tick();
      }
    });
  }
  progress.done();
  return kl;
}

/**
 * The end-to-end teacher-forced KL of each given layer with all its experts at their given formats
 * (block mode's per-layer factor, run.ts): one forward per layer on the whole graph; layer-streamed,
 * one branch per layer leaving the model there, all in one sweep (in sweeps of at most
 * BRANCH_STATE_BYTES of branch states).
 */
export async function layerKl(lab: Lab, layers: readonly { layer: number; assign: [string, QuantType][] }[], calib: number[][], progress: Progress): Promise<number[]> {
  progress.start('expert-bits: per-layer KL', layers.length);
  try {
    if (!lab.streamed) {
      const ref = await lab.logProbs(calib);
      const out: number[] = [];
      for (const l of layers) {
        out.push(await lab.kl(ref, calib, await lab.swap(l.assign)));
        progress.tick();
      }
      return out;
    }
    const engine = new StreamEngine(lab.source);
    const at = (l: number) => engine.segments.findIndex((g) => g.layer === l);
    const tokens = calib.reduce((a, q) => a + q.length, 0);
    const perSweep = Math.max(1, Math.floor(BRANCH_STATE_BYTES / (tokens * lab.source.spec.hiddenSize * 4)));
    const out: number[] = [];
    for (let i = 0; i < layers.length; i += perSweep) {
      const part = layers.slice(i, i + perSweep);
      const branches: DivergenceBranch[] = [];
      for (const l of part) branches.push({ source: lab.swapped(await lab.swap(l.assign)), from: at(l.layer), until: at(l.layer) + 1 });
      out.push(...(await engine.divergences(calib, branches)));
      progress.tick(part.length);
    }
    return out;
  } finally {
    progress.done();
  }
}
