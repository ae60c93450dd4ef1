/** Qwen2-MoE (transformers' Qwen2MoeForCausalLM): Qwen2 with routed experts and an optional gated shared expert. */
import { LlmcError } from '../../../errors.js';
import type { MoeSpec } from '../../types.js';
import { qwenTrtllm } from '../qwen2/index.js';
import { FULL, ggufExpertCounts, ggufU32, layerTypes, mlpNames, NO_BIAS_KEYS, SLIDING, slidingFrom, windowOf, type ArchEntry, type Attention, type ConfigReader, type MoeFamily } from '../../family.js';

/** By default the even layers below max_window_layers slide, with use_sliding_window. */
function attention(c: ConfigReader, numLayers: number): Attention {
  const w = c.raw.use_sliding_window === true ? windowOf(c) : null;
  const maxWindow = c.raw.max_window_layers === undefined ? 28 : c.num('max_window_layers');
  const types = layerTypes(c, numLayers) ?? Array.from({ length: numLayers }, (_, l) => ((l + 1) % 2 === 1 && l < maxWindow && w !== null ? SLIDING : FULL));
  return slidingFrom(c, types, w);
}

const QWEN2_MOE: MoeFamily = {
  parse: (c, numLayers) => {
    const step = c.posInt('decoder_sparse_step', 1);
    const mlpOnly = Array.isArray(c.raw.mlp_only_layers) ? (c.raw.mlp_only_layers as number[]) : [];
    const numExperts = c.posInt('num_experts');
    const dense: number[] = [];
    for (let l = 0; l < numLayers; l++) {
      const sparse = !mlpOnly.includes(l) && numExperts > 0 && (l + 1) % step === 0;
      if (!sparse) dense.push(l);
    }
    const shared = c.num('shared_expert_intermediate_size', 0);
    const moe: MoeSpec = {
      routing: c.raw.norm_topk_prob === true ? 'softmax-topk-renorm' : 'softmax-topk',
      numExperts,
      topK: c.posInt('num_experts_per_tok'),
      expertIntermediateSize: c.posInt('moe_intermediate_size'),
      sharedExpertIntermediateSize: shared > 0 ? shared : null,
      denseLayers: dense,
    };
    if (moe.topK > moe.numExperts) throw new LlmcError(`num_experts_per_tok (${moe.topK}) exceeds num_experts (${numExperts})`, c.file);
    return moe;
  },
  names: (l, moe) => {
    const p = `model.layers.${l}.mlp`;
    return {
      router: `${p}.gate.weight`,
      experts: Array.from({ length: moe.numExperts }, (_, e) => mlpNames(`${p}.experts.${e}`)),
      shared: moe.sharedExpertIntermediateSize ? mlpNames(`${p}.shared_expert`) : null,
      sharedGate: moe.sharedExpertIntermediateSize ? `${p}.shared_expert_gate.weight` : null,
    };
  },
  expertWidthKey: 'moe_intermediate_size',
};

export const qwen2_moe: ArchEntry = {
  // q/k/v biases unless `qkv_bias: false`.
  qkvBias: (c) => c.qkv_bias !== false,
  oBias: () => false,
  keys: [
    'use_sliding_window', 'sliding_window', 'max_window_layers', 'qkv_bias', 'num_experts', 'num_experts_per_tok', 'moe_intermediate_size',
    'shared_expert_intermediate_size', 'norm_topk_prob', 'decoder_sparse_step', 'mlp_only_layers',
  ],
  fixed: NO_BIAS_KEYS,
  defaultTheta: 10000,
  attention,
  causalLm: ['Qwen2MoeForCausalLM'],
  moe: QWEN2_MOE,
  // convert_hf_to_gguf's Qwen2MoeModel (model_arch QWEN2MOE): expert widths as their own keys.
  gguf: {
    arch: 'qwen2moe',
    metadata: (spec) => {
      const moe = spec.moe!;
      const kvs = [...ggufExpertCounts(spec), { key: 'expert_feed_forward_length', value: ggufU32(moe.expertIntermediateSize) }];
      if (moe.sharedExpertIntermediateSize) kvs.push({ key: 'expert_shared_feed_forward_length', value: ggufU32(moe.sharedExpertIntermediateSize) });
      const notes = moe.routing === 'softmax-topk-renorm' ? ['warning: norm_topk_prob=true; llama.cpp\'s qwen2moe does not renormalize the top-k router weights'] : [];
      return { kvs, notes };
    },
    permuteQK: false,
    ropeFreqs: false,
    layerTensors: () => [],
    refuse: (spec) => (spec.moe!.denseLayers.length > 0 ? `layers ${spec.moe!.denseLayers.join(', ')} are dense (mlp_only_layers / decoder_sparse_step), which llama.cpp's qwen2moe cannot load` : null),
    // llama.cpp's qwen2moe does not renormalize the top-k router weights.
    routing: 'softmax-topk',
    type70B: false,
  },
  tensorrtLlm: qwenTrtllm('qwen2_moe', 'Qwen2MoeForCausalLM'),
  ortGenai: null,
};
