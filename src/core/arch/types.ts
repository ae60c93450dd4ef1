/**
 * The normalized architecture spec: one shape for every supported Hugging Face `model_type`, so
 * passes, engines and targets never read config.json themselves (spec.ts makes it from config.json).
 */

/** The Hugging Face model_type names the architecture registry knows. */
export type ModelType = 'llama' | 'mistral' | 'qwen2' | 'mixtral' | 'qwen2_moe' | 'gemma2' | 'gemma3_text' | 'phi3';

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
  /**
   * RMSNorm on q and k before rope (qwen3, olmo2, gemma3): per head over head_dim channels, or over
   * all of q's / k's channels; offset 1: the norm multiplies by (1 + w) (gemma).
   */
  qkNorm: null | { scope: 'head' | 'all'; offset: 0 | 1 };
  /**
   * Where the decoder layer's norms sit: 'pre' (llama: norm → block → add), 'post' (olmo2: block →
   * norm → add), 'sandwich' (gemma2/3: norm → block → norm → add, for attention and MLP alike).
   */
  normPlacement: 'pre' | 'post' | 'sandwich';
  /** 1: every decoder RMSNorm (layer, final, q/k) multiplies by (1 + w), as gemma's does; 0: by w. */
  rmsNormOffset: 0 | 1;
  /** The embeddings are multiplied by this (gemma: sqrt(hidden_size) rounded to the activation dtype); null: not scaled. */
  embeddingScale: number | null;
  /** Attention scores pass through cap·tanh(s/cap) before the mask and softmax (gemma2 attn_logit_softcapping); null: none. */
  attnSoftcap: number | null;
  /** The logits pass through cap·tanh(z/cap) (gemma final_logit_softcapping); null: none. */
  finalSoftcap: number | null;
  /** Attention scores are scaled by queryPreAttnScalar^-0.5 instead of head_dim^-0.5 (gemma); null: head_dim. */
  queryPreAttnScalar: number | null;
  /**
   * The sliding layers' own rotary base (gemma3 rope_local_base_freq / rope_parameters.sliding_attention),
   * where it differs from the full layers' ropeTheta / ropeScaling; null: every layer uses those.
   */
  localRope: null | { theta: number; scaling: RopeScaling | null };
  /** The attention window of the sliding layers (null: every layer attends to the whole context). */
  slidingWindow: number | null;
  /** The layers that use slidingWindow (layer_types / max_window_layers); null: all of them. */
  slidingLayers: number[] | null;
  bosTokenId: number | null;
  eosTokenIds: number[];
  /** The dtype the checkpoint declares (`dtype`, else the older `torch_dtype`), informational. */
  torchDtype: string | null;
  moe: MoeSpec | null;
}

