/**
 * `--target tensorrt-llm`: config.json + rank0.safetensors in TensorRT-LLM's checkpoint layout.
 * trtllm-build does not run here (no GPU, no TensorRT-LLM), so the checkpoint is read back by the
 * field meanings docs/tensorrt-llm.md documents — qkv = [q; k; v] rows, mlp.fc = the activated branch
 * (gate_proj), mlp.gate = up_proj, mlp.proj = down_proj — and run through the independent float64
 * reference (test/reference/llama64.ts): stories260K's reference ids come back.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { compile } from '../src/app/compile/compile.js';
import { normalizeConfig, type ArchSpec } from '../src/core/arch/spec.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { SafetensorsFile, toF32 } from '../src/core/checkpoint/safetensors.js';
import type { ModelSource } from '../src/core/checkpoint/source.js';
import { silentProgress } from '../src/core/util/progress.js';
import { argmax64, Llama64 } from './reference/llama64.js';
import { llmcInProcess } from './cli.js';

const MODEL = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-trtllm-'));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

async function build(model: string, name: string, quant: string) {
  const src = await openCheckpoint(model);
  try {
    const out = path.join(tmp, name);
    await compile({ source: src, target: 'tensorrt-llm', outDir: out, passes: [], quant, progress: silentProgress, note: () => {} });
    return { out, spec: src.spec };
  } finally {
    await src.close();
  }
}

/** The checkpoint as Hugging Face tensors, by the documented mapping (the reference only knows HF names). */
async function asHf(dir: string, spec: ArchSpec): Promise<ModelSource> {
  const f = await SafetensorsFile.open(path.join(dir, 'rank0.safetensors'));
  const t = new Map<string, Float32Array>();
  for (const [name, info] of f.tensors) t.set(name, toF32(await f.readRaw(info), info.dtype, name));
  const hd = spec.headDim;
  const w = new Map<string, Float32Array>([
    ['model.embed_tokens.weight', t.get('transformer.vocab_embedding.weight')!],
    ['model.norm.weight', t.get('transformer.ln_f.weight')!],
    ['lm_head.weight', t.get('lm_head.weight')!],
  ]);
  for (let l = 0; l < spec.numLayers; l++) {
    const p = `transformer.layers.${l}`;
    const h = `model.layers.${l}`;
    const D = spec.hiddenSize;
    const qkv = t.get(`${p}.attention.qkv.weight`)!;
    const q = spec.numHeads * hd * D;
    const kv = spec.numKvHeads * hd * D;
    w.set(`${h}.self_attn.q_proj.weight`, qkv.subarray(0, q));
    w.set(`${h}.self_attn.k_proj.weight`, qkv.subarray(q, q + kv));
    w.set(`${h}.self_attn.v_proj.weight`, qkv.subarray(q + kv));
    w.set(`${h}.self_attn.o_proj.weight`, t.get(`${p}.attention.dense.weight`)!);
    w.set(`${h}.input_layernorm.weight`, t.get(`${p}.input_layernorm.weight`)!);
    w.set(`${h}.post_attention_layernorm.weight`, t.get(`${p}.post_layernorm.weight`)!);
    w.set(`${h}.mlp.gate_proj.weight`, t.get(`${p}.mlp.fc.weight`)!);
    w.set(`${h}.mlp.up_proj.weight`, t.get(`${p}.mlp.gate.weight`)!);
    w.set(`${h}.mlp.down_proj.weight`, t.get(`${p}.mlp.proj.weight`)!);
    const bias = t.get(`${p}.attention.qkv.bias`);
    if (bias) {
      const qb = spec.numHeads * hd;
      const kb = spec.numKvHeads * hd;
      w.set(`${h}.self_attn.q_proj.bias`, bias.subarray(0, qb));
      w.set(`${h}.self_attn.k_proj.bias`, bias.subarray(qb, qb + kb));
      w.set(`${h}.self_attn.v_proj.bias`, bias.subarray(qb + kb));
    }
  }
  await f.close();
  return { spec: { ...spec, tieEmbeddings: false }, tensors: [...w].map(([name, d]) => ({ name, shape: [d.length], dtype: 'F32' as const })), readF32: async (n: string) => Float32Array.from(w.get(n)!) } as unknown as ModelSource;
}

describe('tensorrt-llm target', () => {
  it('fp32: read back by the documented mapping, the float64 reference reproduces the reference ids', async () => {
    const { out, spec } = await build(MODEL, 'fp32', 'fp32');
    const config = JSON.parse(await fsp.readFile(path.join(out, 'config.json'), 'utf8'));
    expect(config).toMatchObject({
      architecture: 'LlamaForCausalLM',
      dtype: 'float32',
      num_attention_heads: 8,
      num_key_value_heads: 4,
      head_size: 8,
      intermediate_size: 172,
      position_embedding_type: 'rope_gpt_neox',
      rotary_base: 10000,
      mapping: { world_size: 1, tp_size: 1, pp_size: 1 },
      quantization: { quant_algo: null },
    });
    const ref = JSON.parse(await fsp.readFile(path.join(MODEL, 'reference.json'), 'utf8')).greedy_ids as number[];
    const model = await Llama64.load(await asHf(out, normalizeConfig(JSON.parse(await fsp.readFile(path.join(MODEL, 'config.json'), 'utf8')), 'config.json')));
    const ids = [1];
    for (let i = 0; i < 12; i++) ids.push(argmax64(model.forward(ids).at(-1)!));
    expect(ids.slice(1)).toEqual(ref.slice(0, 12));
    expect(spec.numLayers).toBe(5);
  });

  it('fp16 qwen2 (qkv bias), and int8 / int4 as W8A16 / W4A16 for trtllm-build to quantize', async () => {
    const fx = await generateFixture(path.join(tmp, 'qwen2'), { arch: 'qwen2', seed: 3, tokenizer: 'none' });
    const { out, spec } = await build(fx.dir, 'qwen2-fp16', 'fp16');
    const f = await SafetensorsFile.open(path.join(out, 'rank0.safetensors'));
    const names = [...f.tensors.keys()];
    expect(names).toContain('transformer.layers.0.attention.qkv.bias');
    expect([...f.tensors.values()].every((t) => t.dtype === 'F16')).toBe(true);
    expect(f.tensors.get('transformer.layers.0.attention.qkv.weight')!.shape).toEqual([(spec.numHeads + 2 * spec.numKvHeads) * spec.headDim, spec.hiddenSize]);
    await f.close();
    const config = JSON.parse(await fsp.readFile(path.join(out, 'config.json'), 'utf8'));
    expect(config).toMatchObject({ architecture: 'Qwen2ForCausalLM', dtype: 'float16', attn_bias: true });
    for (const [quant, algo] of [['int8', 'W8A16'], ['int4', 'W4A16']] as const) {
      const q = await build(fx.dir, `qwen2-${quant}`, quant);
      const c = JSON.parse(await fsp.readFile(path.join(q.out, 'config.json'), 'utf8'));
      expect(c.quantization.quant_algo).toBe(algo);
      expect(c.dtype).toBe('float16');
    }
  });

  it('each class gets the config fields TensorRT-LLM reads (NVIDIA/TensorRT-LLM sources, cited per field)', async () => {
    const llama = JSON.parse(await fsp.readFile(path.join((await build(MODEL, 'fields-llama', 'fp16')).out, 'config.json'), 'utf8'));
    // models/llama/config.py LLaMAConfig.__init__: moe (MoeConfig.from_dict), residual_mlp; layers/moe.py
    // MoeConfig: num_experts / top_k both 0 for a dense model, normalization_mode RENORMALIZE = 1 by default.
    expect(llama).toMatchObject({ architecture: 'LlamaForCausalLM', residual_mlp: false, moe: { num_experts: 0, top_k: 0, normalization_mode: 1 }, disable_weight_only_quant_plugin: false, position_embedding_type: 'rope_gpt_neox' });
    expect(llama).not.toHaveProperty('qwen_type');
    const qwen = JSON.parse(await fsp.readFile(path.join((await build(path.join(tmp, 'qwen2'), 'fields-qwen2', 'fp16')).out, 'config.json'), 'utf8'));
    // models/qwen/model.py QWenDecoderLayer: `config.qwen_type == 'qwen2_moe'` (no default: a missing
    // field is an AttributeError); models/qwen/config.py from_hugging_face: qwen_type = model_type,
    // MoeConfig(normalization_mode=NONE = 0), moe_intermediate_size / moe_shared_expert_intermediate_size,
    // use_logn_attn; attn_bias true for qwen2 (q/k/v biases).
    expect(qwen).toMatchObject({ architecture: 'Qwen2ForCausalLM', qwen_type: 'qwen2', moe: { num_experts: 0, top_k: 0, normalization_mode: 0 }, moe_intermediate_size: 0, moe_shared_expert_intermediate_size: 0, use_logn_attn: false, attn_bias: true });
    // MoeConfig.from_dict is cls(**config): only keys every version's dataclass has.
    for (const c of [llama, qwen]) expect(Object.keys(c.moe).sort()).toEqual(['normalization_mode', 'num_experts', 'top_k']);
  });

  it('rotary_scaling carries what layers/attention.py reads per type (llama3 factors, yarn original_max_position_embeddings)', async () => {
    const { rotaryScaling } = await import('../backends/tensorrt-llm/emit.js');
    expect(rotaryScaling(null)).toBeNull();
    expect(rotaryScaling({ type: 'linear', factor: 2 })).toEqual({ type: 'linear', factor: 2 });
    // RopeEmbeddingUtils (llama3): factor, low_freq_factor, high_freq_factor, original_max_position_embeddings.
    expect(rotaryScaling({ type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 })).toEqual({ type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 });
    // yarn: original_max_position_embeddings defaults to 4096 there, so it is always written, with the betas.
    const yarn = { type: 'yarn' as const, factor: 4, originalMaxPositions: 8192, betaFast: 16, betaSlow: 2, truncate: true, attentionFactor: 0.1 * Math.log(4) + 1 };
    expect(rotaryScaling(yarn)).toMatchObject({ type: 'yarn', factor: 4, original_max_position_embeddings: 8192, beta_fast: 16, beta_slow: 2 });
  });

  it('MoE families are written (router, stacked experts: test/tensorrt-llm-families.test.ts); an MoE the class cannot express is one line, exit 2, nothing written', async () => {
    const moe = await generateFixture(path.join(tmp, 'mixtral-norenorm'), { arch: 'mixtral', seed: 3, tokenizer: 'none' });
    // LLaMAConfig's MoE renormalizes the top-k weights; a checkpoint saying otherwise cannot be expressed.
    const cfgPath = path.join(moe.dir, 'config.json');
    const cfg = JSON.parse(await fsp.readFile(cfgPath, 'utf8'));
    const { normalizeConfig: norm } = await import('../src/core/arch/spec.js');
    const spec = norm(cfg, cfgPath);
    const { trtllmRefusal } = await import('../backends/tensorrt-llm/check.js');
    const { archOf } = await import('../src/core/arch/registry.js');
    expect(trtllmRefusal({ ...spec, moe: { ...spec.moe!, routing: 'softmax-topk' } }, archOf(spec).tensorrtLlm!)).toMatch(/without renormalization/);
    expect(trtllmRefusal(spec, archOf(spec).tensorrtLlm!)).toBeNull();
  });
});
