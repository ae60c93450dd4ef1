/**
 * The architecture registry: everything llmc knows about a Hugging Face `model_type`, in one entry.
 * Adding an architecture of the Llama family (RMSNorm, RoPE, SwiGLU, GQA) means adding an entry here:
 * the config keys it reads, its tensor names and what llama.cpp calls it. Everything else (the IR,
 * every executor and target) reads the normalized ArchSpec and the names this entry gives.
 */
import { LlmcError } from '../errors.js';
import type { ArchSpec, ModelType, MoeSpec } from './types.js';

type Json = Record<string, unknown>;

/** The projections of one SwiGLU MLP (gate, up, down), as Hugging Face names them. */
export interface MlpNames {
  gate: string;
  up: string;
  down: string;
}

/** The router and expert projections of an MoE layer. */
export interface MoeNames {
  router: string;
  experts: MlpNames[];
  shared: MlpNames | null;
  sharedGate: string | null;
}

/** Config readers the entries share (they report errors against `file`). */
export interface ConfigReader {
  num(key: string, fallback?: number): number;
  posInt(key: string, fallback?: number): number;
  raw: Json;
  file: string;
}

export interface MoeFamily {
  /** The routing spec from config.json (numLayers: to find the dense layers). */
  parse(cfg: ConfigReader, numLayers: number): MoeSpec;
  /** Tensor names of layer l's router and experts. */
  names(l: number, moe: MoeSpec): MoeNames;
  /** The config.json key holding one routed expert's width (rewritten when experts are sliced). */
  expertWidthKey: string;
}

export interface ArchEntry {
  /** q/k/v projections carry biases. */
  qkvBias(cfg: Json): boolean;
  /** o_proj carries a bias. */
  oBias(cfg: Json): boolean;
  /** llama.cpp's name for the architecture (GGUF general.architecture). */
  gguf: 'llama' | 'qwen2' | 'qwen2moe';
  /** transformers' causal-LM classes of this model_type: a config whose `architectures` names none of them is not this layout. */
  causalLm: readonly string[];
  moe: MoeFamily | null;
}

/** Names of one dense SwiGLU MLP's projections under `prefix`. */
export function mlpNames(prefix: string): MlpNames {
  return { gate: `${prefix}.gate_proj.weight`, up: `${prefix}.up_proj.weight`, down: `${prefix}.down_proj.weight` };
}

/** Llama-style attention biases: only with `attention_bias: true`, then on all four projections. */
const LLAMA_BIAS = { qkvBias: (c: Json) => c.attention_bias === true, oBias: (c: Json) => c.attention_bias === true };
/** Qwen2: q/k/v always carry biases, o_proj never. */
const QWEN_BIAS = { qkvBias: () => true, oBias: () => false };

const MIXTRAL_MOE: MoeFamily = {
  parse: (c) => ({
    routing: 'softmax-topk-renorm',
    numExperts: c.posInt('num_local_experts'),
    topK: c.posInt('num_experts_per_tok'),
    expertIntermediateSize: c.posInt('intermediate_size'),
    sharedExpertIntermediateSize: null,
    denseLayers: [],
  }),
  names: (l, moe) => {
    const p = `model.layers.${l}.block_sparse_moe`;
    return {
      router: `${p}.gate.weight`,
      experts: Array.from({ length: moe.numExperts }, (_, e) => ({
        gate: `${p}.experts.${e}.w1.weight`,
        down: `${p}.experts.${e}.w2.weight`,
        up: `${p}.experts.${e}.w3.weight`,
      })),
      shared: null,
      sharedGate: null,
    };
  },
  expertWidthKey: 'intermediate_size',
};

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

/** One entry per supported `model_type`. */
export const ARCHITECTURES = {
  // 'LLaMAForCausalLM': the class name of transformers' first llama conversions (2023), same layout.
  llama: { ...LLAMA_BIAS, gguf: 'llama', causalLm: ['LlamaForCausalLM', 'LLaMAForCausalLM'], moe: null },
  mistral: { ...LLAMA_BIAS, gguf: 'llama', causalLm: ['MistralForCausalLM'], moe: null },
  qwen2: { ...QWEN_BIAS, gguf: 'qwen2', causalLm: ['Qwen2ForCausalLM'], moe: null },
  mixtral: { ...LLAMA_BIAS, gguf: 'llama', causalLm: ['MixtralForCausalLM'], moe: MIXTRAL_MOE },
  qwen2_moe: { ...QWEN_BIAS, gguf: 'qwen2moe', causalLm: ['Qwen2MoeForCausalLM'], moe: QWEN2_MOE },
} as const satisfies Record<ModelType, ArchEntry>;

export type { ModelType };
export const SUPPORTED_MODEL_TYPES = Object.keys(ARCHITECTURES) as ModelType[];

export function isModelType(t: unknown): t is ModelType {
  return typeof t === 'string' && Object.hasOwn(ARCHITECTURES, t);
}

/** The registry entry of a normalized spec. */
export function archOf(spec: Pick<ArchSpec, 'modelType'>): ArchEntry {
  return ARCHITECTURES[spec.modelType];
}

/**
 * The model_type a GGUF of llama.cpp's architecture `gguf` describes (with routed experts or not):
 * the first registry entry written as that architecture (llama.cpp writes mistral as llama, so a
 * dense llama GGUF reads as llama); undefined for an architecture llmc has no family for.
 */
export function modelTypeOfGguf(gguf: string, experts: boolean): ModelType | undefined {
  const entries = SUPPORTED_MODEL_TYPES.filter((t) => ARCHITECTURES[t].gguf === gguf);
  return entries.find((t) => (ARCHITECTURES[t].moe !== null) === experts) ?? entries[0];
}

/** llama.cpp's architecture names of llmc's families (GGUF general.architecture). */
export const GGUF_ARCHITECTURES: readonly string[] = [...new Set(SUPPORTED_MODEL_TYPES.map((t) => ARCHITECTURES[t].gguf))];
