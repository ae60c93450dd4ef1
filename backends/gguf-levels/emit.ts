/**
 * The `gguf-levels` target: one GGUF per elastic level (record `elastic-prefix/1`), each a
 * physically sliced model (prefixes of the reordered weights) written by the gguf target itself, in
 * `<level id>/model.gguf`. A recovered level's adapters are merged into its weights (llama.cpp runs
 * each file as an ordinary model).
 *
 * Why uniform widths: the gguf target writes the `llama` architecture, whose GGUF keys
 * (head_count_kv, feed_forward_length) are one value for all layers. llama.cpp reads those keys as
 * per-layer arrays for some architectures (e.g. `deci`), so per-layer widths are possible there,
 * but not through the llama arch. The descriptor says so (elasticWidths: uniform), so the reorder
 * pass plans levels with one width for every layer, and the manifest's levels are exactly the files.
 */
import path from 'node:path';
import { LlmcError } from '../../src/core/errors.js';
import { mergeAdapters, sliceSource, uniformWidth } from '../../src/core/pipeline/elastic.js';
import type { EmitContext, EmitResult, Target } from '../../src/core/pipeline/target.js';
import { evolve, type CompileUnit } from '../../src/core/pipeline/unit.js';
import { ELASTIC_LEVELS, findRecord } from '../../src/core/records/index.js';
import { ensureOutputDir } from '../../src/core/util/atomic.js';
import { ggufTarget } from '../gguf/emit.js';

export const ggufLevelsTarget: Target = {
  async emit(unit: CompileUnit, ctx: EmitContext): Promise<EmitResult> {
    const md = findRecord(unit.records, ELASTIC_LEVELS);
    if (!md) throw new LlmcError('internal: gguf-levels without an elastic-prefix record (the pass manager checks this)');
    const files: string[] = [];
    const levels: Record<string, unknown>[] = [];
    for (const lv of md.levels) {
      if (!uniformWidth(lv.layers)) throw new LlmcError(`level ${lv.id} has per-layer widths; a llama GGUF needs one width for all layers`);
      const dir = path.join(ctx.outDir, lv.id);
      await ensureOutputDir(dir);
      // The level's recovery adapters (if any) merged into its slice: W + scale·B·A.
      const level = evolve(unit, { source: mergeAdapters(sliceSource(unit.source, lv.layers, `level ${lv.id}`), unit.annotations, lv.id) });
      const r = await ggufTarget.emit(level, { ...ctx, outDir: dir });
      files.push(...r.files.map((f) => `${lv.id}/${f}`));
      levels.push({
        id: lv.id,
        nominal: lv.nominal,
        paramFrac: lv.paramFrac,
        file: `${lv.id}/${r.targetInfo.file as string}`,
        kvGroups: lv.layers[0].kvGroups,
        heads: lv.layers[0].heads,
        ffn: lv.layers[0].ffn,
        quant: r.targetInfo.quant,
        adaptersMerged: lv.adapters !== undefined,
      });
    }
    return { files, targetInfo: { format: 'gguf-levels', widths: 'uniform', levels } };
  },
};
