/**
 * The cuda target's formats and options (light: the descriptor, the pass manager and --help read
 * them). Formats: fp32, fp16, int8 (weight-only, per output channel) and int4 (weight-only,
 * blockwise along the input axis; the block is in the name so the pass manager and the reorder
 * pass see it: int4 = block 32, int4-b64, int4-b128).
 */
import { formatIn } from '../../src/core/pipeline/format-names.js';
import { UsageError } from '../../src/core/errors.js';
import type { OptionSchema, OptionSpec } from '../../src/core/pipeline/options.js';
import type { FormatRequest } from '../../src/core/pipeline/target.js';

export const CUDA_FORMATS = ['fp32', 'fp16', 'int8', 'int4', 'int4-b64', 'int4-b128'] as const;
export type CudaFormat = (typeof CUDA_FORMATS)[number];
export const EMBEDDING_FORMATS = ['fp32', 'fp16', 'int8'] as const;
export type EmbeddingFormat = (typeof EMBEDDING_FORMATS)[number];
export const DEFAULT_FORMAT: CudaFormat = 'fp16';

/** Device profiles of build-engine.sh (shape ranges, workspace, DLA). */
export const DEVICE_PROFILES = ['desktop', 'orin', 'orin-dla', 'xavier'] as const;
export type DeviceProfile = (typeof DEVICE_PROFILES)[number];

export const blockOf = (f: string): number => (f === 'int4' ? 32 : f === 'int4-b64' ? 64 : f === 'int4-b128' ? 128 : 1);

/** Quantization block along a row (elastic in-sliced widths align to it): the widest int4 block asked for. */
export function cudaQuantBlock(r: FormatRequest, lmHead?: string): number {
  return Math.max(blockOf(r.quant ?? DEFAULT_FORMAT), ...r.tensorTypes.map((t) => blockOf(t.type)), lmHead ? blockOf(lmHead) : 1);
}

export interface CudaOptions {
  /** Weights in onnx/model.onnx_data: always, never (refused above 2 GiB), or above 2 GiB. */
  externalData: 'auto' | boolean;
  int4: 'matmulnbits' | 'dequantizelinear';
  zeroPoints: boolean;
  /** Activations and KV cache; default fp16 for --quant fp16, fp32 otherwise. */
  compute: 'fp32' | 'fp16' | null;
  /** Format of the lm_head (the tied embedding table used as the head); default: --quant's. */
  lmHead: CudaFormat | null;
  /** Format of the embedding table the Gather reads; default: fp32 | fp16 as computed, int8 for int8/int4. */
  embeddings: EmbeddingFormat | null;
  /** Run build-engine.sh after writing (needs trtexec). */
  build: boolean;
  profile: DeviceProfile;
  /** Caps the profiles' context (tokens); default: each profile's own cap and max_position_embeddings. */
  maxContext: number | null;
}

export const CUDA_OPTION_SPECS: readonly OptionSpec[] = [
  { key: 'externalData', help: 'weights in onnx/model.onnx_data: true | false | auto (above 2 GB)', default: 'auto' },
  { key: 'int4', help: 'int4 encoding: matmulnbits (com.microsoft, onnxruntime / GenAI) | dequantizelinear (opset 21 blocked, TensorRT 10)', default: 'matmulnbits' },
  { key: 'zeroPoints', help: 'int4 with a zero point per block (asymmetric) instead of symmetric', default: 'false' },
  { key: 'compute', help: 'activations and KV cache: fp32 | fp16', default: 'fp16 for --quant fp16, else fp32' },
  { key: 'lmHead', help: `lm_head format: ${CUDA_FORMATS.join(' | ')}`, default: "--quant's" },
  { key: 'embeddings', help: `embedding table format: ${EMBEDDING_FORMATS.join(' | ')}`, default: 'fp32/fp16 as computed; int8 for int8 and int4' },
  { key: 'build', help: 'run build-engine.sh (trtexec) after writing: true | false', default: 'false' },
  { key: 'profile', help: `device profile of the engine build: ${DEVICE_PROFILES.join(' | ')}`, default: 'desktop' },
  { key: 'maxContext', help: "caps the engine profiles' context length (tokens)", default: "each profile's cap" },
];

const oneOf = <T extends string>(key: string, v: string, list: readonly T[]): T => {
  // Format names in any case and by any alias (F16 = fp16), as --quant takes them.
  const hit = list.find((x) => x === v.trim().toLowerCase()) ?? (formatIn(list, v) as T | null);
  if (!hit) throw new UsageError(`cuda.${key} must be one of ${list.join(', ')}, got "${v}"`);
  return hit;
};
const bool = (key: string, v: string) => oneOf(key, v, ['true', 'false'] as const) === 'true';

export function parseCudaOptions(raw: Readonly<Record<string, string>>): CudaOptions {
  let maxContext: number | null = null;
  if (raw.maxContext !== undefined) {
    if (!/^\d+$/.test(raw.maxContext.trim()) || Number(raw.maxContext) < 2) throw new UsageError(`cuda.maxContext must be an integer ≥ 2, got "${raw.maxContext}"`);
    maxContext = Number(raw.maxContext);
  }
  return {
    externalData: raw.externalData === undefined ? 'auto' : ({ auto: 'auto', true: true, false: false } as const)[oneOf('externalData', raw.externalData, ['auto', 'true', 'false'] as const)],
    int4: raw.int4 === undefined ? 'matmulnbits' : oneOf('int4', raw.int4, ['matmulnbits', 'dequantizelinear'] as const),
    zeroPoints: raw.zeroPoints === undefined ? false : bool('zeroPoints', raw.zeroPoints),
    compute: raw.compute === undefined ? null : oneOf('compute', raw.compute, ['fp32', 'fp16'] as const),
    lmHead: raw.lmHead === undefined ? null : oneOf('lmHead', raw.lmHead, CUDA_FORMATS),
    embeddings: raw.embeddings === undefined ? null : oneOf('embeddings', raw.embeddings, EMBEDDING_FORMATS),
    build: raw.build === undefined ? false : bool('build', raw.build),
    profile: raw.profile === undefined ? 'desktop' : oneOf('profile', raw.profile, DEVICE_PROFILES),
    maxContext,
  };
}

export const CUDA_OPTIONS: OptionSchema<CudaOptions> = { specs: CUDA_OPTION_SPECS, parse: parseCudaOptions };
