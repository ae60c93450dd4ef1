/**
 * The `gguf-levels` target: one GGUF per elastic level of the `reorder` pass, each a physically
 * sliced model (prefixes of the reordered weights) written by the gguf backend itself, in
 * `<level id>/model.gguf`.
 *
 * Why uniform widths: the gguf backend writes the `llama` architecture, whose GGUF keys
 * (head_count_kv, feed_forward_length) are one value for all layers. llama.cpp reads those keys as
 * per-layer arrays for some architectures (e.g. `deci`), so per-layer widths are possible there,
 * but not through the llama arch. For this target the reorder pass therefore plans levels with one
 * width for every layer (no full-width anchors), and the manifest's levels are exactly the files.
 */
import path from 'node:path';
import { LlmcError, UsageError } from '../../src/core/errors.js';
import { ensureOutputDir } from '../../src/core/util/atomic.js';
import type { ReorderMetadata } from '../../passes/reorder/index.js';
import { sliceSource, uniformWidth } from '../../passes/reorder/slice.js';
import { ggufBackend } from '../gguf/index.js';
import type { Backend, BackendContext, BackendResult } from '../types.js';

export const ggufLevelsBackend: Backend = {
  name: 'gguf-levels',
  description: 'one GGUF per elastic level of --passes reorder (uniform widths), <level>/model.gguf',
  async emit(ctx: BackendContext): Promise<BackendResult> {
    const rec = ctx.passes.find((p) => p.name === 'reorder');
    if (!rec) throw new UsageError('--target gguf-levels needs --passes reorder');
    const md = rec.metadata as unknown as ReorderMetadata;
    const files: string[] = [];
    const levels: Record<string, unknown>[] = [];
    for (const lv of md.levels) {
      if (!uniformWidth(lv.layers)) throw new LlmcError(`level ${lv.id} has per-layer widths; a llama GGUF needs one width for all layers`);
      const dir = path.join(ctx.outDir, lv.id);
      await ensureOutputDir(dir);
      const r = await ggufBackend.emit({ ...ctx, source: sliceSource(ctx.source, lv.layers, `level ${lv.id}`), outDir: dir });
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
      });
    }
    return { files, targetInfo: { format: 'gguf-levels', widths: 'uniform', levels } };
  },
};
