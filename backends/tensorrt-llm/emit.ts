/**
 * The `tensorrt-llm` target: a TensorRT-LLM checkpoint, one rank (tp = pp = 1), for every family whose
 * registry entry names a TensorRT-LLM class (LLaMAForCausalLM for llama / mistral / mixtral / granite,
 * QWenForCausalLM for qwen2 / qwen2_moe / qwen3 / qwen3_moe, GemmaForCausalLM for gemma2 / gemma3_text,
 * Phi3ForCausalLM for phi3): config.json (PretrainedConfig.to_dict's fields and the class's own) and
 * rank0.safetensors with the module names the class loads — q/k/v fused into attention.qkv,
 * gate_proj → mlp.fc (the activated branch), up_proj → mlp.gate, down_proj → mlp.proj (phi3's MLP:
 * mlp.fc = [up; gate]); MoE layers (layers/moe.py MOE): mlp.router (float32), mlp.fc stacked per
 * expert as [up; gate] (the left half linear, the right half activated), mlp.proj stacked; qwen2_moe's
 * SharedMoE adds mlp.shared_expert.fc / .proj and mlp.shared_expert_gate; q/k norms as
 * attention.q_layernorm / k_layernorm; gemma's norms as 1 + w; the tied embedding written again as
 * lm_head. Sliding windows travel as runtime_defaults.max_attention_window, one per layer.
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
import { isMoeLayer, type ArchSpec } from '../../src/core/arch/spec.js';
import { archOf, type TrtllmFamily } from '../../src/core/arch/registry.js';
import { moeNames } from '../../src/core/arch/names.js';
import { windowOf } from '../../src/core/arch/spec.js';
import { UsageError } from '../../src/core/errors.js';
import { trtllmRefusal } from './check.js';
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
export function rotaryScaling(rs: ArchSpec['ropeScaling'], longrope = false): Record<string, unknown> | null {
  if (!rs || (longrope && rs.type === 'longrope')) return null;
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
  const why = trtllmRefusal(s, cls);
  if (why) throw new UsageError(`--target tensorrt-llm cannot write this ${s.modelType} model: ${why}`);
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
    rotary_scaling: rotaryScaling(s.ropeScaling, (cls.layer ?? []).includes('longrope')),
    attn_bias: s.qkvBias,
    mlp_bias: s.mlpBias,
    disable_weight_only_quant_plugin: false,
    use_parallel_embedding: false,
    embedding_sharding_dim: 0,
    tie_word_embeddings: s.tieEmbeddings,
    mapping: { world_size: 1, tp_size: 1, pp_size: 1 },
    quantization: { quant_algo: QUANT_ALGO[quant], kv_cache_quant_algo: null, exclude_modules: ['lm_head'] },
    // PretrainedConfig(runtime_defaults=RuntimeDefaults(max_attention_window=[...])): the per-layer
    // window (cyclic KV cache) the runtime uses unless told otherwise; a full layer keeps every position.
    ...(s.slidingWindow !== null ? { runtime_defaults: { max_attention_window: Array.from({ length: s.numLayers }, (_, l) => windowOf(s, l) ?? s.maxPositions), sink_token_length: 0 } } : {}),
  };
  return { ...common, ...cls.config(s) };
}

export const tensorrtLlmTarget: Target<unknown, TensorrtLlmInfo> = {
  async emit(unit: CompileUnit, ctx: EmitContext): Promise<EmitResult<TensorrtLlmInfo>> {
    refuseGraphEdits(unit, 'tensorrt-llm');
    const { source } = unit;
    const s = source.spec;
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
    const put = (t: TensorToWrite, from: string[]) => (sources.set(t.name, from), tensors.push(t));
    const one = (name: string, from: string) => put({ name, dtype: st, shape: shape(from), bytes: async () => fromF32(await source.readF32(from), st) }, [from]);
    /** Rows of several HF tensors stacked in order (q, k, v → qkv); with `groups`, on a leading axis of that many (experts). */
    const stacked = (name: string, from: string[], groups = 1) => {
      sources.set(name, from);
      const shapes = from.map(shape);
      const rows = shapes.reduce((a, x) => a + x[0], 0);
      tensors.push({
        name,
        dtype: st,
        shape: groups > 1 ? [groups, rows / groups, ...shapes[0].slice(1)] : [rows, ...shapes[0].slice(1)],
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
    const cls = trtllmFamily(s);
    /** Gemma's converter adds 1 to every norm weight in float32 (convert.py load_gemma_weights), then casts. */
    const norm = (name: string, from: string) =>
      cls.normPlusOne ? put({ name, dtype: st, shape: shape(from), bytes: async () => fromF32((await source.readF32(from)).map((w) => w + 1), st) }, [from]) : one(name, from);
    one('transformer.vocab_embedding.weight', EMBED);
    for (let l = 0; l < s.numLayers; l++) {
      const n = layerNames(l);
      const p = `transformer.layers.${l}`;
      norm(`${p}.input_layernorm.weight`, n.inputNorm);
      stacked(`${p}.attention.qkv.weight`, [n.q, n.k, n.v]);
      if (s.qkvBias) stacked(`${p}.attention.qkv.bias`, [n.qBias, n.kBias, n.vBias]);
      if (s.qkNorm) {
        norm(`${p}.attention.q_layernorm.weight`, n.qNorm);
        norm(`${p}.attention.k_layernorm.weight`, n.kNorm);
      }
      one(`${p}.attention.dense.weight`, n.o);
      // post_layernorm: the MLP's input norm (Llama), the attention output's norm in Gemma's sandwich.
      norm(`${p}.post_layernorm.weight`, n.postNorm);
      if (s.normPlacement === 'sandwich') {
        norm(`${p}.pre_feedforward_layernorm.weight`, n.preFfNorm);
        norm(`${p}.post_feedforward_layernorm.weight`, n.postFfNorm);
      }
      if (isMoeLayer(s, l)) {
        const m = moeNames(s, l);
        // layers/moe.py MOE: the router in float32 (strict_dtype), the experts stacked on a leading axis.
        put({ name: `${p}.mlp.router.weight`, dtype: 'F32', shape: shape(m.router), bytes: async () => fromF32(await source.readF32(m.router), 'F32') }, [m.router]);
        stacked(`${p}.mlp.fc.weight`, m.experts.flatMap((e) => [e.up, e.gate]), m.experts.length);
        stacked(`${p}.mlp.proj.weight`, m.experts.map((e) => e.down), m.experts.length);
        if (m.shared) {
          stacked(`${p}.mlp.shared_expert.fc.weight`, [m.shared.up, m.shared.gate]);
          one(`${p}.mlp.shared_expert.proj.weight`, m.shared.down);
          if (m.sharedGate) one(`${p}.mlp.shared_expert_gate.weight`, m.sharedGate);
        }
        continue;
      }
      if (cls.fusedGateUp) {
        stacked(`${p}.mlp.fc.weight`, [n.mlp.up, n.mlp.gate]);
        one(`${p}.mlp.proj.weight`, n.mlp.down);
        continue;
      }
      one(`${p}.mlp.fc.weight`, n.mlp.gate);
      one(`${p}.mlp.gate.weight`, n.mlp.up);
      one(`${p}.mlp.proj.weight`, n.mlp.down);
      if (s.mlpBias) {
        one(`${p}.mlp.fc.bias`, biasOf(n.mlp.gate));
        one(`${p}.mlp.gate.bias`, biasOf(n.mlp.up));
        one(`${p}.mlp.proj.bias`, biasOf(n.mlp.down));
      }
    }
    norm('transformer.ln_f.weight', FINAL_NORM);
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
      tensors: tensors.map((t) => ({ name: t.name, sources: sources.get(t.name)!, format: t.dtype, bytes: numel(t.shape) * DTYPE_BYTES[t.dtype] })),
    };
  },
};
