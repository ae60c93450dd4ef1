/**
 * Target `cuda`: an ONNX decoder directory in the layout of Hugging Face Optimum's export
 * (config.json, generation_config.json, tokenizer files, onnx/model.onnx [+ model.onnx_data]) that
 * transformers.js, onnxruntime (CPU/CUDA, GenAI) and TensorRT's ONNX parser read, with
 * build-engine.sh for trtexec. ./emit.ts writes it; docs/cuda.md describes it.
 */
import type { TargetDescriptor } from '../../src/core/pipeline/target.js';
import { CUDA_INFO, type CudaInfo } from './info.js';
import { CUDA_FORMATS, CUDA_OPTIONS, cudaQuantBlock, DEFAULT_FORMAT, type CudaOptions } from './options.js';

export const cuda: TargetDescriptor<CudaOptions, CudaInfo> = {
  name: 'cuda',
  description: 'ONNX decoder dir for onnxruntime / transformers.js / TensorRT (fp32, fp16, int8, int4 MatMulNBits or DequantizeLinear) + build-engine.sh',
  formats: { quant: CUDA_FORMATS, default: DEFAULT_FORMAT, tensorTypes: CUDA_FORMATS },
  options: CUDA_OPTIONS,
  capabilities: {
    elasticWidths: { kind: 'per-layer' },
    perTensorFormats: true,
    perExpertFormats: true,
    qdq: false,
    lowers: { moe: true, 'sliding-window': true, 'tree-mask': false, 'chunk-graphs': true, 'shadow-outliers': false },
    speculative: false,
    expertCache: false,
  },
  quantBlock: (r) => cudaQuantBlock(r),
  requires: [],
  info: CUDA_INFO,
  load: async () => (await import('./emit.js')).cudaTarget,
  open: async (a, o) => (await import('./run.js')).openCuda(a, o),
};
