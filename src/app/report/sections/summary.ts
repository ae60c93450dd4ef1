/** Model summary: architecture, parameters, what was compiled or profiled, from which checkpoint. */
import { expectedTensors } from '../../../core/arch/names.js';
import { numel } from '../../../core/checkpoint/safetensors.js';
import { fmtBytes, fmtCount } from '../doc.js';
import type { GeneralSection } from './types.js';
import { SHARED_TARGET_INFO } from '../../../core/records/target-info.js';

export const summarySection: GeneralSection = {
  id: 'summary',
  async build(ctx) {
    const a = ctx.arch;
    const params = expectedTensors(a).reduce((s, t) => s + numel(t.shape), 0);
    const items: [string, string][] = [
      ['architecture', a.modelType + (a.moe ? ` (MoE: ${a.moe.numExperts} experts, top-${a.moe.topK})` : '')],
      ['parameters', fmtCount(params)],
      ['layers', String(a.numLayers)],
      ['hidden size', String(a.hiddenSize)],
      ['attention', `${a.numHeads} query heads, ${a.numKvHeads} KV heads, head dim ${a.headDim}`],
      ['MLP width', String(a.moe ? a.moe.expertIntermediateSize : a.intermediateSize)],
      ['vocabulary', fmtCount(a.vocabSize)],
      ['context', fmtCount(a.maxPositions)],
      ['checkpoint', ctx.checkpoint.sha256 === '' ? 'not recorded (a GGUF without llmc\'s manifest)' : `${ctx.checkpoint.path} (sha256 ${ctx.checkpoint.sha256.slice(0, 16)}…)`],
    ];
    const m = ctx.manifest;
    if (m) {
      const { quant } = SHARED_TARGET_INFO.read(m.targetInfo);
      items.push(['target', m.target + (quant ? `, ${quant}` : '')]);
      items.push(['artifact', `${m.files.length} file(s), ${fmtBytes(m.files.reduce((s, f) => s + f.size, 0))}`]);
      items.push(['passes', m.passes.map((p) => `${p.name} (${String(p.metadata.format)})`).join(', ') || 'none']);
      items.push(['llmc', m.llmcVersion]);
    }
    const p = ctx.profile;
    if (p) {
      items.push(['passes profiled', p.passes.map((x) => x.name).join(', ') || 'none']);
      items.push(['stages', `${p.stages.length} (${p.stages.map((s) => s.kind).join(', ')})${p.complete ? '' : ' — incomplete: rerun llmc profile to finish'}`]);
      items.push(['llmc', p.llmcVersion]);
    }
    return {
      id: 'summary',
      title: ctx.kind === 'artifact' ? 'Model and artifact' : 'Model and profile',
      blocks: [{ kind: 'facts', items }],
      data: { arch: a, parameters: params, checkpoint: ctx.checkpoint, target: m?.target ?? null, files: m?.files ?? null, passes: m?.passes.map((x) => x.name) ?? p?.passes.map((x) => x.name) ?? [] },
    };
  },
};
