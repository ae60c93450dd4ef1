/**
 * The config.json of released checkpoints of the nine new families, as transformers 5.x writes them:
 * each starts from the transformers-5.17-written fixture of its family (so the key set is that of the
 * config class) with the values of the released model (model cards, transformers' configuration_*.py
 * defaults). Each must normalize with the values that matter, and the GGUF family must accept it or
 * refuse it with the one line that is true of llama.cpp. No weights are read.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { normalizeConfig, type ArchSpec } from '../src/core/arch/spec.js';
import { ARCHITECTURES } from '../src/core/arch/registry.js';
import { checkGgufRope } from '../backends/gguf/metadata.js';

type Json = Record<string, unknown>;
const ARCHS = path.resolve(__dirname, '../../shared/models/archs');
const HAVE = existsSync(ARCHS);
if (!HAVE) console.log(`real-configs: ${ARCHS} is absent; the released-model configs are skipped`);

const FULL = 'full_attention';
const SLIDING = 'sliding_attention';
const range = (n: number) => Array.from({ length: n }, (_, l) => l);

/** The fixture's config.json of `family` with the released model's values (a key set to undefined is dropped). */
function real(family: string, values: Json): Json {
  const base = JSON.parse(readFileSync(path.join(ARCHS, family, 'config.json'), 'utf8')) as Json;
  const out: Json = { ...base, ...values };
  for (const k of Object.keys(out)) if (out[k] === undefined) delete out[k];
  // Only values of keys the class writes (and the few older-form keys named here) are set.
  for (const k of Object.keys(values)) if (!(k in base) && !OLDER_KEYS.includes(k)) throw new Error(`${family} fixture has no key ${k}`);
  return out;
}
/** Keys of older transformers' configs (rope_theta + rope_scaling, gemma's pattern) that a released config.json may still carry. */
const OLDER_KEYS = ['rope_theta', 'rope_scaling', 'rope_local_base_freq', 'sliding_window_pattern', 'cache_implementation', 'max_window_layers', 'head_dim', 'hidden_act'];

function read(name: string, cfg: Json): { spec: ArchSpec; refusal: string | null } {
  const spec = normalizeConfig(cfg, `${name}/config.json`);
  return { spec, refusal: ARCHITECTURES[spec.modelType].gguf.refuse(spec) };
}

const qwen3 = (o: Json): Json =>
  real('qwen3', {
    vocab_size: 151936, max_position_embeddings: 40960, rms_norm_eps: 1e-6, head_dim: 128, num_key_value_heads: 8,
    rope_parameters: { rope_theta: 1000000, rope_type: 'default' }, tie_word_embeddings: true, use_sliding_window: false,
    sliding_window: null, bos_token_id: 151643, eos_token_id: 151645, pad_token_id: null, dtype: 'bfloat16', ...o,
  });

describe.skipIf(!HAVE)('released configs as transformers 5.x writes them', () => {
  it('Qwen3-0.6B and Qwen3-4B: head_dim 128 (not hidden / heads), tied, no window whatever max_window_layers says', () => {
    for (const [name, o] of [
      ['Qwen3-0.6B', { hidden_size: 1024, intermediate_size: 3072, num_hidden_layers: 28, num_attention_heads: 16, max_window_layers: 28, layer_types: Array(28).fill(FULL) }],
      ['Qwen3-4B', { hidden_size: 2560, intermediate_size: 9728, num_hidden_layers: 36, num_attention_heads: 32, max_window_layers: 36, layer_types: Array(36).fill(FULL) }],
    ] as [string, Json][]) {
      const { spec, refusal } = read(name, qwen3(o));
      expect(spec.headDim).toBe(128);
      expect(spec.headDim * spec.numHeads).not.toBe(spec.hiddenSize);
      expect(spec.tieEmbeddings).toBe(true);
      expect(spec.slidingWindow).toBeNull();
      expect(spec.ropeTheta).toBe(1e6);
      expect(spec.ropeScaling).toBeNull();
      expect(spec.qkNorm).toEqual({ scope: 'head', offset: 0 });
      expect(spec.eosTokenIds).toEqual([151645]);
      expect(refusal).toBeNull();
    }
    // Released config.json without layer_types (older writer): max_window_layers 28 < 36 layers, but use_sliding_window false.
    const { spec } = read('Qwen3-4B', qwen3({ hidden_size: 2560, intermediate_size: 9728, num_hidden_layers: 36, num_attention_heads: 32, max_window_layers: 36, layer_types: undefined, sliding_window: 32768 }));
    expect(spec.slidingWindow).toBeNull();
    // The model card's long-context setting: YaRN ×4 from 32768 positions (llama.cpp's defaults, so the gguf target keeps it).
    const yarn = read('Qwen3-4B-yarn', qwen3({
      hidden_size: 2560, intermediate_size: 9728, num_hidden_layers: 36, num_attention_heads: 32, max_window_layers: 36, layer_types: Array(36).fill(FULL), max_position_embeddings: 131072,
      rope_parameters: { rope_theta: 1000000, rope_type: 'yarn', factor: 4.0, original_max_position_embeddings: 32768 },
    }));
    expect(yarn.spec.ropeScaling).toEqual({ type: 'yarn', factor: 4, originalMaxPositions: 32768, betaFast: 32, betaSlow: 1, truncate: true, attentionFactor: 0.1 * Math.log(4) + 1 });
    expect(checkGgufRope(yarn.spec, ARCHITECTURES.qwen3.gguf)).toEqual(yarn.spec.ropeScaling);
  });

  it('Qwen3-30B-A3B: 128 experts top-8 renormalized, every layer sparse; llama.cpp qwen3moe loads it', () => {
    const { spec, refusal } = read('Qwen3-30B-A3B', real('qwen3_moe', {
      hidden_size: 2048, intermediate_size: 6144, moe_intermediate_size: 768, num_hidden_layers: 48, num_attention_heads: 32, num_key_value_heads: 4,
      head_dim: 128, vocab_size: 151936, max_position_embeddings: 40960, num_local_experts: 128, num_experts_per_tok: 8, norm_topk_prob: true,
      decoder_sparse_step: 1, mlp_only_layers: [], rope_parameters: { rope_theta: 1000000, rope_type: 'default' }, tie_word_embeddings: false,
      bos_token_id: 151643, eos_token_id: 151645, pad_token_id: null, dtype: 'bfloat16', max_window_layers: 48,
    }));
    expect(spec.moe).toEqual({ routing: 'softmax-topk-renorm', numExperts: 128, topK: 8, expertIntermediateSize: 768, sharedExpertIntermediateSize: null, denseLayers: [] });
    expect(spec.headDim).toBe(128);
    expect(spec.numKvHeads).toBe(4);
    expect(spec.qkNorm).toEqual({ scope: 'head', offset: 0 });
    expect(spec.slidingWindow).toBeNull();
    expect(refusal).toBeNull();
    // The released config.json (transformers 4.51): num_experts (5.x: num_local_experts), rope_theta, rope_scaling null, sliding_window null.
    const old = real('qwen3_moe', {
      num_local_experts: undefined, hidden_size: 2048, moe_intermediate_size: 768, num_hidden_layers: 48, num_attention_heads: 32, num_key_value_heads: 4, head_dim: 128,
      num_experts_per_tok: 8, rope_parameters: undefined, rope_theta: 1000000, rope_scaling: null, max_window_layers: 48, sliding_window: null, use_sliding_window: false,
    });
    Object.assign(old, { num_experts: 128, torch_dtype: 'bfloat16' });
    const o = read('Qwen3-30B-A3B-hub', old);
    expect([o.spec.moe!.numExperts, o.spec.moe!.topK, o.spec.moe!.routing, o.spec.ropeTheta, o.refusal]).toEqual([128, 8, 'softmax-topk-renorm', 1e6, null]);
  });

  it('OLMoE-1B-7B: 64 experts top-8 not renormalized, clip_qkv null, q/k norms over the projection; llama.cpp olmoe loads it', () => {
    const { spec, refusal } = read('OLMoE-1B-7B-0924', real('olmoe', {
      hidden_size: 2048, intermediate_size: 1024, num_hidden_layers: 16, num_attention_heads: 16, num_key_value_heads: 16, head_dim: 128,
      vocab_size: 50304, max_position_embeddings: 4096, num_experts: 64, num_experts_per_tok: 8, norm_topk_prob: false, clip_qkv: null,
      rms_norm_eps: 1e-5, rope_parameters: { rope_theta: 10000, rope_type: 'default' }, bos_token_id: null, eos_token_id: 50279, pad_token_id: 1,
      tie_word_embeddings: false, router_aux_loss_coef: 0.01, dtype: 'bfloat16',
    }));
    expect(spec.moe).toEqual({ routing: 'softmax-topk', numExperts: 64, topK: 8, expertIntermediateSize: 1024, sharedExpertIntermediateSize: null, denseLayers: [] });
    expect(spec.qkNorm).toEqual({ scope: 'all', offset: 0 });
    expect(spec.rmsNormEps).toBe(1e-5);
    expect(spec.bosTokenId).toBeNull();
    expect(refusal).toBeNull();
    // clip_qkv set (OLMo-1's 8.0) clamps q/k/v: refused, one line.
    expect(() => normalizeConfig(real('olmoe', { clip_qkv: 8.0 }), 'c/config.json')).toThrow(/^key "clip_qkv" = 8 is not supported/);
  });

  it('OLMo-2-0425-1B: post-norms, q/k norms over the projection, rope 500000', () => {
    const { spec, refusal } = read('OLMo-2-0425-1B', real('olmo2', {
      hidden_size: 2048, intermediate_size: 8192, num_hidden_layers: 16, num_attention_heads: 16, num_key_value_heads: 16, head_dim: 128,
      vocab_size: 100352, max_position_embeddings: 4096, rms_norm_eps: 1e-6, rope_parameters: { rope_theta: 500000, rope_type: 'default' },
      bos_token_id: null, eos_token_id: 100257, pad_token_id: 100277, tie_word_embeddings: false, dtype: 'float32',
    }));
    expect(spec.normPlacement).toBe('post');
    expect(spec.qkNorm).toEqual({ scope: 'all', offset: 0 });
    expect(spec.ropeTheta).toBe(500000);
    expect(spec.qkvBias).toBe(false);
    expect(refusal).toBeNull();
  });

  it('granite-3.1-2b: the four multipliers, head_dim 64 = hidden / heads, tied', () => {
    const { spec, refusal } = read('granite-3.1-2b-instruct', real('granite', {
      hidden_size: 2048, intermediate_size: 8192, num_hidden_layers: 40, num_attention_heads: 32, num_key_value_heads: 8, head_dim: 64,
      vocab_size: 49155, max_position_embeddings: 131072, rms_norm_eps: 1e-5, rope_parameters: { rope_theta: 5000000, rope_type: 'default' },
      attention_multiplier: 0.015625, embedding_multiplier: 12.0, residual_multiplier: 0.22, logits_scaling: 8.0, attention_bias: false, mlp_bias: false,
      tie_word_embeddings: true, bos_token_id: 0, eos_token_id: 0, pad_token_id: 0, dtype: 'bfloat16',
    }));
    expect(spec.multipliers).toEqual({ embedding: 12, residual: 0.22, attention: 0.015625, logitsDivide: 8 });
    expect(spec.tieEmbeddings).toBe(true);
    expect(spec.ropeTheta).toBe(5e6);
    expect(refusal).toBeNull();
    // granite-3.0-2b: rope 10000, 4096 positions, same multipliers.
    const r30 = read('granite-3.0-2b-instruct', real('granite', { hidden_size: 2048, num_attention_heads: 32, num_key_value_heads: 8, head_dim: 64, num_hidden_layers: 40, max_position_embeddings: 4096, attention_multiplier: 0.015625 }));
    expect(r30.spec.multipliers!.attention).toBe(0.015625);
    expect(r30.refusal).toBeNull();
  });

  it('SmolLM3-3B: every 4th layer without rope, rope 5e6, no window; llama.cpp smollm3 skips the same layers', () => {
    const flags = range(36).map((l) => ((l + 1) % 4 === 0 ? 0 : 1));
    const { spec, refusal } = read('SmolLM3-3B', real('smollm3', {
      hidden_size: 2048, intermediate_size: 11008, num_hidden_layers: 36, num_attention_heads: 16, num_key_value_heads: 4, head_dim: 128,
      vocab_size: 128256, max_position_embeddings: 65536, rms_norm_eps: 1e-6, rope_parameters: { rope_theta: 5000000, rope_type: 'default' },
      no_rope_layers: flags, no_rope_layer_interval: 4, layer_types: Array(36).fill(FULL), use_sliding_window: false, sliding_window: null,
      tie_word_embeddings: true, bos_token_id: null, eos_token_id: 128012, pad_token_id: 128004, dtype: 'bfloat16',
    }));
    expect(spec.ropeLayers).toEqual(range(36).filter((l) => (l + 1) % 4 !== 0));
    expect(spec.ropeTheta).toBe(5e6);
    expect(spec.slidingWindow).toBeNull();
    expect(refusal).toBeNull();
    // The released config.json (transformers 4.54): rope_theta, Qwen2's leftover max_window_layers 28 (SmolLM3Config never reads it), pretraining_tp 2.
    const hub = real('smollm3', {
      hidden_size: 2048, num_hidden_layers: 36, num_attention_heads: 16, num_key_value_heads: 4, head_dim: undefined, no_rope_layers: flags, layer_types: Array(36).fill(FULL),
      rope_parameters: undefined, rope_theta: 5000000, rope_scaling: null, max_window_layers: 28, use_sliding_window: false, sliding_window: null,
    });
    Object.assign(hub, { pretraining_tp: 2, torch_dtype: 'bfloat16', use_cache: false });
    const h = read('SmolLM3-3B-hub', hub);
    expect([h.spec.ropeLayers, h.spec.ropeTheta, h.spec.slidingWindow, h.spec.headDim, h.refusal]).toEqual([spec.ropeLayers, 5e6, null, 128, null]);
    // Another pattern: llama.cpp's smollm3 hard-codes every 4th, so the gguf target refuses it in one line.
    const other = read('x', real('smollm3', { no_rope_layers: [1, 0, 1, 1] })).refusal;
    expect(other).toMatch(/llama\.cpp's smollm3 rotates all but every 4th/);
    expect(other).not.toContain('\n');
  });

  const gemma2 = (o: Json): Json =>
    real('gemma2', {
      vocab_size: 256000, max_position_embeddings: 8192, rms_norm_eps: 1e-6, head_dim: 256, attn_logit_softcapping: 50.0, final_logit_softcapping: 30.0,
      sliding_window: 4096, rope_parameters: { rope_theta: 10000, rope_type: 'default' }, hidden_activation: 'gelu_pytorch_tanh', query_pre_attn_scalar: 256,
      tie_word_embeddings: true, bos_token_id: 2, eos_token_id: 1, pad_token_id: 0, use_bidirectional_attention: null, dtype: 'float32', ...o,
    });
  const alternating = (n: number) => range(n).map((l) => (l % 2 === 0 ? SLIDING : FULL));

  it('gemma-2-2b / 9b / 27b: scale query_pre_attn_scalar^-0.5, final cap 30, window 4096 on the even layers; llama.cpp gemma2 loads each', () => {
    for (const [name, o, scalar] of [
      ['gemma-2-2b', { hidden_size: 2304, intermediate_size: 9216, num_hidden_layers: 26, num_attention_heads: 8, num_key_value_heads: 4, layer_types: alternating(26) }, 256],
      ['gemma-2-9b', { hidden_size: 3584, intermediate_size: 14336, num_hidden_layers: 42, num_attention_heads: 16, num_key_value_heads: 8, layer_types: alternating(42) }, 256],
      // 27B: head_dim 128 but scaled by (hidden / heads)^-0.5 = 144^-0.5, which llama.cpp's gemma2 does for 46 layers.
      ['gemma-2-27b', { hidden_size: 4608, intermediate_size: 36864, num_hidden_layers: 46, num_attention_heads: 32, num_key_value_heads: 16, head_dim: 128, query_pre_attn_scalar: 144, layer_types: alternating(46) }, 144],
    ] as [string, Json, number][]) {
      const { spec, refusal } = read(name, gemma2(o));
      expect(spec.multipliers!.attention).toBeCloseTo(scalar ** -0.5, 12);
      expect(spec.multipliers!.embedding).toBe(Math.fround(Math.sqrt(spec.hiddenSize)));
      expect(spec.finalSoftcap).toBe(30);
      expect(spec.slidingWindow).toBe(4096);
      expect(spec.slidingLayers).toEqual(range(spec.numLayers).filter((l) => l % 2 === 0));
      expect(spec.hiddenAct).toBe('gelu_tanh');
      expect(spec.normPlacement).toBe('sandwich');
      expect(spec.rmsNormOffset).toBe(1);
      expect(spec.headDim).toBe(name === 'gemma-2-27b' ? 128 : 256);
      expect(refusal).toBeNull();
    }
    // Released config.json of transformers 4.x: cache_implementation "hybrid", hidden_act beside hidden_activation, no layer_types.
    const { spec } = read('gemma-2-2b-4x', gemma2({ hidden_size: 2304, num_hidden_layers: 26, num_attention_heads: 8, num_key_value_heads: 4, layer_types: undefined, cache_implementation: 'hybrid', hidden_act: 'gelu_pytorch_tanh' }));
    expect(spec.slidingLayers).toEqual(range(26).filter((l) => l % 2 === 0));
  });

  const gemma3 = (o: Json): Json =>
    real('gemma3_text', {
      rms_norm_eps: 1e-6, head_dim: 256, query_pre_attn_scalar: 256, attn_logit_softcapping: null, final_logit_softcapping: null,
      hidden_activation: 'gelu_pytorch_tanh', tie_word_embeddings: true, bos_token_id: 2, eos_token_id: [1, 106], pad_token_id: 0,
      use_bidirectional_attention: false, _sliding_window_pattern: 6, dtype: 'bfloat16', ...o,
    });
  const fiveToOne = (n: number) => range(n).map((l) => ((l + 1) % 6 === 0 ? FULL : SLIDING));

  it('gemma-3-1b: window 512 on 5 of 6 layers, the sliding layers at base 10000, the full at 1e6; llama.cpp gemma3 loads it', () => {
    const cfg = gemma3({
      hidden_size: 1152, intermediate_size: 6912, num_hidden_layers: 26, num_attention_heads: 4, num_key_value_heads: 1, vocab_size: 262144,
      max_position_embeddings: 32768, sliding_window: 512, layer_types: fiveToOne(26),
      rope_parameters: { full_attention: { rope_theta: 1000000, rope_type: 'default' }, sliding_attention: { rope_theta: 10000, rope_type: 'default' } },
    });
    const { spec, refusal } = read('gemma-3-1b-it', cfg);
    expect(spec.slidingWindow).toBe(512);
    expect(spec.slidingLayers).toEqual(range(26).filter((l) => (l + 1) % 6 !== 0));
    expect(spec.ropeTheta).toBe(1e6);
    expect(spec.ropeScaling).toBeNull();
    expect(spec.localRope).toEqual({ theta: 10000, scaling: null });
    expect(spec.qkNorm).toEqual({ scope: 'head', offset: 1 });
    expect(spec.finalSoftcap).toBeNull();
    expect(spec.multipliers!.attention).toBe(256 ** -0.5);
    expect(spec.eosTokenIds).toEqual([1, 106]);
    expect(refusal).toBeNull();
    // The same model in transformers 4.x's form: rope_theta, rope_local_base_freq, sliding_window_pattern, no layer_types.
    const older = gemma3({
      hidden_size: 1152, intermediate_size: 6912, num_hidden_layers: 26, num_attention_heads: 4, num_key_value_heads: 1, sliding_window: 512,
      layer_types: undefined, rope_parameters: undefined, _sliding_window_pattern: undefined, rope_theta: 1000000, rope_local_base_freq: 10000,
      rope_scaling: null, sliding_window_pattern: 6, cache_implementation: 'hybrid',
    });
    const o = read('gemma-3-1b-it-4x', older).spec;
    expect([o.slidingLayers, o.ropeTheta, o.localRope]).toEqual([spec.slidingLayers, spec.ropeTheta, spec.localRope]);
  });

  it('gemma-3-4b text: linear rope ×8 on the full layers only, window 1024; llama.cpp gemma3 scales only its full layers too', () => {
    const cfg = gemma3({
      hidden_size: 2560, intermediate_size: 10240, num_hidden_layers: 34, num_attention_heads: 8, num_key_value_heads: 4, vocab_size: 262208,
      max_position_embeddings: 131072, sliding_window: 1024, layer_types: fiveToOne(34),
      rope_parameters: { full_attention: { rope_theta: 1000000, rope_type: 'linear', factor: 8.0 }, sliding_attention: { rope_theta: 10000, rope_type: 'default' } },
    });
    const { spec, refusal } = read('gemma-3-4b-it', cfg);
    expect(spec.ropeScaling).toEqual({ type: 'linear', factor: 8 });
    expect(spec.ropeTheta).toBe(1e6);
    expect(spec.localRope).toEqual({ theta: 10000, scaling: null });
    expect(spec.slidingLayers).toEqual(range(34).filter((l) => (l + 1) % 6 !== 0));
    expect(refusal).toBeNull();
    expect(checkGgufRope(spec, ARCHITECTURES.gemma3_text.gguf)).toEqual({ type: 'linear', factor: 8 });
    // Older form: rope_scaling applies to the full layers, rope_local_base_freq to the sliding ones.
    const older = gemma3({
      hidden_size: 2560, num_hidden_layers: 34, num_attention_heads: 8, num_key_value_heads: 4, sliding_window: 1024, max_position_embeddings: 131072,
      layer_types: undefined, rope_parameters: undefined, rope_theta: 1000000, rope_local_base_freq: 10000, rope_scaling: { rope_type: 'linear', factor: 8.0 }, sliding_window_pattern: 6,
    });
    const o = read('gemma-3-4b-it-4x', older).spec;
    expect([o.ropeScaling, o.localRope, o.slidingLayers]).toEqual([spec.ropeScaling, spec.localRope, spec.slidingLayers]);
    // gemma-3-27b: 62 layers, head_dim 128 scaled by (hidden / heads)^-0.5 = 168^-0.5, as llama.cpp's gemma3 does for 62 layers.
    const big = read('gemma-3-27b-it', gemma3({
      hidden_size: 5376, intermediate_size: 21504, num_hidden_layers: 62, num_attention_heads: 32, num_key_value_heads: 16, head_dim: 128, query_pre_attn_scalar: 168,
      sliding_window: 1024, layer_types: fiveToOne(62), rope_parameters: cfg.rope_parameters,
    }));
    expect(big.refusal).toBeNull();
  });

  const phi3 = (o: Json): Json =>
    real('phi3', {
      hidden_size: 3072, intermediate_size: 8192, num_hidden_layers: 32, num_attention_heads: 32, num_key_value_heads: 32, head_dim: 96, vocab_size: 32064,
      rms_norm_eps: 1e-5, bos_token_id: 1, eos_token_id: 32000, pad_token_id: 32000, tie_word_embeddings: false, dtype: 'bfloat16', ...o,
    });

  it('Phi-3-mini-4k: window 2047 on every layer, no rope scaling; llama.cpp phi3 loads it', () => {
    const { spec, refusal } = read('Phi-3-mini-4k-instruct', phi3({
      max_position_embeddings: 4096, original_max_position_embeddings: 4096, sliding_window: 2047,
      rope_parameters: { partial_rotary_factor: 1.0, rope_theta: 10000, rope_type: 'default' },
    }));
    expect(spec.slidingWindow).toBe(2047);
    expect(spec.slidingLayers).toBeNull();
    expect(spec.ropeScaling).toBeNull();
    expect(spec.headDim).toBe(96);
    expect(refusal).toBeNull();
    expect(checkGgufRope(spec, ARCHITECTURES.phi3.gguf)).toBeNull();
    // The released config.json (transformers 4.x): auto_map (remote code naming the same class), attention_bias false, rope_scaling null.
    const hub = phi3({ max_position_embeddings: 4096, original_max_position_embeddings: 4096, sliding_window: 2047, rope_parameters: undefined, rope_theta: 10000, rope_scaling: null });
    Object.assign(hub, { auto_map: { AutoConfig: 'configuration_phi3.Phi3Config', AutoModelForCausalLM: 'modeling_phi3.Phi3ForCausalLM' }, attention_bias: false, torch_dtype: 'bfloat16' });
    const h = read('Phi-3-mini-4k-hub', hub);
    expect([h.spec.slidingWindow, h.spec.ropeScaling, h.spec.qkvBias, h.refusal]).toEqual([2047, null, false, null]);
  });

  it('Phi-3.5-mini and Phi-3-mini-128k: longrope with 48 short / long factors past 4096 positions, which the gguf target keeps', () => {
    const short = range(48).map((i) => 1 + i / 100);
    const long = range(48).map((i) => 1.08 + i);
    for (const [name, window, rope] of [
      // transformers 5 form: rope_parameters with the longrope factors.
      ['Phi-3.5-mini-instruct', 262144, { rope_parameters: { partial_rotary_factor: 1.0, rope_theta: 10000, rope_type: 'longrope', short_factor: short, long_factor: long, original_max_position_embeddings: 4096 } }],
      // Released config.json (transformers 4.x): rope_theta + rope_scaling {type: longrope}.
      ['Phi-3-mini-128k-instruct', 262144, { rope_parameters: undefined, rope_theta: 10000, rope_scaling: { type: 'longrope', short_factor: short, long_factor: long } }],
    ] as [string, number, Json][]) {
      const { spec, refusal } = read(name, phi3({ max_position_embeddings: 131072, original_max_position_embeddings: 4096, sliding_window: window, ...rope }));
      const rs = spec.ropeScaling!;
      expect(rs.type).toBe('longrope');
      if (rs.type !== 'longrope') continue;
      expect(rs.shortFactor).toEqual(short);
      expect(rs.longFactor).toEqual(long);
      expect(rs.originalMaxPositions).toBe(4096);
      // transformers: sqrt(1 + ln(131072 / 4096) / ln(4096)).
      expect(rs.attentionFactor).toBeCloseTo(Math.sqrt(1 + Math.log(32) / Math.log(4096)), 12);
      expect(spec.slidingWindow).toBe(262144);
      expect(refusal).toBeNull();
      // The gguf target writes them as llama.cpp's phi3 reads them (rope_factors_long / _short: test/gguf-longrope.test.ts).
      expect(checkGgufRope(spec, ARCHITECTURES.phi3.gguf)).toEqual(rs);
    }
    // "su" (the first Phi-3-128k configs' name for longrope) is not a type transformers 5 reads: refused, one line.
    expect(() => normalizeConfig(phi3({ max_position_embeddings: 131072, rope_parameters: undefined, rope_theta: 10000, rope_scaling: { type: 'su', short_factor: short, long_factor: long } }), 'su/config.json')).toThrow(/unsupported rope type "su"/);
  });
});
