/**
 * The model IR: the transformer written once as a plain list of ops over named values, so every
 * lowering (ONNX for onnxruntime, tfjs for gradients, the TS runtime) walks the same structure.
 *
 * Conventions
 * - Activations are [B, T, C] float32 (batch, tokens, channels); heads live inside C as
 *   C = heads × headDim, head-major (as Hugging Face reshapes q/k/v).
 * - Weights are referenced by their Hugging Face tensor name and read from the ModelSource by
 *   the lowering; linears follow HF's [out, in] layout: y = x · Wᵀ (+ b).
 * - Ops appear in topological order; every value is written once.
 *
 * Op vocabulary (the whole list a lowering must implement)
 *   embed            out[b,t,:] = table[ids[b,t], :]
 *   rmsnorm          out = x · rsqrt(mean(x², last axis) + eps) · w     (float32, as HF)
 *                    `heads`: x holds heads × dim channels, each head normalized alone with the
 *                    same w [dim] (qwen3's q/k norms); `offset` 1: the weight applied is (1 + w)
 *   scale            out = x · by   (a constant: granite's multipliers)
 *   linear           out = x · Wᵀ (+ bias)                               W is [out, in]
 *   rope             rotate_half rope on x [B,T,n·hd] with cos/sin [T, hd/2] (tables from rope.ts)
 *   attention        masked GQA attention with a KV cache:
 *                    q [B,T,H·hd], k/v [B,T,Hkv·hd] (already roped), pastK/pastV [B,Hkv,P,hd]
 *                    → out [B,T,H·hd], presentK/presentV [B,Hkv,P+T,hd]; query t sits at
 *                    position P+t and sees the keys its `mask` keeps (AttentionMask below;
 *                    causal: 0..P+t); scores scaled by `scale` (default 1/sqrt(hd)),
 *                    then soft-capped when `softcap` is set: cap·tanh(s/cap), before the mask
 *   silu | sigmoid   elementwise
 *   gelu_tanh        elementwise 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³)))  (gemma's MLP)
 *   softcap          out = cap · tanh(x / cap)   (gemma's final logits)
 *   mul | add        elementwise with numpy broadcasting ([B,T,1] scales [B,T,C])
 *   moe              a mixture-of-experts SwiGLU block: router logits x · Rᵀ [B,T,E], top-k routing
 *                    over the experts, each expert's output scaled by its routing weight and summed in
 *                    expert order, plus an optional shared expert scaled by sigmoid(gate(x)).
 *                    A coarse op: executors may dispatch tokens to their experts (the TS runtime
 *                    does); expandMoe (expand.ts) defines it in the primitive ops below, which the
 *                    ONNX and tfjs lowerings run (every expert on every token, static shapes).
 * Primitive ops that only appear in expandMoe's output:
 *   router           top-k MoE routing from logits [B,T,E] → dense weights [B,T,E] (zero for
 *                    unselected experts) and a 0/1 selection mask [B,T,E]:
 *                      'softmax-topk-renorm': softmax over the top-k logits (≡ softmax-all,
 *                                             top-k, renormalize: Mixtral, qwen2_moe norm_topk_prob)
 *                      'softmax-topk':        softmax over all experts, keep the top-k as is
 *   column           out[b,t,0] = x[b,t,index]   (one expert's routing weight, [B,T,1])
 *   gatherPositions  out[b,n,:] = x[b,positions[n],:]   (pick the positions that need logits)
 *
 * Elastic widths: linear ops (and moe experts) say which axis of theirs is made of elastic units
 * (`elastic`): query heads, KV groups or the neurons of one MLP of a layer. An executor running a
 * sub-model of prefixes of those units (an elastic level) computes only the kept rows and columns,
 * as width.ts defines them (one definition every executor applies).
 *
 * Graph inputs (see buildModel): input_ids int64 [B,T], cos/sin f32 [T, hd/2], logit_positions
 * int64 [N], past_key_<l>/past_value_<l> f32 [B,Hkv,P,hd]. Outputs: logits [B,N,V],
 * present_key_<l>/present_value_<l>.
 *
 * Tap points are not ops: `graph.taps` names values that profiling may observe (inputs of every
 * linear, outputs of the decoder layers' linears, per-head attention outputs, router logits, MLP
 * intermediates); a lowering materializes
 * only the ones asked for, so the op list is identical with or without taps.
 */
import type { ArchSpec } from '../arch/spec.js';

/** A value name. */
export type V = string;

/** Which MLP of a layer a neuron axis belongs to (which width of an elastic level applies). */
export type MlpSlot =
  /** The MLP of a dense model (the level's `ffn`). */
  | 'mlp'
  /** A dense layer of an MoE model (qwen2_moe mlp_only_layers). */
  | 'dense'
  /** An MoE layer's shared expert. */
  | 'shared'
  /** Routed expert e. */
  | { expert: number };

/** An axis made of elastic units (whole heads keep their head_dim channels together). */
export type ElasticAxis =
  | { unit: 'q-heads'; layer: number }
  | { unit: 'kv-heads'; layer: number }
  | { unit: 'neurons'; layer: number; mlp: MlpSlot };

/** One SwiGLU MLP of an moe op (Hugging Face tensor names; biases when the model has mlp_bias). */
export interface MoeMlp {
  /** `model.layers.<l>.mlp.experts.<e>` etc.: the MLP's name prefix (taps and values use it). */
  prefix: string;
  gate: string;
  up: string;
  down: string;
  bias: boolean;
  width: number;
  slot: MlpSlot;
}

/**
 * Which keys a query at position p sees (mask.ts: the one definition executors read).
 *   causal   keys 0..p
 *   sliding  keys p−window+1..p (Mistral, qwen2's windowed layers)
 *   chunk    keys of p's own chunk of `size` positions up to p: ⌊p/size⌋·size..p (chunked local attention)
 *   tree     the new tokens are a tree (speculative verification): each sees the committed keys and its
 *            ancestors, listed per token by the graph input `ancestors`, all within `base`'s span;
 *            a call that feeds no ancestors is a chain (= base).
 */
export type AttentionMask =
  | { kind: 'causal' }
  | { kind: 'sliding'; window: number }
  | { kind: 'chunk'; size: number }
  | { kind: 'tree'; ancestors: V; base: Exclude<AttentionMask, { kind: 'tree' }> };

export type Op =
  | { op: 'embed'; out: V; ids: V; table: string }
  | {
      op: 'rmsnorm';
      out: V;
      x: V;
      weight: string;
      eps: number;
      /** The weight's length: the channels normalized together. */
      dim: number;
      /** x is heads × dim channels, each head normalized alone (absent: x is dim channels). */
      heads?: number;
      /** 1: the weight is applied as (1 + w) (absent: 0). */
      offset?: 0 | 1;
    }
  | { op: 'scale'; out: V; x: V; by: number }
  | {
      op: 'linear';
      out: V;
      x: V;
      weight: string;
      bias: string | null;
      inFeatures: number;
      outFeatures: number;
      /** Elastic axes: of the outputs (weight rows) and of the inputs (weight columns). */
      elastic?: { rows?: ElasticAxis; cols?: ElasticAxis };
    }
  | { op: 'rope'; out: V; x: V; cos: V; sin: V; heads: number; headDim: number }
  | {
      op: 'attention';
      out: V;
      presentK: V;
      presentV: V;
      q: V;
      k: V;
      v: V;
      pastK: V;
      pastV: V;
      /** The decoder layer (its KV cache). */
      layer: number;
      heads: number;
      kvHeads: number;
      headDim: number;
      /** The keys each query sees. */
      mask: AttentionMask;
      /** The scores' scale (absent: 1/sqrt(headDim)). */
      scale?: number;
      /** Scores become cap·tanh(s/cap) after scaling, before the mask; absent: none. */
      softcap?: number;
    }
  | { op: 'silu'; out: V; x: V }
  | { op: 'sigmoid'; out: V; x: V }
  | { op: 'gelu_tanh'; out: V; x: V }
  | { op: 'softcap'; out: V; x: V; cap: number }
  | { op: 'mul'; out: V; a: V; b: V }
  | { op: 'add'; out: V; a: V; b: V }
  | {
      op: 'moe';
      out: V;
      /** The normalized hidden state the router and experts read, [B,T,D]. */
      x: V;
      /** The router's weight [E, D]. */
      router: string;
      /** The name of the router logits [B,T,E] inside the op (profiling taps observe it). */
      logits: V;
      layer: number;
      hidden: number;
      topK: number;
      mode: 'softmax-topk-renorm' | 'softmax-topk';
      experts: MoeMlp[];
      shared: { mlp: MoeMlp; gate: string } | null;
    }
  | { op: 'router'; weights: V; mask: V; logits: V; numExperts: number; topK: number; mode: 'softmax-topk-renorm' | 'softmax-topk' }
  | { op: 'column'; out: V; x: V; index: number }
  | { op: 'gatherPositions'; out: V; x: V; positions: V };

export type OpName = Op['op'];

export interface GraphInput {
  name: V;
  dtype: 'int64' | 'float32';
  /** Numbers are fixed sizes; strings are symbolic (B, T, P, N). */
  dims: (number | string)[];
}

export type TapKind = 'linear-input' | 'linear-output' | 'head-output' | 'router-logits' | 'mlp-act';

export interface TapPoint {
  kind: TapKind;
  layer: number;
  /**
   * What is observed, named the Hugging Face way:
   *   linear-input:  the linear's weight name (q/k/v share one input value but get one key each)
   *   linear-output: the linear's weight name; value = its output, observed before the bias is added
   *   head-output:   `model.layers.<l>.self_attn` (value [B,T,H·hd], before o_proj)
   *   router-logits: the router weight name
   *   mlp-act:       the MLP prefix (`model.layers.<l>.mlp`, `...experts.<e>`, `...shared_expert`);
   *                  value = act(gate)·up [B,T,I]
   */
  key: string;
  value: V;
  /** Channel count of the value's last axis. */
  channels: number;
  /** For per-expert points: a [B,T,1] 0/1 value marking the tokens routed to that expert. */
  mask: V | null;
  /** head-output: number of heads the channels split into. */
  heads?: number;
}

export interface ModelGraph {
  spec: ArchSpec;
  inputs: GraphInput[];
  ops: Op[];
  outputs: V[];
  taps: TapPoint[];
}
