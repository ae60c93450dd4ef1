/**
 * The fixture generator: Hugging Face layout and config keys, determinism, sharding and dtypes,
 * and — through a small float64 reference forward written here (checked against stories260K's
 * reference ids) — that the planted structure is really in the model's function and that the
 * random model is not degenerate.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture, FIXTURE_PRESETS, type FixtureArch, type FixtureTruth } from '../fixtures/generate.js';
import { pyFloatRepr, pyJson, pyFloat } from '../fixtures/pyjson.js';
import { openCheckpoint, type ArchSpec } from '../src/core/checkpoint/index.js';
import { layerNames, moeNames, EMBED, FINAL_NORM, LM_HEAD } from '../src/core/arch/names.js';
import { isMoeLayer } from '../src/core/arch/spec.js';
import { bf16ToF32, f16ToF32, f32ToBf16, f32ToF16 } from '../src/core/util/half.js';
import { ensureBuilt } from './build-once.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
const ARCHS: FixtureArch[] = ['llama', 'mistral', 'qwen2', 'mixtral', 'qwen2_moe'];
let tmp: string;

beforeAll(() => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-fixtures-'));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const sha = (f: string) => createHash('sha256').update(readFileSync(f)).digest('hex');
const dirHashes = (d: string) => Object.fromEntries(readdirSync(d).sort().map((f) => [f, sha(path.join(d, f))]));

// ---------------------------------------------------------------- reference forward (float64)

interface Weights {
  spec: ArchSpec;
  get(name: string): Float64Array;
}

async function loadWeights(dir: string): Promise<Weights> {
  const ck = await openCheckpoint(dir);
  const m = new Map<string, Float64Array>();
  for (const t of ck.tensors) m.set(t.name, Float64Array.from(await ck.readF32(t.name)));
  await ck.close();
  return {
    spec: ck.spec,
    get(name) {
      const v = m.get(name);
      if (!v) throw new Error(`no ${name}`);
      return v;
    },
  };
}

/** y = W x for W [out, in] row-major. */
function matvec(W: Float64Array, x: Float64Array, out: number, bias?: Float64Array): Float64Array {
  const n = x.length;
  const y = new Float64Array(out);
  for (let o = 0; o < out; o++) {
    let s = bias ? bias[o] : 0;
    for (let i = 0; i < n; i++) s += W[o * n + i] * x[i];
    y[o] = s;
  }
  return y;
}

function rmsnorm(x: Float64Array, w: Float64Array, eps: number): Float64Array {
  let ss = 0;
  for (const v of x) ss += v * v;
  const r = 1 / Math.sqrt(ss / x.length + eps);
  return x.map((v, i) => v * r * w[i]);
}

const silu = (v: number) => v / (1 + Math.exp(-v));

function swiglu(w: Weights, names: { gate: string; up: string; down: string }, x: Float64Array, I: number, tap?: (h: Float64Array) => void) {
  const D = x.length;
  const g = matvec(w.get(names.gate), x, I);
  const u = matvec(w.get(names.up), x, I);
  const h = g.map((v, i) => silu(v) * u[i]);
  tap?.(h);
  return matvec(w.get(names.down), h, D);
}

function rope(v: Float64Array, off: number, hd: number, pos: number, theta: number) {
  const half = hd / 2;
  for (let i = 0; i < half; i++) {
    const a = pos * theta ** (-(2 * i) / hd);
    const c = Math.cos(a);
    const s = Math.sin(a);
    const x0 = v[off + i];
    const x1 = v[off + i + half];
    v[off + i] = x0 * c - x1 * s;
    v[off + i + half] = x1 * c + x0 * s;
  }
}

interface Taps {
  /** Per layer, per position: the input of q/k/v (normed residual). */
  attnIn: Float64Array[][];
  /** Per layer, per position: the dense MLP hidden activations. */
  mlpHidden: Float64Array[][];
  /** Per layer, per position: the experts chosen. */
  routed: number[][][];
}

/** Logits at every position; `ablate` zeroes one attention unit (kv group) or one neuron of a layer. */
function forward(w: Weights, ids: number[], opts: { ablateUnit?: [number, number]; taps?: Taps } = {}): Float64Array[] {
  const s = w.spec;
  const D = s.hiddenSize;
  const hd = s.headDim;
  const H = s.numHeads;
  const KV = s.numKvHeads;
  const group = H / KV;
  const T = ids.length;
  const emb = w.get(EMBED);
  let xs = ids.map((id) => emb.slice(id * D, (id + 1) * D));
  for (let l = 0; l < s.numLayers; l++) {
    const n = layerNames(l);
    const normed = xs.map((x) => rmsnorm(x, w.get(n.inputNorm), s.rmsNormEps));
    opts.taps?.attnIn.push(normed);
    const bias = (name: string) => (s.qkvBias ? w.get(name) : undefined);
    const q = normed.map((x) => matvec(w.get(n.q), x, H * hd, bias(n.qBias)));
    const k = normed.map((x) => matvec(w.get(n.k), x, KV * hd, bias(n.kBias)));
    const v = normed.map((x) => matvec(w.get(n.v), x, KV * hd, bias(n.vBias)));
    for (let t = 0; t < T; t++) {
      for (let h = 0; h < H; h++) rope(q[t], h * hd, hd, t, s.ropeTheta);
      for (let h = 0; h < KV; h++) rope(k[t], h * hd, hd, t, s.ropeTheta);
    }
    const attn = Array.from({ length: T }, () => new Float64Array(H * hd));
    for (let t = 0; t < T; t++) {
      for (let h = 0; h < H; h++) {
        const kh = Math.floor(h / group);
        if (opts.ablateUnit && opts.ablateUnit[0] === l && opts.ablateUnit[1] === kh) continue;
        const sc = new Float64Array(t + 1);
        for (let j = 0; j <= t; j++) {
          let d = 0;
          for (let i = 0; i < hd; i++) d += q[t][h * hd + i] * k[j][kh * hd + i];
          sc[j] = d / Math.sqrt(hd);
        }
        const mx = Math.max(...sc);
        let z = 0;
        for (let j = 0; j <= t; j++) z += sc[j] = Math.exp(sc[j] - mx);
        for (let j = 0; j <= t; j++) for (let i = 0; i < hd; i++) attn[t][h * hd + i] += (sc[j] / z) * v[j][kh * hd + i];
      }
    }
    xs = xs.map((x, t) => {
      const o = matvec(w.get(n.o), attn[t], D);
      return x.map((val, i) => val + o[i]);
    });
    const normed2 = xs.map((x) => rmsnorm(x, w.get(n.postNorm), s.rmsNormEps));
    if (isMoeLayer(s, l)) {
      const m = s.moe!;
      const names = moeNames(s, l);
      const routedHere: number[][] = [];
      opts.taps?.routed.push(routedHere);
      xs = xs.map((x, t) => {
        const logits = matvec(w.get(names.router), normed2[t], m.numExperts);
        const mx = Math.max(...logits);
        const p = logits.map((z) => Math.exp(z - mx));
        const Z = p.reduce((a, b) => a + b, 0);
        const probs = p.map((z) => z / Z);
        const top = [...probs.keys()].sort((a, b) => probs[b] - probs[a] || a - b).slice(0, m.topK);
        routedHere.push(top);
        const norm = m.routing === 'softmax-topk-renorm' ? top.reduce((a, e) => a + probs[e], 0) : 1;
        const out = new Float64Array(D);
        for (const e of top) {
          const y = swiglu(w, names.experts[e], normed2[t], m.expertIntermediateSize);
          for (let i = 0; i < D; i++) out[i] += (probs[e] / norm) * y[i];
        }
        if (names.shared) {
          const y = swiglu(w, names.shared, normed2[t], m.sharedExpertIntermediateSize!);
          const g = 1 / (1 + Math.exp(-matvec(w.get(names.sharedGate!), normed2[t], 1)[0]));
          for (let i = 0; i < D; i++) out[i] += g * y[i];
        }
        return x.map((val, i) => val + out[i]);
      });
    } else {
      const hidden: Float64Array[] = [];
      opts.taps?.mlpHidden.push(hidden);
      xs = xs.map((x, t) => {
        const y = swiglu(w, n.mlp, normed2[t], s.intermediateSize, (h) => hidden.push(h));
        return x.map((val, i) => val + y[i]);
      });
    }
  }
  const head = w.get(s.tieEmbeddings ? EMBED : LM_HEAD);
  return xs.map((x) => matvec(head, rmsnorm(x, w.get(FINAL_NORM), s.rmsNormEps), s.vocabSize));
}

const argmax = (v: Float64Array) => v.reduce((bi, x, i) => (x > v[bi] ? i : bi), 0);

function greedy(w: Weights, prompt: number[], steps: number): number[] {
  const ids = [...prompt];
  const out: number[] = [];
  for (let i = 0; i < steps; i++) {
    const logits = forward(w, ids);
    const next = argmax(logits[logits.length - 1]);
    out.push(next);
    ids.push(next);
  }
  return out;
}

function spearman(a: number[], b: number[]): number {
  const rank = (v: number[]) => {
    const r = new Array(v.length);
    [...v.keys()].sort((i, j) => v[i] - v[j]).forEach((i, k) => (r[i] = k));
    return r as number[];
  };
  const ra = rank(a);
  const rb = rank(b);
  const n = a.length;
  const d2 = ra.reduce((s, r, i) => s + (r - rb[i]) ** 2, 0);
  return 1 - (6 * d2) / (n * (n * n - 1));
}

// ---------------------------------------------------------------- tests

describe('reference forward (the yardstick for the checks below)', () => {
  it('reproduces stories260K greedy ids from BOS', async () => {
    const ref = JSON.parse(readFileSync(path.join(STORIES, 'reference.json'), 'utf8'));
    const w = await loadWeights(STORIES);
    const got = greedy(w, ref.prompt_ids, 12);
    expect(got).toEqual(ref.greedy_ids.slice(0, 12));
  });
});

describe('python-style JSON', () => {
  it('writes floats as Python repr does', () => {
    // Expected strings are Python's repr() of the same floats.
    expect([1e-5, 1e-6, 0.02, 10000, 1000000, 0, 0.001, 1.5e-4, 1e16, 123.25].map(pyFloatRepr)).toEqual([
      '1e-05', '1e-06', '0.02', '10000.0', '1000000.0', '0.0', '0.001', '0.00015', '1e+16', '123.25',
    ]);
    expect(pyJson({ b: [pyFloat(1)], a: null, c: [] })).toBe('{\n  "a": null,\n  "b": [\n    1.0\n  ],\n  "c": []\n}\n');
  });
});

describe('generateFixture', () => {
  it.each(ARCHS)('%s: HF config keys, every expected tensor, readable', async (arch) => {
    const { dir, truth, spec } = await generateFixture(path.join(tmp, `a-${arch}`), { arch });
    const cfg = JSON.parse(readFileSync(path.join(dir, 'config.json'), 'utf8'));
    expect(cfg.model_type).toBe(arch);
    expect(cfg.num_key_value_heads).toBeLessThan(cfg.num_attention_heads); // GQA
    const keys: Record<FixtureArch, string[]> = {
      llama: ['attention_bias', 'mlp_bias', 'pretraining_tp', 'rope_scaling', 'head_dim'],
      mistral: ['sliding_window', 'head_dim'],
      qwen2: ['use_sliding_window', 'sliding_window', 'max_window_layers'],
      mixtral: ['num_local_experts', 'num_experts_per_tok', 'router_aux_loss_coef', 'output_router_logits'],
      qwen2_moe: ['num_experts', 'num_experts_per_tok', 'moe_intermediate_size', 'shared_expert_intermediate_size', 'norm_topk_prob', 'decoder_sparse_step', 'mlp_only_layers'],
    };
    for (const k of keys[arch]) expect(cfg).toHaveProperty(k);
    expect(readFileSync(path.join(dir, 'config.json'), 'utf8')).toMatch(/"rope_theta": \d+\.0,/);
    const ck = await openCheckpoint(dir);
    // The spec as read back, checked against the raw config.json keys (not normalizeConfig against itself).
    expect([ck.spec.hiddenSize, ck.spec.numLayers, ck.spec.numHeads, ck.spec.numKvHeads, ck.spec.vocabSize]).toEqual([
      cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.vocab_size,
    ]);
    expect(ck.spec.headDim).toBe((cfg.hidden_size as number) / (cfg.num_attention_heads as number));
    if (arch === 'mixtral') expect([ck.spec.moe?.numExperts, ck.spec.moe?.topK]).toEqual([cfg.num_local_experts, cfg.num_experts_per_tok]);
    if (arch === 'qwen2_moe') {
      expect([ck.spec.moe?.numExperts, ck.spec.moe?.topK, ck.spec.moe?.expertIntermediateSize]).toEqual([cfg.num_experts, cfg.num_experts_per_tok, cfg.moe_intermediate_size]);
    }
    expect(spec.qkvBias).toBe(arch === 'qwen2' || arch === 'qwen2_moe');
    if (arch === 'qwen2') expect(ck.meta('model.layers.0.self_attn.k_proj.bias')?.shape).toEqual([spec.numKvHeads * spec.headDim]);
    expect(ck.assets.tokenizer).toBeDefined();
    expect(ck.assets.generationConfig).toBeDefined();
    await ck.close();
    expect(JSON.parse(readFileSync(path.join(dir, 'fixture-truth.json'), 'utf8'))).toEqual(truth);
  });

  it('is deterministic: same seed, same bytes; another seed, other weights', async () => {
    const a = await generateFixture(path.join(tmp, 'det-a'), { arch: 'qwen2_moe', seed: 7 });
    const b = await generateFixture(path.join(tmp, 'det-b'), { arch: 'qwen2_moe', seed: 7 });
    const c = await generateFixture(path.join(tmp, 'det-c'), { arch: 'qwen2_moe', seed: 8 });
    expect(dirHashes(a.dir)).toEqual(dirHashes(b.dir));
    expect(dirHashes(c.dir)['model.safetensors']).not.toBe(dirHashes(a.dir)['model.safetensors']);
  });

  it('shards as HF does, with the same values as the single file; BF16/F16 are the rounded F32 values', async () => {
    const single = await generateFixture(path.join(tmp, 'sh-1'), { arch: 'mixtral', seed: 3 });
    const sharded = await generateFixture(path.join(tmp, 'sh-3'), { arch: 'mixtral', seed: 3, shards: 3, dtype: 'BF16' });
    const half = await generateFixture(path.join(tmp, 'sh-h'), { arch: 'mixtral', seed: 3, dtype: 'F16' });
    expect(sharded.truth.files).toEqual(['model-00001-of-00003.safetensors', 'model-00002-of-00003.safetensors', 'model-00003-of-00003.safetensors']);
    const index = JSON.parse(readFileSync(path.join(sharded.dir, 'model.safetensors.index.json'), 'utf8'));
    const a = await openCheckpoint(single.dir);
    const b = await openCheckpoint(sharded.dir);
    const h = await openCheckpoint(half.dir);
    expect(Object.keys(index.weight_map).sort()).toEqual(a.tensors.map((t) => t.name).sort());
    expect(new Set(Object.values(index.weight_map)).size).toBe(3);
    let total = 0;
    for (const t of a.tensors) {
      total += b.info(t.name).byteLength;
      expect(path.basename(b.info(t.name).file)).toBe(index.weight_map[t.name]);
      const f = await a.readF32(t.name);
      const bf = await b.readF32(t.name);
      const hf = await h.readF32(t.name);
      for (let i = 0; i < f.length; i += 7) {
        expect(bf[i]).toBe(bf16ToF32(f32ToBf16(f[i])));
        expect(hf[i]).toBe(f16ToF32(f32ToF16(f[i])));
      }
    }
    expect(index.metadata.total_size).toBe(total);
    await Promise.all([a.close(), b.close(), h.close()]);
  });

  it('the fixture CLI writes a sharded BF16 checkpoint and refuses an unknown arch (exit 2)', async () => {
    ensureBuilt();
    const cli = path.resolve(__dirname, '../dist/fixtures/cli.js');
    const out = path.join(tmp, 'cli-q');
    const ok = spawnSync('node', [cli, '--arch', 'qwen2', '--preset', 'tiny', '--out', out, '--dtype', 'BF16', '--shards', '2', '--seed', '4'], { encoding: 'utf8' });
    expect(ok.status).toBe(0);
    expect(readdirSync(out).sort()).toEqual([
      'config.json', 'fixture-truth.json', 'generation_config.json', 'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors',
      'model.safetensors.index.json', 'tokenizer.json', 'tokenizer_config.json',
    ]);
    const same = await generateFixture(path.join(tmp, 'cli-q-api'), { arch: 'qwen2', dtype: 'BF16', shards: 2, seed: 4 });
    expect(dirHashes(out)).toEqual(dirHashes(same.dir));
    const bad = spawnSync('node', [cli, '--arch', 'gpt2', '--out', out], { encoding: 'utf8' });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/--arch must be one of llama, mistral, qwen2, mixtral, qwen2_moe/);
  });

  it('presets: llama-100M has ≈100M parameters, bf16-1GiB is ≥ 1 GiB', () => {
    const params = (d: Partial<typeof FIXTURE_PRESETS.tiny>) => {
      const D = d.hiddenSize!;
      const kv = (D / d.numHeads!) * d.numKvHeads!;
      return 2 * d.vocabSize! * D + d.numLayers! * (2 * D * D + 2 * D * kv + 3 * D * d.intermediateSize! + 2 * D) + D;
    };
    expect(params(FIXTURE_PRESETS['llama-100M']) / 1e6).toBeCloseTo(100, -1);
    expect(params(FIXTURE_PRESETS['llama-30M']) / 1e6).toBeCloseTo(30, -1);
    expect(params(FIXTURE_PRESETS['bf16-1GiB']) * 2).toBeGreaterThanOrEqual(2 ** 30);
  });
});

describe('planted structure is in the function, and the model is not degenerate', () => {
  const prompts = [
    [5, 100, 37, 260, 301, 44, 9, 480, 123, 77, 300, 12],
    [400, 2, 2, 18, 350, 351, 352, 90, 91, 64, 65, 66],
  ];

  async function fixture(arch: FixtureArch, extra: { tieEmbeddings?: boolean } = {}) {
    const { dir, truth } = await generateFixture(path.join(tmp, `p-${arch}-${extra.tieEmbeddings ? 't' : 'u'}`), { arch, seed: 11, ...extra });
    return { w: await loadWeights(dir), truth };
  }

  function taps(): Taps {
    return { attnIn: [], mlpHidden: [], routed: [] };
  }

  it.each([
    ['llama', false],
    ['llama', true],
    ['qwen2', false],
    ['mixtral', false],
    ['qwen2_moe', false],
  ] as [FixtureArch, boolean][])('%s (tied=%s): greedy output varies', async (arch, tie) => {
    const { w } = await fixture(arch, { tieEmbeddings: tie });
    const all = new Set<number>();
    for (const p of prompts) {
      const out = greedy(w, p.slice(0, 4), 10);
      // Not one token repeated from step 1 (random nets may still fall into short loops later).
      expect(new Set(out).size).toBeGreaterThanOrEqual(2);
      out.forEach((t) => all.add(t));
    }
    expect(all.size).toBeGreaterThanOrEqual(6);
  });

  it('massive channels: the inputs of q/k/v have exactly the planted outlier channels, 30-200x the median channel', async () => {
    const { w, truth } = await fixture('llama');
    const tp = taps();
    forward(w, prompts[0], { taps: tp });
    for (const layer of tp.attnIn) {
      const D = layer[0].length;
      const meanAbs = Array.from({ length: D }, (_, c) => layer.reduce((a, x) => a + Math.abs(x[c]), 0) / layer.length);
      const sorted = [...meanAbs].sort((a, b) => a - b);
      const median = sorted[D >> 1];
      const top = [...meanAbs.keys()].sort((a, b) => meanAbs[b] - meanAbs[a]).slice(0, truth.massiveChannels.length).sort((a, b) => a - b);
      expect(top).toEqual(truth.massiveChannels);
      for (const c of truth.massiveChannels) {
        expect(meanAbs[c] / median).toBeGreaterThan(30);
        expect(meanAbs[c] / median).toBeLessThan(200);
      }
    }
  });

  it('unit importance: ablating the top KV group changes logits far more than the bottom one; neuron contributions follow the planted ranking', async () => {
    const { w, truth } = await fixture('llama');
    const base = forward(w, prompts[1]);
    const change = (l: number, u: number) => {
      const ab = forward(w, prompts[1], { ablateUnit: [l, u] });
      let s = 0;
      ab.forEach((row, t) => row.forEach((v, i) => (s += (v - base[t][i]) ** 2)));
      return Math.sqrt(s);
    };
    for (let l = 0; l < truth.dims.numLayers; l++) {
      const order = truth.heads[l].order;
      expect(change(l, order[0])).toBeGreaterThan(10 * change(l, order[order.length - 1]));
    }
    const tp = taps();
    forward(w, [...prompts[0], ...prompts[1]], { taps: tp });
    for (let l = 0; l < truth.dims.numLayers; l++) {
      const down = w.get(layerNames(l).mlp.down);
      const I = truth.dims.intermediateSize;
      const D = truth.dims.hiddenSize;
      // Contribution of neuron j to the residual: mean |h_j| × ‖down[:, j]‖.
      const contrib = Array.from({ length: I }, (_, j) => {
        const act = tp.mlpHidden[l].reduce((a, h) => a + Math.abs(h[j]), 0) / tp.mlpHidden[l].length;
        let n2 = 0;
        for (let i = 0; i < D; i++) n2 += down[i * I + j] ** 2;
        return act * Math.sqrt(n2);
      });
      expect(spearman(contrib, truth.neurons[l]!.scale)).toBeGreaterThan(0.85);
      // The assignment is random, not monotone in the index.
      expect(Math.abs(spearman(truth.neurons[l]!.scale, [...Array(I).keys()]))).toBeLessThan(0.5);
    }
  });

  it.each(['mixtral', 'qwen2_moe'] as FixtureArch[])('%s: hot experts take most routing slots; sensitive experts quantize badly', async (arch) => {
    const { w, truth } = await fixture(arch);
    const tp = taps();
    for (const p of prompts) forward(w, p, { taps: tp });
    const E = truth.dims.numExperts;
    for (let l = 0; l < truth.dims.numLayers; l++) {
      const ex = truth.experts[l] as NonNullable<FixtureTruth['experts'][number]>;
      const counts = new Array(E).fill(0);
      for (let p = 0; p < prompts.length; p++) for (const top of tp.routed[l + p * truth.dims.numLayers]) for (const e of top) counts[e]++;
      const slots = counts.reduce((a, b) => a + b, 0);
      const tokens = slots / truth.dims.topK;
      const hotShare = ex.hot.reduce((a, e) => a + counts[e], 0) / slots;
      // Uniform routing would give hot.length / E of the slots; each hot expert serves almost every token.
      expect(hotShare).toBeGreaterThan((1.6 * ex.hot.length) / E);
      for (const e of ex.hot) expect(counts[e] / tokens).toBeGreaterThan(0.85);
      // 4-bit absmax quantization in blocks of 32: the error of sensitive experts ≫ the others'.
      const q4err = (e: number) => {
        const Wt = w.get(moeNames(w.spec, l).experts[e].down);
        let err = 0;
        for (let b = 0; b < Wt.length; b += 32) {
          const blk = Wt.subarray(b, b + 32);
          const amax = Math.max(...blk.map(Math.abs));
          const d = amax / 7;
          for (const v of blk) {
            const q = Math.max(-8, Math.min(7, Math.round(v / d))) * d;
            err += (v - q) ** 2;
          }
        }
        return err / Wt.length;
      };
      const errs = Array.from({ length: E }, (_, e) => q4err(e));
      const sens = Math.min(...ex.sensitive.map((e) => errs[e]));
      const others = Math.max(...errs.filter((_, e) => !ex.sensitive.includes(e)));
      expect(sens).toBeGreaterThan(3 * others);
    }
  });
});
