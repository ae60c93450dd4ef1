/**
 * Section of record `elastic-prefix/1` (the reorder pass): which layers anchor the model (loss when
 * a layer is skipped), how concentrated unit importance is (cumulative importance of the top units,
 * per layer), and each elastic level's size against its held-out perplexity. Importance scores live
 * in the profile store (kind `unit-importance`), found by the checkpoint and calibration the record names.
 */
import { ELASTIC_LEVELS, type ElasticLevels } from '../../../core/records/elastic.js';
import { fmtBytes, fmtCount, fmtNum, type Block } from '../doc.js';
import { levelRows } from '../../cli/levels.js';

const pct = (v: number | undefined) => (v === undefined ? '—' : `${(100 * v).toFixed(1)}%`);
import type { ReportContext } from '../context.js';
import type { Profile } from '../../../measure/store.js';
import { recordSection } from './types.js';

/** Cumulative share of importance kept by the top units, at up to `points` evenly spaced prefix sizes. */
export function cumulativeShare(scores: ArrayLike<number>, points = 100): [number, number][] {
  const s = Array.from(scores).sort((a, b) => b - a);
  const total = s.reduce((a, b) => a + b, 0) || 1;
  const n = s.length;
  const out: [number, number][] = [[0, 0]];
  let acc = 0;
  let next = 1;
  for (let k = 1; k <= n; k++) {
    acc += s[k - 1];
    if (k >= next || k === n) {
      out.push([k / n, acc / total]);
      next = Math.ceil(((out.length) * n) / points);
    }
  }
  return out;
}

/** Per layer: the layer's MLP curve (the mean over its experts' curves for MoE layers) and its heads' curve. */
function importanceCurves(p: Profile, layers: number): { mlp: [number, number][][]; heads: [number, number][][] } {
  const mlp: [number, number][][] = [];
  const heads: [number, number][][] = [];
  for (let l = 0; l < layers; l++) {
    const prefix = `mlp.model.layers.${l}.`;
    const curves = Object.keys(p.arrays)
      .filter((k) => k.startsWith(prefix))
      .sort()
      .map((k) => cumulativeShare(p.arrays[k]));
    const same = curves.filter((c) => c.length === curves[0]?.length);
    mlp.push(same.length ? same[0].map(([x], i) => [x, same.reduce((s, c) => s + c[i][1], 0) / same.length]) : []);
    heads.push(p.arrays[`head.${l}`] ? cumulativeShare(p.arrays[`head.${l}`]) : []);
  }
  return { mlp, heads };
}

const round = (pts: [number, number][]) => pts.map(([x, y]) => [Number(x.toFixed(4)), Number(y.toFixed(4))]);

function curveChart(title: string, curves: [number, number][][], anchors: ReadonlySet<number>, unit: string): Block {
  const series = curves
    .map((c, l) => ({ name: `layer ${l}${anchors.has(l) ? ' (anchor)' : ''}`, type: 'line', showSymbol: false, data: round(c), lineStyle: { width: 1.5, type: anchors.has(l) ? 'dashed' : 'solid' } }))
    .filter((s) => s.data.length);
  return {
    kind: 'chart',
    caption: title,
    chart: {
      width: 560,
      height: 340,
      option: {
        legend: { type: 'plain', top: 5, left: 10, right: 10, itemWidth: 18, textStyle: { fontSize: 11 } },
        grid: { left: 55, right: 20, top: 30 + 20 * Math.ceil(series.length / 5), bottom: 45 },
        xAxis: { type: 'value', min: 0, max: 1, name: `fraction of ${unit} kept (most important first)`, nameLocation: 'middle', nameGap: 28 },
        yAxis: { type: 'value', min: 0, max: 1, name: 'share of importance', nameLocation: 'middle', nameGap: 38 },
        series,
      },
    },
  };
}

async function importanceProfile(record: ElasticLevels | null, ctx: ReportContext): Promise<Profile | undefined> {
  const match: Record<string, unknown> = { checkpoint: ctx.checkpoint.sha256 };
  if (record) Object.assign(match, { calibration: record.calibration.profile, provider: record.importance.provider });
  return (await ctx.profiles('unit-importance', match))[0];
}

export const reorderSection = recordSection<ElasticLevels>({
  record: ELASTIC_LEVELS,
  async build(record, ctx) {
    const L = ctx.arch.numLayers;
    const blocks: Block[] = [];
    let layerLoss = record?.layerLoss ?? null;
    let baseLoss = record?.baseLoss ?? null;
    if (!record) {
      const lp = (await ctx.profiles('layer-loss', { checkpoint: ctx.checkpoint.sha256 }))[0];
      if (lp) {
        layerLoss = Array.from(lp.arrays.layerLoss);
        baseLoss = lp.meta.baseLoss as number;
      }
    }
    const anchors = new Set(record?.anchors ?? []);
    const importance = await importanceProfile(record, ctx);
    if (record) {
      blocks.push({
        kind: 'facts',
        items: [
          ['importance', record.importance.provider + (record.importance.requested === 'auto' ? ` (auto: ${Object.entries(record.importance.auto ?? {}).map(([k, v]) => `${k} ${fmtNum(v)}`).join(', ')})` : '')],
          ['anchor layers', record.anchors.join(', ') || 'none'],
          ['calibration', `${record.calibration.count} × ${record.calibration.length} tokens, ${record.calibration.source === 'self-generated' ? 'sampled from the model' : record.calibration.source.text}, seed ${record.calibration.seed}`],
          ['attention unit', record.attnUnit],
          ['quantization block', String(record.quantBlock)],
        ],
      });
    }
    if (layerLoss && baseLoss !== null) {
      blocks.push({
        kind: 'chart',
        caption: 'Calibration loss with each layer skipped (the anchors are the layers whose loss rises most)',
        chart: {
          width: 560,
          height: 300,
          option: {
            // the full model's line is labelled right of the plot, where no bar runs under its text
            grid: { left: 55, right: 115, top: 20, bottom: 45 },
            xAxis: { type: 'category', data: layerLoss.map((_, l) => String(l)), name: 'layer', nameLocation: 'middle', nameGap: 28 },
            yAxis: { type: 'value', name: 'loss', nameLocation: 'middle', nameGap: 38, min: (v: { min: number }) => Math.floor(Math.min(v.min, baseLoss!)) },
            series: [
              {
                type: 'bar',
                barMaxWidth: 40,
                data: layerLoss.map((v, l) => ({ value: Number(v.toFixed(5)), itemStyle: anchors.has(l) ? { color: '#d9822b' } : undefined })),
                markLine: { symbol: 'none', label: { formatter: `full model ${fmtNum(baseLoss, 4)}`, position: 'end' }, lineStyle: { type: 'dashed', color: '#555' }, data: [{ yAxis: Number(baseLoss.toFixed(5)) }] },
              },
            ],
          },
        },
      });
    }
    let curves: ReturnType<typeof importanceCurves> | null = null;
    if (importance) {
      curves = importanceCurves(importance, L);
      blocks.push(curveChart(`MLP neurons: cumulative ${importance.keyParts.provider} importance per layer`, curves.mlp, anchors, 'neurons'));
      blocks.push(curveChart(`Attention heads: cumulative ${importance.keyParts.provider} importance per layer`, curves.heads, anchors, 'heads'));
    }
    const levels = record?.levels ?? [];
    const measured = levels.filter((l) => l.heldOutPpl !== undefined);
    if (measured.length) {
      blocks.push({
        kind: 'chart',
        caption: 'Elastic levels: size against held-out perplexity',
        chart: {
          width: 560,
          height: 320,
          option: {
            grid: { left: 65, right: 30, top: 20, bottom: 45 },
            xAxis: { type: 'value', min: 0, max: 1, name: 'parameters kept (fraction)', nameLocation: 'middle', nameGap: 28 },
            yAxis: { type: 'log', name: 'held-out perplexity', nameLocation: 'middle', nameGap: 50 },
            series: [
              {
                type: 'line',
                symbolSize: 7,
                data: measured.map((l) => [Number(l.paramFrac.toFixed(4)), Number(l.heldOutPpl!.toPrecision(6))]),
                label: { show: true, position: 'top', fontSize: 10, formatter: (p: { dataIndex: number }) => measured[p.dataIndex].id },
                ...(record?.heldOutPpl !== undefined
                  ? { markLine: { symbol: 'none', label: { formatter: `full model ${fmtNum(record.heldOutPpl, 4)}`, position: 'insideStartTop' }, lineStyle: { type: 'dashed', color: '#555' }, data: [{ yAxis: Number(record.heldOutPpl.toPrecision(6)) }] } }
                  : {}),
              },
            ],
          },
        },
      });
    }
    const rows = ctx.manifest ? levelRows(ctx.manifest)?.rows : undefined;
    if (levels.length) {
      const recovered = levels.some((l) => l.unrecovered);
      const bytes = (i: number) => (rows ? (rows[i].bytesExact ? '' : '≈') + fmtBytes(rows[i].bytes) : '—');
      blocks.push({
        kind: 'table',
        caption: `Elastic levels${rows?.some((r) => !r.bytesExact) ? ' (≈: the level\'s share of the files; its target reads no level on its own)' : ''}${recovered ? `; before recovery: ${record?.recovery?.method === 'distill' ? 'the level sliced from the weights before joint distillation' : `the level without its LoRA adapters (r=${record?.recovery?.rank})`}` : ''}`,
        columns: ['level', 'requested', 'parameters', 'fraction', 'bytes', 'KV bytes/token', 'held-out ppl', 'greedy agree', ...(recovered ? ['before recovery: ppl', 'agree'] : [])],
        rows: levels.map((l, i) => [
          l.id,
          fmtNum(l.nominal, 3),
          fmtCount(l.params),
          fmtNum(l.paramFrac, 4),
          bytes(i),
          fmtCount(l.kvBytesPerToken),
          fmtNum(l.heldOutPpl, 5),
          pct(l.agreement),
          ...(recovered ? [fmtNum(l.unrecovered?.heldOutPpl, 5), pct(l.unrecovered?.agreement)] : []),
        ]),
      });
    }
    if (!blocks.length) return null;
    return {
      id: 'reorder',
      title: 'Reorder: unit importance and elastic levels',
      blocks,
      data: {
        importance: record?.importance ?? (importance ? { provider: importance.keyParts.provider } : null),
        anchors: record?.anchors ?? null,
        layerLoss,
        baseLoss,
        cumulativeImportance: curves,
        levels: levels.map((l, i) => ({ id: l.id, nominal: l.nominal, params: l.params, paramFrac: l.paramFrac, bytes: rows?.[i].bytes ?? null, bytesExact: rows?.[i].bytesExact ?? null, kvBytesPerToken: l.kvBytesPerToken, heldOutPpl: l.heldOutPpl ?? null, agreement: l.agreement ?? null, unrecovered: l.unrecovered ?? null })),
        heldOutPpl: record?.heldOutPpl ?? null,
      },
    };
  },
});
