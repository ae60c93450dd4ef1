/**
 * The `gguf-levels` target: one GGUF per elastic level (record `elastic-prefix/1`), each a
 * physically sliced model (prefixes of the reordered weights) written by the gguf target itself, in
 * `<level id>/model.gguf`. A recovered level's adapters are merged into its weights (llama.cpp runs
 * each file as an ordinary model).
 *
 * Widths: by default the reorder pass plans one width for every layer (elasticWidths: uniform), and
 * each file is the model's own arch (llama's GGUF keys hold one head/FFN count). With
 * reorder.widths=search (per-layer widths, anchors) a llama model's levels are written as llama.cpp's
 * `deci` arch, which reads those keys as per-layer arrays (../deci.ts); other families are refused.
 */
import path from 'node:path';
import { LlmcError } from '../../../src/core/errors.js';
import { mergeAdapters, sliceSource, uniformWidth } from '../../../src/core/pipeline/elastic.js';
import type { EmitContext, EmitPlan, EmitResult, Target } from '../../../src/core/pipeline/target.js';
import type { WrittenTensor } from '../../../src/core/pipeline/summary.js';
import { evolve, type CompileUnit } from '../../../src/core/pipeline/unit.js';
import { ELASTIC_LEVELS, findRecord } from '../../../src/core/records/index.js';
import { ensureOutputDir } from '../../../src/core/util/atomic.js';
import { ggufTarget } from '../emit.js';
import type { GgufLevelsInfo } from './info.js';

/** Each elastic level as its own sliced unit, its recovery adapters (if any) merged in: W + scale·B·A. */
function levelUnits(unit: CompileUnit) {
  return levelsOf(unit).levels.map((lv) => {
    return { lv, unit: evolve(unit, { source: mergeAdapters(sliceSource(unit.source, lv.layers, `level ${lv.id}`), unit.annotations, lv.id) }) };
  });
}

function levelsOf(unit: CompileUnit) {
  const md = findRecord(unit.records, ELASTIC_LEVELS);
  if (!md) throw new LlmcError('internal: gguf-levels without an elastic-prefix record (the pass manager checks this)');
  return md;
}

export const ggufLevelsTarget: Target<unknown, GgufLevelsInfo> = {
  async plan(unit, ctx) {
    const out: EmitPlan = { files: [], tensors: [], notes: [] };
    for (const { lv, unit: level } of levelUnits(unit)) {
      const p = await ggufTarget.plan!(level, { ...ctx, options: undefined });
      out.files.push(...p.files.map((f) => ({ ...f, path: `${lv.id}/${f.path}` })));
      out.tensors.push(...p.tensors.map((t) => ({ ...t, name: `${lv.id}/${t.name}` })));
      out.notes.push(...p.notes.map((n) => `${lv.id}: ${n}`));
    }
    return out;
  },

  async emit(unit: CompileUnit, ctx: EmitContext): Promise<EmitResult<GgufLevelsInfo>> {
    const files: string[] = [];
    const tensors: WrittenTensor[] = [];
    const levels: GgufLevelsInfo['levels'] = [];
    const perLayer = levelsOf(unit).levels.some((lv) => !uniformWidth(lv.layers));
    for (const { lv, unit: level } of levelUnits(unit)) {
      const dir = path.join(ctx.outDir, lv.id);
      await ensureOutputDir(dir);
      const r = await ggufTarget.emit(level, { ...ctx, options: undefined, outDir: dir });
      files.push(...r.files.map((f) => `${lv.id}/${f}`));
      // the summary counts every level file's tensors: the bytes the artifact holds
      tensors.push(...(r.tensors ?? []).map((t) => ({ ...t, name: `${lv.id}/${t.name}` })));
      const widest = (k: 'kvGroups' | 'heads' | 'ffn') => Math.max(...lv.layers.map((w) => w[k]));
      levels.push({
        id: lv.id,
        nominal: lv.nominal,
        paramFrac: lv.paramFrac,
        file: `${lv.id}/${r.targetInfo.file}`,
        kvGroups: widest('kvGroups'),
        heads: widest('heads'),
        ffn: widest('ffn'),
        ...(perLayer ? { layers: lv.layers.map((w) => ({ kvGroups: w.kvGroups, heads: w.heads, ffn: w.ffn })), arch: String(r.targetInfo.architecture) } : {}),
        quant: r.targetInfo.quant,
        adaptersMerged: lv.adapters !== undefined,
      });
    }
    return { files, targetInfo: { format: 'gguf-levels', widths: perLayer ? 'per-layer' : 'uniform', levels }, tensors };
  },
};
