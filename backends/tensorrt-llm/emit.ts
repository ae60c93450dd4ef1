/**
 * The `tensorrt-llm` target: a TensorRT-LLM checkpoint for the Llama family (llama, mistral, qwen2),
 * one rank (tp = pp = 1): config.json (PretrainedConfig.to_dict's fields) and rank0.safetensors with
 * TensorRT-LLM's tensor names — q/k/v fused into attention.qkv, gate_proj → mlp.fc (the activated
 * branch), up_proj → mlp.gate, down_proj → mlp.proj, the tied embedding written again as lm_head.
 *
 * int8 / int4 weight-only (quant_algo W8A16 / W4A16): the weights are written in the model dtype and
 * trtllm-build quantizes them per output channel when it loads the checkpoint (preprocess_weights →
 * weight_only_quantize_dict quantizes every qkv/dense/fc/gate/proj weight that is not already int8).
 * Pre-quantized int8 weights would have to be in the mixed-GEMM kernels' interleaved layout, which
 * depends on the GPU architecture that builds the engine; leaving that step to trtllm-build keeps the
 * checkpoint valid on every GPU. docs/tensorrt-llm.md has the field-by-field description.
 */
import path from 'node:path';
import { biasOf, EMBED, FINAL_NORM, LM_HEAD, layerNames } from '../../src/core/arch/names.js';
import { DTYPE_BYTES, fromF32, numel, writeSafetensors, type FloatDType, type TensorToWrite } from '../../src/core/checkpoint/safetensors.js';
import { LlmcError } from '../../src/core/errors.js';
import { yarnDefaultAttention } from '../../src/core/arch/rope-config.js';
import type { ArchSpec } from '../../src/core/arch/spec.js';
import { archOf, type TrtllmFamily } from '../../src/core/arch/registry.js';
import type { EmitContext, EmitResult, Target } from '../../src/core/pipeline/target.js';
import { refuseGraphEdits, type CompileUnit } from '../../src/core/pipeline/unit.js';
import type { TensorrtLlmInfo } from './info.js';
import { writeFileAtomic } from '../../src/core/util/atomic.js';

export const WEIGHTS = 'rank0.safetensors';

const DTYPE: Record<string, { dtype: string; st: FloatDType }> = {
  fp16: { dtype: 'float16', st: 'F16' },
  bf16: { dtype: 'bfloat16', st: 'BF16' },
  fp32: { dtype: 'float32', st: 'F32' },
  int8: { dtype: 'float16', st: 'F16' },
  int4: { dtype: 'float16', st: 'F16' },
};
const QUANT_ALGO: Record<string, string | null> = { fp16: null, bf16: null, fp32: null, int8: 'W8A16', int4: 'W4A16' };

/**
 * rotary_scaling as TensorRT-LLM's LLaMAConfig takes it (Hugging Face's rope_scaling keys). A rope
 * it cannot express (longrope here; yarn with an attention factor, betas or truncation other than
 * its defaults) is refused with one line naming it, never dropped.
 */
export function rotaryScaling(rs: ArchSpec['ropeScaling']): Record<string, unknown> | null {
  if (!rs) return null;
  const refuse = (why: string): never => {
    throw new LlmcError(`rope type "${rs.type}"${why} is not expressible in TensorRT-LLM's rotary_scaling; the tensorrt-llm target refuses rather than drop it`);
  };
  switch (rs.type) {
    case 'linear':
    case 'dynamic':
      return { type: rs.type, factor: rs.factor };
    case 'llama3':
      return { type: rs.type, factor: rs.factor, low_freq_factor: rs.lowFreqFactor, high_freq_factor: rs.highFreqFactor, original_max_position_embeddings: rs.originalMaxPositions };
    case 'yarn':
      if (!yarnDefaultAttention(rs)) refuse(` with attention factor ${rs.attentionFactor}`);
      if (!rs.truncate) refuse(' with truncate false');
      return { type: rs.type, factor: rs.factor, original_max_position_embeddings: rs.originalMaxPositions, beta_fast: rs.betaFast, beta_slow: rs.betaSlow, mscale: 1, mscale_all_dim: 0 };
    case 'longrope':
      return refuse('');
  }
}

/** The TensorRT-LLM class of the spec's family (its registry entry); the descriptor refuses a family without one before emit. */
function trtllmFamily(s: ArchSpec): TrtllmFamily {
  const cls = archOf(s).tensorrtLlm;
  if (!cls) throw new LlmcError(`internal: tensorrt-llm emit for ${s.modelType} (the descriptor refuses it)`);
  return cls;
}

/**
 * config.json: PretrainedConfig.to_dict's fields (models/modeling_utils.py) and those of the model
 * class's config (the family's TrtllmFamily.config: LLaMAConfig's or QWenConfig's own fields).
 */
export function trtllmConfig(unit: CompileUnit, quant: string): Record<string, unknown> {
  const s = unit.source.spec;
  const cls = trtllmFamily(s);
  const common = {
    architecture: cls.architecture,
    dtype: DTYPE[quant].dtype,
    logits_dtype: 'float32',
    vocab_size: s.vocabSize,
    max_position_embeddings: s.maxPositions,
    hidden_size: s.hiddenSize,
    num_hidden_layers: s.numLayers,
    num_attention_heads: s.numHeads,
    num_key_value_heads: s.numKvHeads,
    head_size: s.headDim,
    hidden_act: s.hiddenAct,
    intermediate_size: s.intermediateSize,
    norm_epsilon: s.rmsNormEps,
    position_embedding_type: 'rope_gpt_neox',
    rotary_base: s.ropeTheta,
    rotary_scaling: rotaryScaling(s.ropeScaling),
    attn_bias: s.qkvBias,
    mlp_bias: s.mlpBias,
    disable_weight_only_quant_plugin: false,
    use_parallel_embedding: false,
    embedding_sharding_dim: 0,
    tie_word_embeddings: s.tieEmbeddings,
    mapping: { world_size: 1, tp_size: 1, pp_size: 1 },
    quantization: { quant_algo: QUANT_ALGO[quant], kv_cache_quant_algo: null, exclude_modules: ['lm_head'] },
  };
  return { ...common, ...cls.config(s) };
}

export const tensorrtLlmTarget: Target<unknown, TensorrtLlmInfo> = {
  async emit(unit: CompileUnit, ctx: EmitContext): Promise<EmitResult<TensorrtLlmInfo>> {
    refuseGraphEdits(unit, 'tensorrt-llm');
    const { source } = unit;
    const s = source.spec;
    trtllmFamily(s);
    const quant = ctx.formats.quant ?? 'fp16';
    const st = DTYPE[quant].st;
    const shape = (name: string) => {
      const m = source.meta(name);
      if (!m) throw new LlmcError(`missing tensor "${name}"`, source.description);
      return m.shape;
    };
    const tensors: TensorToWrite[] = [];
    /** Each written tensor's source tensors, for the compile summary. */
    const sources = new Map<string, string[]>();
    const one = (name: string, from: string) => (sources.set(name, [from]), tensors.push({ name, dtype: st, shape: shape(from), bytes: async () => fromF32(await source.readF32(from), st) }));
    /** Rows of several HF tensors stacked in order (q, k, v → qkv). */
    const stacked = (name: string, from: string[]) => {
      sources.set(name, from);
      const shapes = from.map(shape);
      tensors.push({
        name,
        dtype: st,
        shape: [shapes.reduce((a, x) => a + x[0], 0), ...shapes[0].slice(1)],
        bytes: async () => {
          const parts = await Promise.all(from.map((f) => source.readF32(f)));
          const all = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
          let at = 0;
          for (const p of parts) {
            all.set(p, at);
            at += p.length;
          }
          return fromF32(all, st);
        },
      });
    };
    one('transformer.vocab_embedding.weight', EMBED);
    for (let l = 0; l < s.numLayers; l++) {
      const n = layerNames(l);
      const p = `transformer.layers.${l}`;
      one(`${p}.input_layernorm.weight`, n.inputNorm);
      stacked(`${p}.attention.qkv.weight`, [n.q, n.k, n.v]);
      if (s.qkvBias) stacked(`${p}.attention.qkv.bias`, [n.qBias, n.kBias, n.vBias]);
      one(`${p}.attention.dense.weight`, n.o);
      one(`${p}.post_layernorm.weight`, n.postNorm);
      one(`${p}.mlp.fc.weight`, n.mlp.gate);
      one(`${p}.mlp.gate.weight`, n.mlp.up);
      one(`${p}.mlp.proj.weight`, n.mlp.down);
      if (s.mlpBias) {
        one(`${p}.mlp.fc.bias`, biasOf(n.mlp.gate));
        one(`${p}.mlp.gate.bias`, biasOf(n.mlp.up));
        one(`${p}.mlp.proj.bias`, biasOf(n.mlp.down));
      }
    }
    one('transformer.ln_f.weight', FINAL_NORM);
    one('lm_head.weight', s.tieEmbeddings ? EMBED : LM_HEAD);
    ctx.progress.start('tensorrt-llm: writing rank0.safetensors', tensors.length);
    await writeSafetensors(
      path.join(ctx.outDir, WEIGHTS),
      tensors.map((t) => ({ ...t, bytes: async () => ((b) => (ctx.progress.tick(), b))(await t.bytes()) })),
    );
    ctx.progress.done();
    const config = trtllmConfig(unit, quant);
    await writeFileAtomic(path.join(ctx.outDir, 'config.json'), JSON.stringify(config, null, 4) + '\n');
    return {
      files: ['config.json', WEIGHTS],
      targetInfo: { format: 'tensorrt-llm-checkpoint', dtype: String(config.dtype), quantAlgo: QUANT_ALGO[quant], ranks: 1 },
      tensors: tensors.map((t) => ({ name: t.name, sources: sources.get(t.name)!, format: st, bytes: numel(t.shape) * DTYPE_BYTES[st] })),
    };
  },
};
