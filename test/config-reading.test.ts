/**
 * config.json as transformers writes it, old keys and new: every real config under ../shared
 * normalizes; the transformers-5.17-written llama3-rope and mistral-swa checkpoints reproduce
 * transformers' own logits on onnxruntime, the TS runtime and the cuda decoder graph (llama3-rope in
 * llama.cpp too); every rope type's frequencies equal a
 * float64 transcription of transformers' modeling_rope_utils.py, in both config forms; and what
 * llmc cannot implement is refused with one line naming it.
 */
import { existsSync, promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkpointLogits, referenceLogits, worstRowError } from './numeric.js';
import { generateFixture } from '../fixtures/generate.js';
import { normalizeConfig, openCheckpoint } from '../src/core/checkpoint/index.js';
import { ropeFrequencies } from '../src/core/ir/rope.js';
import { Engine } from '../src/exec/engine/index.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { compileTs } from './ts-artifact.js';
import { compile } from '../src/app/compile/compile.js';
import { silentProgress } from '../src/core/util/progress.js';
import { OnnxDecoder } from '../src/exec/engine/decoder-dir.js';
import { compileGguf, llamaLogits } from './gguf-helpers.js';
import { llmcInProcess } from './cli.js';

type Json = Record<string, unknown>;
const SHARED = path.resolve(__dirname, '../../shared/models');
const HAVE_SHARED = existsSync(SHARED);
if (!HAVE_SHARED) console.log(`config-reading: ${SHARED} is absent; the tests on transformers-written checkpoints are skipped`);

let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-config-reading-'));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

const readJson = (f: string) => JSON.parse(readFileSync(f, 'utf8')) as Json;

describe.skipIf(!HAVE_SHARED)('configs written by transformers 5.17', () => {
  const dirs = ['archs/llama3-rope', 'archs/mistral-swa', 'trained/dense-28M', 'trained/draft-5M', 'trained/moe-8x', 'stories260K'];
  it.each(dirs)('%s normalizes, rotary settings read from whichever form it uses', (d) => {
    const file = path.join(SHARED, d, 'config.json');
    const cfg = readJson(file);
    const spec = normalizeConfig(cfg, file);
    const rp = (cfg.rope_parameters ?? {}) as Json;
    expect(spec.ropeTheta).toBe(rp.rope_theta ?? cfg.rope_theta);
    expect(spec.torchDtype).toBe(cfg.dtype ?? cfg.torch_dtype);
    expect(spec.headDim).toBe((cfg.head_dim as number | null) ?? (cfg.hidden_size as number) / (cfg.num_attention_heads as number));
  });

  it('llama3-rope: rope_parameters read as written (theta 500000, llama3 factors)', () => {
    const file = path.join(SHARED, 'archs/llama3-rope/config.json');
    expect(normalizeConfig(readJson(file), file)).toMatchObject({
      ropeTheta: 500000,
      ropeScaling: { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 64 },
    });
  });

  it('mistral-swa: sliding_window 8 on every layer', () => {
    const file = path.join(SHARED, 'archs/mistral-swa/config.json');
    expect(normalizeConfig(readJson(file), file)).toMatchObject({ slidingWindow: 8, slidingLayers: null });
  });
});

describe.skipIf(!HAVE_SHARED).each(['llama3-rope', 'mistral-swa'])("%s reproduces transformers' reference logits", (name) => {
  const dir = path.join(SHARED, 'archs', name);
  let ids: number[];
  let ref: { data: Float32Array; shape: number[] };
  beforeAll(() => {
    ids = (readJson(path.join(dir, 'reference.json')).prompt_ids as number[]).slice();
    ref = referenceLogits(path.join(dir, 'reference_logits.safetensors'));
    expect(ref.shape[0]).toBe(ids.length);
  });

  it('onnxruntime, every position within 1e-4 relative', async () => {
    const ck = await openCheckpoint(dir);
    const engine = await Engine.open(ck, { threads: 1 });
    try {
      expect(worstRowError(await engine.logits(ids), ref.data, ref.shape[1])).toBeLessThan(1e-4);
    } finally {
      await engine.close();
      await ck.close();
    }
  });

  it('the TS runtime (F32 artifact), every position within 1e-4 relative', async () => {
    const out = path.join(tmp, `ts-${name}`);
    await compileTs(dir, out);
    const model = await loadDir(out);
    expect(worstRowError(model.forward(ids), ref.data, ref.shape[1])).toBeLessThan(1e-4);
  });

  it('the cuda target\'s fp32 decoder graph (rope tables baked in, gathered by position_ids), within 1e-4', async () => {
    const out = path.join(tmp, `cuda-${name}`);
    const source = await openCheckpoint(dir);
    try {
      await compile({ source, target: 'cuda', outDir: out, passes: [], quant: 'fp32', progress: silentProgress, note: () => {} });
    } finally {
      await source.close();
    }
    const d = await OnnxDecoder.open(path.join(out, 'onnx/model.onnx'));
    try {
      expect(worstRowError(await d.logits(ids), ref.data, ref.shape[1])).toBeLessThan(1e-4);
    } finally {
      await d.close();
    }
  });
});

describe.skipIf(!HAVE_SHARED)('llama3-rope in llama.cpp (F32 GGUF, rope_freqs.weight carries the llama3 factors)', () => {
  // llama.cpp keeps its KV cache in f16: ~1e-3 relative already at position 0, where no rotation
  // happens (mistral-swa's first 8 positions show the same). Ignoring the llama3 factors or the
  // theta of rope_parameters gives 0.28.
  it("every position's logits within 3e-3 relative of transformers'", async () => {
    const dir = path.join(SHARED, 'archs/llama3-rope');
    const ids = readJson(path.join(dir, 'reference.json')).prompt_ids as number[];
    const ref = referenceLogits(path.join(dir, 'reference_logits.safetensors'));
    const V = ref.shape[1];
    const { file } = await compileGguf(dir, path.join(tmp, 'gguf-llama3'), { quant: 'F32' });
    const rows = await llamaLogits(file, ids, V);
    const got = new Float32Array(ids.length * V);
    rows.forEach((r, t) => got.set(r, t * V));
    expect(worstRowError(got, ref.data, V)).toBeLessThan(3e-3);
  });
});

describe('the rope types GGUF takes reach llama.cpp as transformers computes them', () => {
  it.each([
    ['linear', { rope_scaling: { type: 'linear', factor: 4 } }],
    ['yarn', { rope_parameters: { rope_type: 'yarn', rope_theta: 10000, factor: 4, original_max_position_embeddings: 16 } }],
  ] as [string, Json][])('%s: llama.cpp within 3e-3 of onnxruntime; without the scaling 10× further', async (type, patch) => {
    const dir = path.join(tmp, `gguf-rope-${type}`);
    await generateFixture(dir, { arch: 'llama', seed: 5, tokenizer: 'none' });
    const file = path.join(dir, 'config.json');
    const plain = readJson(file);
    const ids = Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % 500);
    const engineLogits = () => checkpointLogits(dir, ids);
    const unscaled = await engineLogits();
    const { rope_theta: _t, rope_scaling: _s, ...rest } = plain;
    await fsp.writeFile(file, JSON.stringify({ ...rest, ...(patch.rope_parameters ? {} : { rope_theta: plain.rope_theta }), ...patch }));
    const want = await engineLogits();
    const V = plain.vocab_size as number;
    const { file: gguf } = await compileGguf(dir, path.join(tmp, `gguf-rope-${type}-out`), { quant: 'F32' });
    const got = new Float32Array(ids.length * V);
    (await llamaLogits(gguf, ids, V)).forEach((r, t) => got.set(r, t * V));
    const err = worstRowError(got, want, V);
    expect(err).toBeLessThan(3e-3);
    expect(worstRowError(unscaled, want, V)).toBeGreaterThan(10 * err);
  });
});

// ---------------------------------------------------------------------------------------------
// Rope frequencies against a float64 transcription of transformers 5.17's modeling_rope_utils.py.

const HEAD_DIM = 16;
const MAX_POS = 512;

/** transformers' _compute_*_parameters (standardized rope_parameters `p`), in float64. */
function hfRope(p: Json, seqLen: number): { inv: number[]; attention: number } {
  const dim = HEAD_DIM;
  const base0 = p.rope_theta as number;
  const arange = Array.from({ length: dim / 2 }, (_, i) => 2 * i);
  const plain = (base: number) => arange.map((j) => 1 / base ** (j / dim));
  const type = (p.rope_type as string) ?? 'default';
  const orig = (p.original_max_position_embeddings as number) ?? MAX_POS;
  if (type === 'default') return { inv: plain(base0), attention: 1 };
  if (type === 'linear') return { inv: plain(base0).map((f) => f / (p.factor as number)), attention: 1 };
  if (type === 'dynamic') {
    const f = p.factor as number;
    const L = Math.max(seqLen, MAX_POS);
    return { inv: plain(base0 * ((f * L) / MAX_POS - (f - 1)) ** (dim / (dim - 2))), attention: 1 };
  }
  if (type === 'llama3') {
    const f = p.factor as number;
    const lo = p.low_freq_factor as number;
    const hi = p.high_freq_factor as number;
    const inv = plain(base0).map((x) => {
      const wl = (2 * Math.PI) / x;
      const llama = wl > orig / lo ? x / f : x;
      const smooth = (orig / wl - lo) / (hi - lo);
      const medium = !(wl < orig / hi) && !(wl > orig / lo);
      return medium ? ((1 - smooth) * llama) / f + smooth * llama : llama;
    });
    return { inv, attention: 1 };
  }
  if (type === 'yarn') {
    const factor = (p.factor as number | null) ?? MAX_POS / orig;
    const getMscale = (s: number, m = 1) => (s <= 1 ? 1 : 0.1 * m * Math.log(s) + 1);
    let attention = p.attention_factor as number | undefined;
    if (attention === undefined) attention = p.mscale && p.mscale_all_dim ? getMscale(factor, p.mscale as number) / getMscale(factor, p.mscale_all_dim as number) : getMscale(factor);
    const betaFast = (p.beta_fast as number) || 32;
    const betaSlow = (p.beta_slow as number) || 1;
    const corr = (rot: number) => (dim * Math.log(orig / (rot * 2 * Math.PI))) / (2 * Math.log(base0));
    const truncate = 'truncate' in p ? Boolean(p.truncate) : true;
    let low = corr(betaFast);
    let high = corr(betaSlow);
    if (truncate) [low, high] = [Math.floor(low), Math.ceil(high)];
    [low, high] = [Math.max(low, 0), Math.min(high, dim - 1)];
    if (low === high) high += 0.001;
    const pos = arange.map((j) => base0 ** (j / dim));
    const inv = pos.map((pf, i) => {
      const extra = 1 - Math.min(Math.max((i - low) / (high - low), 0), 1);
      return (1 / (factor * pf)) * (1 - extra) + (1 / pf) * extra;
    });
    return { inv, attention };
  }
  if (type === 'longrope') {
    const factor = (p.factor as number | undefined) ?? MAX_POS / orig;
    const attention = (p.attention_factor as number | undefined) ?? (factor <= 1 ? 1 : Math.sqrt(1 + Math.log(factor) / Math.log(orig)));
    const ext = (seqLen > orig ? p.long_factor : p.short_factor) as number[];
    return { inv: arange.map((j, i) => 1 / (ext[i] * base0 ** (j / dim))), attention };
  }
  throw new Error(`no reference for ${type}`);
}

const BASE_CONFIG: Json = {
  architectures: ['LlamaForCausalLM'],
  model_type: 'llama',
  hidden_size: 64,
  intermediate_size: 128,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: HEAD_DIM,
  vocab_size: 512,
  max_position_embeddings: MAX_POS,
  rms_norm_eps: 1e-6,
};

const short = [1, 1.1, 1.3, 1.7, 2.2, 3, 4.5, 6];
const long = [1, 1.5, 2.5, 4, 6, 9, 14, 20];
/** Each case: rope parameters as transformers >= 5 writes them (rope_theta inside), and sequence lengths to check. */
const ROPE_CASES: { name: string; p: Json; seqLens: number[] }[] = [
  { name: 'default', p: { rope_type: 'default', rope_theta: 1e6 }, seqLens: [10] },
  { name: 'linear', p: { rope_type: 'linear', rope_theta: 10000, factor: 4 }, seqLens: [10] },
  { name: 'dynamic', p: { rope_type: 'dynamic', rope_theta: 10000, factor: 2 }, seqLens: [100, 512, 1000] },
  { name: 'yarn (defaults)', p: { rope_type: 'yarn', rope_theta: 10000, factor: 4, original_max_position_embeddings: 128 }, seqLens: [10] },
  {
    name: 'yarn (attention_factor, betas, truncate false)',
    p: { rope_type: 'yarn', rope_theta: 50000, factor: 8, original_max_position_embeddings: 64, attention_factor: 1.3, beta_fast: 16, beta_slow: 2, truncate: false },
    seqLens: [10],
  },
  { name: 'yarn (mscale / mscale_all_dim)', p: { rope_type: 'yarn', rope_theta: 10000, factor: 40, original_max_position_embeddings: 128, mscale: 0.707, mscale_all_dim: 1 }, seqLens: [10] },
  { name: 'yarn (factor null)', p: { rope_type: 'yarn', rope_theta: 10000, factor: null, original_max_position_embeddings: 128 }, seqLens: [10] },
  { name: 'longrope', p: { rope_type: 'longrope', rope_theta: 10000, short_factor: short, long_factor: long, original_max_position_embeddings: 128 }, seqLens: [100, 128, 129, 400] },
  {
    name: 'longrope (factor, attention_factor)',
    p: { rope_type: 'longrope', rope_theta: 10000, short_factor: short, long_factor: long, original_max_position_embeddings: 128, factor: 2, attention_factor: 1.2 },
    seqLens: [100, 400],
  },
  { name: 'llama3', p: { rope_type: 'llama3', rope_theta: 500000, factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 64 }, seqLens: [10] },
];

/** The same settings in the older form: top-level rope_theta, rope_scaling with `type`. */
function oldForm(p: Json): Json {
  const { rope_theta, rope_type, ...rest } = p;
  return { ...BASE_CONFIG, rope_theta, rope_scaling: rope_type === 'default' ? null : { type: rope_type, ...rest } };
}

describe('rope frequencies equal transformers\' formulas (float64)', () => {
  it.each(ROPE_CASES)('$name', ({ p, seqLens }) => {
    const fresh = normalizeConfig({ ...BASE_CONFIG, rope_parameters: p }, 'config.json');
    const old = normalizeConfig(oldForm(p), 'config.json');
    expect({ theta: old.ropeTheta, scaling: old.ropeScaling }).toEqual({ theta: fresh.ropeTheta, scaling: fresh.ropeScaling });
    for (const L of seqLens) {
      const want = hfRope(p, L);
      const got = ropeFrequencies(fresh, L);
      expect(got.attentionScaling).toBeCloseTo(want.attention, 12);
      want.inv.forEach((f, i) => expect(Math.abs(got.invFreq[i] - f) / f).toBeLessThan(1e-12));
    }
  });

  it('the cases differ from one another (a reader that ignored the scaling would fail above)', () => {
    const plain = hfRope({ rope_type: 'default', rope_theta: 10000 }, 10).inv;
    for (const c of ROPE_CASES.slice(1)) {
      const r = hfRope(c.p, c.seqLens[c.seqLens.length - 1]);
      expect(r.attention !== 1 || r.inv.some((f, i) => Math.abs(f - plain[i]) > 1e-9 * plain[i])).toBe(true);
    }
  });

  it('mixtral without rope_theta takes transformers\' default_theta 1e6; llama 1e4', () => {
    const mixtral = { ...BASE_CONFIG, model_type: 'mixtral', architectures: ['MixtralForCausalLM'], num_local_experts: 4, num_experts_per_tok: 2 };
    expect(normalizeConfig(mixtral, 'config.json').ropeTheta).toBe(1e6);
    expect(normalizeConfig(BASE_CONFIG, 'config.json').ropeTheta).toBe(1e4);
  });

  it('top-level original_max_position_embeddings (Phi3 style) is the one transformers uses', () => {
    const spec = normalizeConfig({ ...BASE_CONFIG, original_max_position_embeddings: 256, rope_parameters: { rope_type: 'yarn', rope_theta: 1e4, factor: 2 } }, 'config.json');
    expect(spec.ropeScaling).toMatchObject({ type: 'yarn', originalMaxPositions: 256 });
  });
});

describe('dtype, layer_types and sliding windows as each transformers class reads them', () => {
  const qwen2: Json = { ...BASE_CONFIG, model_type: 'qwen2', architectures: ['Qwen2ForCausalLM'], num_hidden_layers: 4, sliding_window: 4, max_window_layers: 2 };
  const moe: Json = {
    ...qwen2,
    model_type: 'qwen2_moe',
    architectures: ['Qwen2MoeForCausalLM'],
    num_experts: 4,
    num_experts_per_tok: 2,
    moe_intermediate_size: 32,
    shared_expert_intermediate_size: 0,
    max_window_layers: 3,
  };
  const cases: [string, Json, { slidingWindow: number | null; slidingLayers: number[] | null }][] = [
    ['qwen2 without use_sliding_window: none (transformers defaults it to false)', qwen2, { slidingWindow: null, slidingLayers: null }],
    ['qwen2 use_sliding_window: layers >= max_window_layers', { ...qwen2, use_sliding_window: true }, { slidingWindow: 4, slidingLayers: [2, 3] }],
    ['qwen2 explicit layer_types', { ...qwen2, use_sliding_window: true, layer_types: ['sliding_attention', 'full_attention', 'full_attention', 'sliding_attention'] }, { slidingWindow: 4, slidingLayers: [0, 3] }],
    ['qwen2 layer_types all full', { ...qwen2, use_sliding_window: true, layer_types: Array(4).fill('full_attention') }, { slidingWindow: null, slidingLayers: null }],
    ['qwen2_moe use_sliding_window: even layers below max_window_layers', { ...moe, use_sliding_window: true }, { slidingWindow: 4, slidingLayers: [0, 2] }],
    ['mistral sliding_window: every layer', { ...BASE_CONFIG, model_type: 'mistral', architectures: ['MistralForCausalLM'], sliding_window: 8 }, { slidingWindow: 8, slidingLayers: null }],
    ['llama layer_types all full', { ...BASE_CONFIG, layer_types: ['full_attention', 'full_attention'] }, { slidingWindow: null, slidingLayers: null }],
  ];
  it.each(cases)('%s', (_n, cfg, want) => {
    expect(normalizeConfig(cfg, 'config.json')).toMatchObject(want);
  });

  it('dtype wins over torch_dtype, as in transformers', () => {
    expect(normalizeConfig({ ...BASE_CONFIG, dtype: 'bfloat16', torch_dtype: 'float32' }, 'config.json').torchDtype).toBe('bfloat16');
    expect(normalizeConfig({ ...BASE_CONFIG, torch_dtype: 'float16' }, 'config.json').torchDtype).toBe('float16');
  });

  it('qwen2_moe qkv_bias: false drops the q/k/v biases; mistral never has them', () => {
    expect(normalizeConfig({ ...moe, qkv_bias: false }, 'config.json').qkvBias).toBe(false);
    expect(normalizeConfig(moe, 'config.json').qkvBias).toBe(true);
    expect(normalizeConfig({ ...BASE_CONFIG, model_type: 'mistral', architectures: ['MistralForCausalLM'] }, 'config.json').qkvBias).toBe(false);
  });
});

describe('what llmc cannot implement is refused with one line naming it (CLI, exit 1)', () => {
  let base: string;
  beforeAll(async () => {
    base = (await generateFixture(path.join(tmp, 'base'), { arch: 'llama', tokenizer: 'none' })).dir;
  });

  /** A copy of the fixture with config.json patched (undefined deletes a key; null is written as null). */
  async function patched(name: string, patch: Json): Promise<{ dir: string; file: string }> {
    const dir = path.join(tmp, name);
    await fsp.cp(base, dir, { recursive: true });
    const file = path.join(dir, 'config.json');
    const cfg = { ...readJson(file), ...patch };
    for (const [k, v] of Object.entries(patch)) if (v === undefined) delete cfg[k];
    await fsp.writeFile(file, JSON.stringify(cfg));
    return { dir, file };
  }

  const cases: [string, Json, RegExp][] = [
    ['unknown rope_type', { rope_theta: undefined, rope_scaling: undefined, rope_parameters: { rope_type: 'su', rope_theta: 10000 } }, /unsupported rope type "su" \("rope_parameters\.rope_type"\)/],
    ['a math-changing key llmc does not know', { attn_logit_softcapping: 50 }, /key "attn_logit_softcapping" \(50\) is not understood by llmc's llama reader; it may change the model's math/],
    ['residual_multiplier', { residual_multiplier: 0.22 }, /key "residual_multiplier" \(0\.22\) is not understood/],
    ['old and new rope_theta disagree', { rope_theta: 10000, rope_parameters: { rope_type: 'default', rope_theta: 500000 } }, /"rope_parameters\.rope_theta" \(500000\) and "rope_theta" \(10000\) disagree/],
    ['rope_scaling and rope_parameters disagree', { rope_scaling: { type: 'linear', factor: 2 }, rope_parameters: { rope_type: 'linear', factor: 4 } }, /"rope_parameters\.factor" \(4\) and "rope_scaling\.factor" \(2\) disagree/],
    ['a rope key its type does not take', { rope_scaling: { rope_type: 'linear', factor: 2, beta_fast: 8 } }, /"rope_scaling\.beta_fast" \(8\) is not a parameter of rope type "linear"/],
    ['llama3 without its factors', { rope_scaling: { rope_type: 'llama3', factor: 8 } }, /rope type "llama3" needs "rope_scaling\.low_freq_factor"/],
    ['partial_rotary_factor', { partial_rotary_factor: 0.5 }, /"partial_rotary_factor" 0\.5 rotates part of each head/],
    ['hidden_act', { hidden_act: 'gelu' }, /unsupported hidden_act "gelu"/],
    // The fixture has 2 layers: a list of another length is refused before its kinds are read.
    ['sliding layers on llama', { layer_types: Array(2).fill('sliding_attention') }, /"layer_types" has sliding_attention layers, which transformers' Llama does not implement/],
    ['layer_types of the wrong length', { layer_types: Array(4).fill('sliding_attention') }, /"layer_types" must list "full_attention" or "sliding_attention" for each of the 2 layers/],
    ['is_encoder_decoder', { is_encoder_decoder: true }, /key "is_encoder_decoder" = true is not supported/],
  ];
  it.each(cases)('%s', async (name, patch, message) => {
    const { dir, file } = await patched(name.replace(/\W+/g, '-'), patch);
    const res = await llmcInProcess('inspect', dir);
    expect(res.code).toBe(1);
    const lines = res.stderr.split('\n').filter((l) => l !== '');
    expect(lines).toHaveLength(1);
    expect(lines[0].startsWith(`llmc: ${file}: `)).toBe(true);
    expect(lines[0]).toMatch(message);
  });

  it('the same fixture without the patches loads (the refusals above are the patches\' doing), and so do unknown keys set to null', async () => {
    expect((await llmcInProcess('inspect', base)).code).toBe(0);
    const { dir } = await patched('null-keys', { attn_logit_softcapping: null, quantization_config: null });
    expect((await llmcInProcess('inspect', dir)).code).toBe(0);
  });

  const LONGROPE = { rope_scaling: { type: 'longrope', short_factor: Array(8).fill(1), long_factor: Array(8).fill(2), original_max_position_embeddings: 16 } };
  it.each([
    ['gguf', 'dynamic', { rope_scaling: { type: 'dynamic', factor: 2 } }, /rope type "dynamic".*llama\.cpp/],
    ['gguf', 'longrope', LONGROPE, /rope type "longrope".*llama\.cpp/],
    ['gguf', 'yarn', { rope_scaling: { type: 'yarn', factor: 4, attention_factor: 1.5 } }, /rope type "yarn" with attention factor 1\.5.*llama\.cpp/],
    ['tensorrt-llm', 'longrope', LONGROPE, /rope type "longrope" is not expressible in TensorRT-LLM/],
    ['cuda', 'longrope', LONGROPE, /rope type "longrope" changes its frequencies with the sequence length below max_position_embeddings/],
  ] as [string, string, Json, RegExp][])('the %s target refuses rope type %s, naming it, and writes nothing', async (target, type, patch, message) => {
    const { dir } = await patched(`${target}-${type}`, patch);
    const out = path.join(tmp, `${target}-${type}-out${target === 'gguf' ? '.gguf' : ''}`);
    const res = await llmcInProcess('compile', dir, '--target', target, '-o', out);
    expect(res.code).toBe(1);
    const lines = res.stderr.split('\n').filter((l) => l !== '');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(message);
    expect(existsSync(out)).toBe(false);
  });
});
