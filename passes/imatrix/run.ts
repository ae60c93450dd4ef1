/**
 * Pass `imatrix`: calibration set → every decoder linear's input Σx² per column and its token count
 * (src/exec's linear-input taps, cached as profile kind `imatrix-stats`) → `importance` annotations.
 * As llama.cpp's imatrix tool: the lm_head (output.weight) is left out, q/k/v (and gate/up) each get
 * their own entry of their shared input, an expert counts only the tokens routed to it.
 */
import type { Pass, PassContext } from '../../src/core/pipeline/pass.js';
import { evolve, type CompileUnit, type TensorAnnotation } from '../../src/core/pipeline/unit.js';
import type { ImatrixRecord } from '../../src/core/records/imatrix.js';
import { silentProgress } from '../../src/core/util/progress.js';
import { openTapper } from '../../src/exec/stream/index.js';
import { calibrationSet, textFileSpec } from '../../src/measure/calibration.js';
import { pieceCache } from '../../src/measure/stream-cache.js';
import { cachedProfile } from '../../src/measure/store.js';
import type { ImatrixOptions } from './options.js';

export interface ImatrixAnalysis {
  record: ImatrixRecord;
  annotations: Map<string, TensorAnnotation>;
}

/** What the pass measures (tests call it directly). */
export async function measureImatrix(unit: CompileUnit, o: ImatrixOptions, ctx: { cacheDir?: PassContext['cacheDir']; progress?: PassContext['progress'] }): Promise<ImatrixAnalysis> {
  const { source, graph } = unit;
  const progress = ctx.progress ?? silentProgress;
  const calibSource = o.calibText ? await textFileSpec(o.calibText) : ('self-generated' as const);
  const calib = await calibrationSet(source, { source: calibSource, count: o.calibCount, length: o.calibLength, seed: o.seed, heldOut: 0 }, { cacheDir: ctx.cacheDir, progress });
  const L = graph.spec.numLayers;
  const points = graph.taps.filter((t) => t.kind === 'linear-input' && t.layer < L);
  const prof = await cachedProfile(
    ctx.cacheDir,
    'imatrix-stats',
    { checkpoint: await source.identity(), calibration: calib.key, points: points.map((p) => `${p.key}:${p.value}:${p.channels}`) },
    async () => {
      const tapper = await openTapper(source, { graph, progress, pieces: await pieceCache(source, ctx.cacheDir) });
      try {
        progress.start('imatrix: activations of the linears', 1);
        const r = await tapper.tap(calib.calib, { kind: 'linear-input', layers: Array.from({ length: L }, (_, l) => l) });
        progress.done();
        const arrays: Record<string, Float64Array> = {};
        const tokens: Record<string, number> = {};
        for (const p of points) {
          const s = r.linearInputs.get(p.key);
          if (!s) throw new Error(`internal: no linear-input statistics of ${p.key}`);
          arrays[p.key] = s.sumSq;
          tokens[p.key] = s.tokens;
        }
        return { meta: { tokens, total: r.tokens }, arrays };
      } finally {
        await tapper.close();
      }
    },
  );
  const counts = prof.meta.tokens as Record<string, number>;
  const annotations = new Map<string, TensorAnnotation>();
  for (const p of points) annotations.set(p.key, { importance: { sumSq: prof.arrays[p.key], tokens: counts[p.key] } });
  const record: ImatrixRecord = {
    format: 'imatrix/1',
    calibration: { source: calibSource === 'self-generated' ? calibSource : { text: calibSource.text }, count: o.calibCount, length: o.calibLength, seed: o.seed, profile: calib.key },
    tokens: prof.meta.total as number,
    linears: annotations.size,
  };
  return { record, annotations };
}

export const imatrixPass: Pass<ImatrixOptions> = {
  async run(unit, o, ctx) {
    const { record, annotations } = await measureImatrix(unit, o, ctx);
    ctx.note(`imatrix: ${record.linears} linears measured on ${record.tokens} calibration tokens`);
    return { unit: evolve(unit, { annotate: annotations }), record };
  },
  async profile(source, o, ctx) {
    const { unitOf } = await import('../../src/core/pipeline/unit.js');
    await measureImatrix(unitOf(source), o, ctx);
  },
};
