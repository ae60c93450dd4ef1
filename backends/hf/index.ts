/** Target `hf`: a Hugging Face checkpoint directory every llmc command accepts again. ./emit.ts writes it. */
import { NO_OPTIONS } from '../../src/core/pipeline/options.js';
import type { TargetDescriptor } from '../../src/core/pipeline/target.js';
import { HF_INFO, type HfInfo } from './info.js';

export const hf: TargetDescriptor<unknown, HfInfo> = {
  name: 'hf',
  description: 'Hugging Face checkpoint dir (safetensors + config.json + tokenizer files)',
  formats: { quant: ['F32', 'F16', 'BF16'], default: null, tensorTypes: null },
  options: NO_OPTIONS,
  capabilities: {
    elasticWidths: { kind: 'uniform', why: "a transformers config has one head count and one FFN width for all layers; each level is its own checkpoint" },
    perTensorFormats: false,
    perExpertFormats: false,
    qdq: false,
    lowers: { moe: true, 'sliding-window': true, 'tree-mask': false, 'chunk-graphs': false, 'shadow-outliers': false },
    adapters: true,
    speculative: false,
    expertCache: false,
  },
  quantBlock: () => 1,
  // Each level below full is its own checkpoint folder: its weights file is the level's bytes; the full level's is the root's.
  levelBytes(m, lv) {
    const dir = HF_INFO.read(m.targetInfo).levels?.find((l) => l.id === lv.id)?.dir;
    return m.files.find((f) => f.path === (dir ? `${dir}/model.safetensors` : 'model.safetensors'))?.size ?? 0;
  },
  requires: [],
  info: HF_INFO,
  load: async () => (await import('./emit.js')).hfTarget,
  open: async (a, o) => (await import('./run.js')).openHf(a, o),
};
