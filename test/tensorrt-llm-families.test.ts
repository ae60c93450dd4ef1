/**
 * `--target tensorrt-llm` on every family TensorRT-LLM has, checked against a table written from
 * NVIDIA/TensorRT-LLM's own sources (not from llmc's output), and numerically: rank0.safetensors is
 * read with the small reader below (not llmc's), the Hugging Face tensors are reassembled under
 * TensorRT-LLM's layout (split attention.qkv, unstack the experts' [up; gate] halves, undo gemma's
 * + 1) and compared bit for bit with the source checkpoint read directly. fp32 writes no rounding.
 *
 * Sources (NVIDIA/TensorRT-LLM, read at main of 2026; commits of the stored copies in brackets):
 * - models/__init__.py MODEL_MAP [02267d3d + newer]: Qwen2/Qwen2Moe/Qwen3/Qwen3Moe → QWenForCausalLM,
 *   Mixtral/Mistral/Llama/Granite → LLaMAForCausalLM, Gemma2/Gemma3ForCausalLM → GemmaForCausalLM,
 *   Phi3ForCausalLM; no OLMo2, OLMoE or SmolLM3 class.
 * - models/qwen/config.py QWenConfig + model.py QWenDecoderLayer [2026 copy]: qwen_type (no default),
 *   moe, moe_intermediate_size, moe_shared_expert_intermediate_size; qwen3*: qk_layernorm →
 *   attention.q_layernorm / k_layernorm (custom_dict q_norm / k_norm); MoE custom_dict fc = [up_proj, gate_proj].
 * - layers/moe.py MOE / SharedMoE [161996128 copy]: router RowLinear float32, fc (E, 2I, H) "left linear,
 *   right gated", proj (E, H, I); SharedMoE.shared_expert (MLP, fused fc) and shared_expert_gate.
 * - models/llama/config.py LLaMAConfig [890011708 copy]: residual_mlp, moe, the four Granite multipliers.
 * - models/gemma/config.py [9df6d722] + modeling_utils.py Gemma2ConfigGroup / Gemma3ConfigGroup
 *   [01ea6d79] + convert.py load_gemma_weights [263401833 copy]: norms + 1, post_attention_layernorm →
 *   post_layernorm, pre/post_feedforward_layernorm, gate_proj → mlp.fc, up_proj → mlp.gate.
 * - models/phi3/config.py [1e6a4f97] / model.py [c4dc529f] / convert.py [89fd9b74]: rotary_pct, no moe,
 *   gate_up_proj → mlp.fc with halves swapped, longrope_scaling_short/long_factors.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { llmcInProcess } from './cli.js';

const ARCHS = path.resolve(__dirname, '../../shared/models/archs');
const have = await fsp.stat(ARCHS).then(() => true, () => false);
if (!have) console.log(`skipping the shared-checkpoint cases: ${ARCHS} is absent`);

type Tensors = Map<string, { shape: number[]; data: Float32Array }>;

/** A safetensors file's tensors as float32 (F32, F16, BF16), read from the format's definition alone. */
async function readSafetensors(file: string): Promise<Tensors> {
  const buf = await fsp.readFile(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  const out: Tensors = new Map();
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const raw = buf.subarray(8 + n + t.data_offsets[0], 8 + n + t.data_offsets[1]);
    const count = t.shape.reduce((a, b) => a * b, 1);
    const data = new Float32Array(count);
    const dv = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    for (let i = 0; i < count; i++) {
      if (t.dtype === 'F32') data[i] = dv.getFloat32(4 * i, true);
      else if (t.dtype === 'BF16') data[i] = new Float32Array(new Uint32Array([dv.getUint16(2 * i, true) << 16]).buffer)[0];
      else throw new Error(`${name}: dtype ${t.dtype} not expected in an fp32 checkpoint`);
    }
    out.set(name, { shape: t.shape, data });
  }
  return out;
}

/** Rows [from, to) of a row-major matrix with `cols` columns. */
const rows = (d: Float32Array, cols: number, from: number, to: number) => d.subarray(from * cols, to * cols);
const cat = (...parts: Float32Array[]) => {
  const o = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of parts) (o.set(p, at), (at += p.length));
  return o;
};

/**
 * The table: what each TensorRT-LLM class reads of config.json with no default (or whose default
 * would compute something else), and the per-layer parameter names its modules register.
 */
const COMMON = ['architecture', 'dtype', 'hidden_size', 'num_hidden_layers', 'num_attention_heads', 'num_key_value_heads', 'head_size', 'vocab_size', 'hidden_act', 'intermediate_size', 'norm_epsilon', 'position_embedding_type', 'max_position_embeddings', 'rotary_base', 'mapping', 'quantization'];
interface ClassRow {
  keys: string[];
  layer: (moe: boolean) => string[];
}
const ATTN = ['input_layernorm.weight', 'attention.qkv.weight', 'attention.dense.weight', 'post_layernorm.weight'];
const GATED = ['mlp.fc.weight', 'mlp.gate.weight', 'mlp.proj.weight'];
const MOE = ['mlp.router.weight', 'mlp.fc.weight', 'mlp.proj.weight'];
const QK = ['attention.q_layernorm.weight', 'attention.k_layernorm.weight'];
const TABLE: Record<string, ClassRow> = {
  qwen3: { keys: ['qwen_type', 'moe', 'moe_intermediate_size', 'attn_bias', 'use_logn_attn'], layer: () => [...ATTN, ...QK, ...GATED] },
  qwen3_moe: { keys: ['qwen_type', 'moe', 'moe_intermediate_size', 'attn_bias'], layer: () => [...ATTN, ...QK, ...MOE] },
  qwen2_moe: {
    keys: ['qwen_type', 'moe', 'moe_intermediate_size', 'moe_shared_expert_intermediate_size', 'attn_bias'],
    layer: () => [...ATTN, 'attention.qkv.bias', ...MOE, 'mlp.shared_expert.fc.weight', 'mlp.shared_expert.proj.weight', 'mlp.shared_expert_gate.weight'],
  },
  mixtral: { keys: ['moe', 'residual_mlp'], layer: () => [...ATTN, ...MOE] },
  granite: { keys: ['moe', 'embedding_multiplier', 'attention_multiplier', 'residual_multiplier', 'output_multiplier_scale'], layer: () => [...ATTN, ...GATED] },
  gemma2: { keys: ['query_pre_attn_scalar', 'final_logit_softcapping', 'attn_logit_softcapping', 'inter_layernorms'], layer: () => [...ATTN, 'pre_feedforward_layernorm.weight', 'post_feedforward_layernorm.weight', ...GATED] },
  gemma3_text: {
    keys: ['query_pre_attn_scalar', 'final_logit_softcapping', '_sliding_window_pattern', 'sliding_window_pattern', 'rope_local_base_freq', 'sliding_window', 'inter_layernorms'],
    layer: () => [...ATTN, ...QK, 'pre_feedforward_layernorm.weight', 'post_feedforward_layernorm.weight', ...GATED],
  },
  phi3: { keys: ['rotary_pct'], layer: () => [...ATTN, 'mlp.fc.weight', 'mlp.proj.weight'] },
};
const ARCHITECTURE: Record<string, string> = {
  qwen3: 'Qwen3ForCausalLM',
  qwen3_moe: 'Qwen3MoeForCausalLM',
  qwen2_moe: 'Qwen2MoeForCausalLM',
  mixtral: 'MixtralForCausalLM',
  granite: 'GraniteForCausalLM',
  gemma2: 'Gemma2ForCausalLM',
  gemma3_text: 'Gemma3ForCausalLM',
  phi3: 'Phi3ForCausalLM',
};

let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-trtllm-fam-'));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

async function compileTo(model: string, name: string): Promise<{ config: Record<string, any>; w: Tensors; src: Tensors; hf: Record<string, any> }> {
  const out = path.join(tmp, name);
  const r = await llmcInProcess('compile', model, '--target', 'tensorrt-llm', '--quant', 'fp32', '--no-eval', '-o', out);
  expect(r.code, r.stderr).toBe(0);
  const files = (await fsp.readdir(model)).filter((f) => f.endsWith('.safetensors') && f !== 'reference_logits.safetensors');
  const src: Tensors = new Map();
  for (const f of files) for (const [k, v] of await readSafetensors(path.join(model, f))) src.set(k, v);
  return {
    config: JSON.parse(await fsp.readFile(path.join(out, 'config.json'), 'utf8')),
    w: await readSafetensors(path.join(out, 'rank0.safetensors')),
    src,
    hf: JSON.parse(await fsp.readFile(path.join(model, 'config.json'), 'utf8')),
  };
}

/** Layer l's Hugging Face tensors rebuilt from the TensorRT-LLM checkpoint (TensorRT-LLM's layout undone). */
function reassemble(family: string, w: Tensors, hf: Record<string, any>, l: number): Map<string, Float32Array> {
  const p = `transformer.layers.${l}`;
  const h = `model.layers.${l}`;
  const H = hf.hidden_size;
  const hd = hf.head_dim ?? H / hf.num_attention_heads;
  const q = hf.num_attention_heads * hd;
  const kv = (hf.num_key_value_heads ?? hf.num_attention_heads) * hd;
  const get = (n: string) => {
    const t = w.get(`${p}.${n}`);
    if (!t) throw new Error(`${p}.${n} missing`);
    return t;
  };
  const m = new Map<string, Float32Array>();
  const qkv = get('attention.qkv.weight').data;
  if (family === 'phi3') m.set(`${h}.self_attn.qkv_proj.weight`, qkv);
  else {
    m.set(`${h}.self_attn.q_proj.weight`, rows(qkv, H, 0, q));
    m.set(`${h}.self_attn.k_proj.weight`, rows(qkv, H, q, q + kv));
    m.set(`${h}.self_attn.v_proj.weight`, rows(qkv, H, q + kv, q + 2 * kv));
  }
  const bias = w.get(`${p}.attention.qkv.bias`)?.data;
  if (bias) {
    m.set(`${h}.self_attn.q_proj.bias`, bias.subarray(0, q));
    m.set(`${h}.self_attn.k_proj.bias`, bias.subarray(q, q + kv));
    m.set(`${h}.self_attn.v_proj.bias`, bias.subarray(q + kv));
  }
  m.set(`${h}.self_attn.o_proj.weight`, get('attention.dense.weight').data);
  m.set(`${h}.input_layernorm.weight`, get('input_layernorm.weight').data);
  m.set(`${h}.post_attention_layernorm.weight`, get('post_layernorm.weight').data);
  if (w.has(`${p}.attention.q_layernorm.weight`)) {
    m.set(`${h}.self_attn.q_norm.weight`, get('attention.q_layernorm.weight').data);
    m.set(`${h}.self_attn.k_norm.weight`, get('attention.k_layernorm.weight').data);
  }
  if (w.has(`${p}.pre_feedforward_layernorm.weight`)) {
    m.set(`${h}.pre_feedforward_layernorm.weight`, get('pre_feedforward_layernorm.weight').data);
    m.set(`${h}.post_feedforward_layernorm.weight`, get('post_feedforward_layernorm.weight').data);
  }
  if (w.has(`${p}.mlp.router.weight`)) {
    const fc = get('mlp.fc.weight');
    const proj = get('mlp.proj.weight');
    const [E, twoI] = fc.shape;
    const I = twoI / 2;
    const mix = family === 'mixtral';
    const base = mix ? `${h}.block_sparse_moe` : `${h}.mlp`;
    m.set(`${base}.gate.weight`, get('mlp.router.weight').data);
    for (let e = 0; e < E; e++) {
      const block = fc.data.subarray(e * twoI * H, (e + 1) * twoI * H);
      // left half linear (up / w3), right half activated (gate / w1)
      m.set(mix ? `${base}.experts.${e}.w3.weight` : `${base}.experts.${e}.up_proj.weight`, rows(block, H, 0, I));
      m.set(mix ? `${base}.experts.${e}.w1.weight` : `${base}.experts.${e}.gate_proj.weight`, rows(block, H, I, 2 * I));
      m.set(mix ? `${base}.experts.${e}.w2.weight` : `${base}.experts.${e}.down_proj.weight`, proj.data.subarray(e * H * I, (e + 1) * H * I));
    }
    const sfc = w.get(`${p}.mlp.shared_expert.fc.weight`);
    if (sfc) {
      const S = sfc.shape[0] / 2;
      m.set(`${h}.mlp.shared_expert.up_proj.weight`, rows(sfc.data, H, 0, S));
      m.set(`${h}.mlp.shared_expert.gate_proj.weight`, rows(sfc.data, H, S, 2 * S));
      m.set(`${h}.mlp.shared_expert.down_proj.weight`, get('mlp.shared_expert.proj.weight').data);
      m.set(`${h}.mlp.shared_expert_gate.weight`, get('mlp.shared_expert_gate.weight').data);
    }
  } else if (family === 'phi3') {
    const fc = get('mlp.fc.weight');
    const I = fc.shape[0] / 2;
    // convert.py swaps gate_up_proj's halves: mlp.fc = [up; gate]
    m.set(`${h}.mlp.gate_up_proj.weight`, cat(rows(fc.data, H, I, 2 * I), rows(fc.data, H, 0, I)));
    m.set(`${h}.mlp.down_proj.weight`, get('mlp.proj.weight').data);
  } else {
    m.set(`${h}.mlp.gate_proj.weight`, get('mlp.fc.weight').data);
    m.set(`${h}.mlp.up_proj.weight`, get('mlp.gate.weight').data);
    m.set(`${h}.mlp.down_proj.weight`, get('mlp.proj.weight').data);
  }
  return m;
}

const isNorm = (n: string) => /(layernorm|_norm|norm)\.weight$/.test(n);

async function check(family: string, model: string) {
  const { config, w, src, hf } = await compileTo(model, family);
  const row = TABLE[family];
  for (const k of [...COMMON, ...row.keys]) expect(config, `${family}: ${k}`).toHaveProperty(k);
  expect(config.architecture).toBe(ARCHITECTURE[family]);
  if (family.startsWith('qwen')) expect(config.qwen_type).toBe(family);
  // Phi3DecoderLayer: `if hasattr(config, "moe")` makes the layer MoE.
  if (family === 'phi3') expect(config).not.toHaveProperty('moe');
  const moe = Boolean(config.moe?.num_experts);
  const expected = new Set(['transformer.vocab_embedding.weight', 'transformer.ln_f.weight', 'lm_head.weight']);
  for (let l = 0; l < hf.num_hidden_layers; l++) for (const n of row.layer(moe)) if (n !== 'attention.qkv.bias' || hf.model_type !== 'qwen3') expected.add(`transformer.layers.${l}.${n}`);
  expect([...w.keys()].sort()).toEqual([...expected].sort());
  if (moe) expect(w.get('transformer.layers.0.mlp.router.weight')!.shape).toEqual([config.moe.num_experts, hf.hidden_size]);

  // Numeric: every source tensor back, bit for bit (gemma's norms as float32 w + 1).
  const plusOne = family.startsWith('gemma');
  const rebuilt = new Map<string, Float32Array>([
    ['model.embed_tokens.weight', w.get('transformer.vocab_embedding.weight')!.data],
    ['model.norm.weight', w.get('transformer.ln_f.weight')!.data],
  ]);
  if (src.has('lm_head.weight')) rebuilt.set('lm_head.weight', w.get('lm_head.weight')!.data);
  else expect(w.get('lm_head.weight')!.data).toEqual(src.get('model.embed_tokens.weight')!.data);
  for (let l = 0; l < hf.num_hidden_layers; l++) for (const [k, v] of reassemble(family, w, hf, l)) rebuilt.set(k, v);
  expect([...rebuilt.keys()].sort()).toEqual([...src.keys()].sort());
  for (const [name, s] of src) {
    const got = rebuilt.get(name)!;
    const want = plusOne && isNorm(name) ? s.data.map((x) => Math.fround(x + 1)) : s.data;
    expect(got.length, name).toBe(want.length);
    let diff = -1;
    for (let i = 0; i < want.length && diff < 0; i++) if (!Object.is(got[i], want[i])) diff = i;
    expect(diff, `${family} ${name}`).toBe(-1);
  }
  return config;
}

describe.runIf(have)('tensorrt-llm: the families TensorRT-LLM has, from ../shared/models/archs', () => {
  for (const family of ['qwen3', 'qwen3_moe', 'granite', 'gemma2', 'gemma3_text', 'phi3']) {
    it(`${family}: the class's config keys and weight names, and every tensor back bit for bit`, async () => {
      const config = await check(family, path.join(ARCHS, family));
      if (family === 'qwen3_moe') expect(config.moe).toEqual({ num_experts: 8, top_k: 2, normalization_mode: 1 }); // norm_topk_prob: RENORMALIZE
      if (family === 'granite') expect(config).toMatchObject({ embedding_multiplier: 12, attention_multiplier: 0.25 * 4, residual_multiplier: 0.22, output_multiplier_scale: 1 / 8 });
      if (family === 'gemma2') expect(config).toMatchObject({ query_pre_attn_scalar: 16, final_logit_softcapping: 30, runtime_defaults: { max_attention_window: [8, 512, 8, 512] } });
      if (family === 'gemma3_text') expect(config).toMatchObject({ query_pre_attn_scalar: 16, rope_local_base_freq: 10000, sliding_window: 8, runtime_defaults: { max_attention_window: [8, 8, 8, 8] } });
      if (family === 'phi3') expect(config).toMatchObject({ hidden_act: 'swiglu', rotary_pct: 1, position_embedding_type: 'rope_gpt_neox' });
    });
  }

  it('phi3 with longrope: long_rope and both factor lists, rotary_scaling null', async () => {
    const dir = path.join(tmp, 'phi3-longrope-src');
    await fsp.cp(path.join(ARCHS, 'phi3'), dir, { recursive: true });
    const cfg = JSON.parse(await fsp.readFile(path.join(dir, 'config.json'), 'utf8'));
    const half = 8;
    const short = Array.from({ length: half }, (_, i) => 1 + i / 10);
    const long = Array.from({ length: half }, (_, i) => 2 + i);
    cfg.original_max_position_embeddings = 16;
    cfg.rope_parameters = { rope_type: 'longrope', rope_theta: 10000, short_factor: short, long_factor: long, original_max_position_embeddings: 16, partial_rotary_factor: 1.0 };
    await fsp.writeFile(path.join(dir, 'config.json'), JSON.stringify(cfg));
    const { config } = await compileTo(dir, 'phi3-longrope');
    expect(config).toMatchObject({ position_embedding_type: 'long_rope', original_max_position_embeddings: 16, longrope_scaling_short_factors: short, longrope_scaling_long_factors: long, rotary_scaling: null });
  });

  it('what a class cannot compute is refused by name: dense layers among Qwen MoE layers, a gemma3 layout no pattern gives, q/k norms on LLaMA', async () => {
    const { normalizeConfig } = await import('../src/core/arch/spec.js');
    const { archOf } = await import('../src/core/arch/registry.js');
    const { trtllmRefusal } = await import('../backends/tensorrt-llm/check.js');
    const spec = async (family: string, patch: Record<string, unknown>) => {
      const file = path.join(ARCHS, family, 'config.json');
      return normalizeConfig({ ...JSON.parse(await fsp.readFile(file, 'utf8')), ...patch }, file);
    };
    const why = (s: Awaited<ReturnType<typeof spec>>) => trtllmRefusal(s, archOf(s).tensorrtLlm!);
    expect(why(await spec('qwen3_moe', { mlp_only_layers: [1] }))).toMatch(/dense MLP layers \[1\] among the MoE ones/);
    expect(why(await spec('gemma3_text', { layer_types: ['sliding_attention', 'full_attention', 'full_attention', 'sliding_attention'] }))).toMatch(/no _sliding_window_pattern gives/);
    const qwen3 = await spec('qwen3', {});
    expect(trtllmRefusal(qwen3, archOf({ modelType: 'llama' }).tensorrtLlm!)).toMatch(/LlamaForCausalLM class computes no per-head q\/k RMSNorm/);
    expect(why(qwen3)).toBeNull();
  });

  it('olmo2, olmoe, smollm3: one line naming the family, TensorRT-LLM has no such model, nothing written', async () => {
    for (const family of ['olmo2', 'olmoe', 'smollm3']) {
      const out = path.join(tmp, `${family}-refused`);
      const r = await llmcInProcess('compile', path.join(ARCHS, family), '--target', 'tensorrt-llm', '-o', out);
      expect(r.code).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toContain(`TensorRT-LLM has no ${family} model`);
      await expect(fsp.stat(out)).rejects.toThrow();
    }
  });
});

describe('tensorrt-llm: mixtral and qwen2_moe experts (generated fixtures)', () => {
  for (const family of ['mixtral', 'qwen2_moe'] as const) {
    it(`${family}: router, stacked [up; gate] experts${family === 'qwen2_moe' ? ', shared expert and its gate' : ''}, bit for bit`, async () => {
      const fx = await generateFixture(path.join(tmp, `${family}-fx`), { arch: family, seed: 3, tokenizer: 'none' });
      const config = await check(family, fx.dir);
      expect(config.hidden_act).toBe('swiglu');
      expect(config.moe.num_experts).toBeGreaterThan(0);
    });
  }
});
