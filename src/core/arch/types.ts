/**
 * The normalized architecture spec: one shape for every supported Hugging Face `model_type`, so
 * passes, engines and targets never read config.json themselves (spec.ts makes it from config.json).
 */

/** The Hugging Face model_type names the architecture registry knows. */
export type ModelType = 'llama' | 'mistral' | 'qwen2' | 'mixtral' | 'qwen2_moe';

/** rope_scaling as Hugging Face writes it; `type` is normalized from `rope_type` | `type`. */
export type RopeScaling =
  | { type: 'linear'; factor: number }
  | { type: 'dynamic'; factor: number; originalMaxPositions?: number }
  | { type: 'yarn'; factor: number; originalMaxPositions?: number; betaFast?: number; betaSlow?: number }
  | {
      type: 'llama3';
      factor: number;
      lowFreqFactor: number;
      highFreqFactor: number;
      originalMaxPositions: number;
    };

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
  hiddenAct: 'silu';
  slidingWindow: number | null;
  bosTokenId: number | null;
  eosTokenIds: number[];
  /** The dtype the checkpoint declares (torch_dtype), informational. */
  torchDtype: string | null;
  moe: MoeSpec | null;
}

