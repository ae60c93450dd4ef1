/**
 * The architecture registry: every Hugging Face `model_type` llmc compiles, one family per line.
 *
 * To add a family (of the Llama kind: RMSNorm, RoPE, SwiGLU, GQA): write
 * `families/<model_type>/index.ts` exporting its ArchEntry (./family.ts says what each field means:
 * the config keys it reads, its default rope_theta and sliding-window layout, biases, experts, and
 * how each target writes it: `gguf` as llama.cpp's convert_hf_to_gguf.py class does, `tensorrtLlm`
 * as TensorRT-LLM's class or null to refuse, `ortGenai` onnxruntime-genai's model type or null), then add one line to ARCHITECTURES below. Nothing
 * else changes: ModelType, config reading, the IR, every executor and target read the entry.
 */
import type { ArchSpec } from './types.js';
import type { ArchEntry } from './family.js';
import { llama } from './families/llama/index.js';
import { mistral } from './families/mistral/index.js';
import { mixtral } from './families/mixtral/index.js';
import { qwen2 } from './families/qwen2/index.js';
import { qwen2_moe } from './families/qwen2_moe/index.js';
import { qwen3 } from './families/qwen3/index.js';
import { qwen3_moe } from './families/qwen3_moe/index.js';
import { olmoe } from './families/olmoe/index.js';
import { olmo2 } from './families/olmo2/index.js';
import { granite } from './families/granite/index.js';
import { smollm3 } from './families/smollm3/index.js';
import { gemma2 } from './families/gemma2/index.js';
import { gemma3_text } from './families/gemma3_text/index.js';
import { phi3 } from './families/phi3/index.js';

export { mlpNames } from './family.js';
export type { ArchEntry, Attention, ConfigReader, Features, FusedTensor, GgufFamily, MlpNames, MoeFamily, MoeNames, TrtllmFamily } from './family.js';

/** One entry per supported `model_type` (its transformers 5 config class's keys that change the math, and more). */
export const ARCHITECTURES = {
  llama,
  mistral,
  qwen2,
  mixtral,
  qwen2_moe,
  qwen3,
  qwen3_moe,
  olmoe,
  olmo2,
  granite,
  smollm3,
  gemma2,
  gemma3_text,
  phi3,
} satisfies Record<string, ArchEntry>;

/** The Hugging Face model_type names the registry knows. */
export type ModelType = keyof typeof ARCHITECTURES;
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
  const entries = SUPPORTED_MODEL_TYPES.filter((t) => ARCHITECTURES[t].gguf.arch === gguf);
  return entries.find((t) => (ARCHITECTURES[t].moe !== null) === experts) ?? entries[0];
}

/** llama.cpp's architecture names of llmc's families (GGUF general.architecture). */
export const GGUF_ARCHITECTURES: readonly string[] = [...new Set(SUPPORTED_MODEL_TYPES.map((t) => ARCHITECTURES[t].gguf.arch))];
/** The GGUF architectures llmc reads back without a manifest (a family's gguf.readBack). */
export const GGUF_READABLE: readonly string[] = [...new Set(SUPPORTED_MODEL_TYPES.filter((t) => ARCHITECTURES[t].gguf.readBack !== false).map((t) => ARCHITECTURES[t].gguf.arch))];
