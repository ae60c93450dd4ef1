/**
 * The normalized architecture spec: one shape for every supported Hugging Face `model_type`, so
 * passes, engines and targets never read config.json themselves (spec.ts makes it from config.json).
 */

import type { ModelType } from './registry.js';

/** The Hugging Face model_type names the architecture registry knows (one per family line there). */
export type { ModelType };

/**
 * Rotary scaling as transformers' modeling_rope_utils.py computes it, with every default resolved
 * when config.json is read (so executors never re-derive one): read from `rope_parameters`
 * (transformers >= 5) or `rope_scaling` (older), `type` normalized from `rope_type` | `type`.
 * null: the default rope. src/core/ir/rope.ts turns it into frequencies, once for every executor.
 */
export type RopeScaling =
  | { type: 'linear'; factor: number }
  /** NTK: the base grows once a sequence outgrows max_position_embeddings (transformers ignores original_max_position_embeddings here). */
  | { type: 'dynamic'; factor: number }
  | {
      type: 'yarn';
      factor: number;
      originalMaxPositions: number;
      betaFast: number;
      betaSlow: number;
      /** Floor/ceil the correction range (transformers' `truncate`, default true). */
      truncate: boolean;
      /** Multiplies cos and sin: `attention_factor`, else from mscale / mscale_all_dim, else 0.1·ln(factor)+1. */
      attentionFactor: number;
    }
  | {
      type: 'longrope';
      /** Per-frequency divisors (headDim/2 each): short up to originalMaxPositions positions, long past them. */
      shortFactor: number[];
      longFactor: number[];
      originalMaxPositions: number;
      /** Multiplies cos and sin: `attention_factor`, else sqrt(1 + ln(factor)/ln(originalMaxPositions)). */
      attentionFactor: number;
    }
  | {
      type: 'llama3';
      factor: number;
      lowFreqFactor: number;
      highFreqFactor: number;
      originalMaxPositions: number;
    };

export type RopeType = 'default' | RopeScaling['type'];

export interface MoeSpec {
  /** How the router's top-k weights are formed. */
  routing: 'softmax-topk-renorm' | 'softmax-topk';
  numExperts: number;
  topK: number;
  /** Intermediate width of one routed expert. */
  expertIntermediateSize: number;
  /** qwen2_moe: an always-on shared expert scaled by sigmoid(shared_expert_gate(x)). */
  sharedExpertIntermediateSize: number | null;
  /** Layers whose MLP is dense (qwen2_moe `mlp_only_layers` / `decoder_sparse_step`). */
  denseLayers: number[];
}

export interface ArchSpec {
  /** A key of the architecture registry (src/core/arch/registry.ts). */
  modelType: ModelType;
  hiddenSize: number;
  /** Dense MLP width (also used by qwen2_moe's dense layers). */
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  vocabSize: number;
  maxPositions: number;
  rmsNormEps: number;
  ropeTheta: number;
  ropeScaling: RopeScaling | null;
  tieEmbeddings: boolean;
  /** q/k/v projections carry biases (qwen2, or llama with attention_bias). */
  qkvBias: boolean;
  /** o_proj carries a bias (llama attention_bias=true). */
  oBias: boolean;
  mlpBias: boolean;
  /** The MLP's gate activation: SiLU (SwiGLU) or GELU with the tanh approximation (GeGLU, gemma's gelu_pytorch_tanh). */
  hiddenAct: 'silu' | 'gelu_tanh';
  /** The attention window of the sliding layers (null: every layer attends to the whole context). */
  slidingWindow: number | null;
  /** The layers that use slidingWindow (layer_types / max_window_layers); null: all of them. */
  slidingLayers: number[] | null;
  bosTokenId: number | null;
  eosTokenIds: number[];
  /** The dtype the checkpoint declares (`dtype`, else the older `torch_dtype`), informational. */
  torchDtype: string | null;
  moe: MoeSpec | null;
  /**
   * RMSNorm of the query and key projections before rope (null: none). 'head': one weight of headDim
   * shared by the heads, each head normalized alone (qwen3); 'all': over the whole projection, one weight
   * per channel (olmo2, olmoe). offset 1: the weight is stored as w − 1 (gemma).
   */
  qkNorm: QkNorm | null;
  /**
   * Where a layer's norms sit. 'pre': x + f(norm(x)) (llama); 'post': x + norm(f(x)), no input norm
   * (olmo2: post_attention_layernorm / post_feedforward_layernorm on the block outputs); 'sandwich':
   * both (gemma2/3).
   */
  normPlacement: 'pre' | 'post' | 'sandwich';
  /** The layers that rotate q and k (null: all; smollm3's no_rope_layers leaves some without). */
  ropeLayers: number[] | null;
  /** Granite's scalars (null: all 1, attention 1/sqrt(headDim)). */
  multipliers: Multipliers | null;
  /** 1: the layer and final RMSNorms multiply by (1 + w), as gemma's do; 0: by w. */
  rmsNormOffset: 0 | 1;
  /** Attention scores become cap·tanh(s/cap) before the mask (null: none; see the gemma2 family on attn_logit_softcapping). */
  attnSoftcap: number | null;
  /** The logits become cap·tanh(z/cap) (gemma final_logit_softcapping); null: none. */
  finalSoftcap: number | null;
  /**
   * The sliding layers' own rotary base (gemma3 rope_local_base_freq / rope_parameters.sliding_attention)
   * where it differs from the full layers' ropeTheta; null: every layer uses ropeTheta / ropeScaling.
   */
  localRope: { theta: number; scaling: null } | null;
}

export interface QkNorm {
  scope: 'head' | 'all';
  offset: 0 | 1;
}

export interface Multipliers {
  /** Embeddings are multiplied by this. */
  embedding: number;
  /** Each block's output is multiplied by this before it joins the residual. */
  residual: number;
  /** The attention scores' scale (null: 1/sqrt(headDim)). */
  attention: number | null;
  /** The logits are divided by this. */
  logitsDivide: number;
}

