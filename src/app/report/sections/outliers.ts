/**
 * Section of record `outlier-scales/1` (the outliers pass): the options and calibration, a chart of
 * each linear's importance (max/p99.9 over its sides) with the linears that keep shadow marked, and a
 * table of every linear's two sides (decision, bits, T, ρ, outlier count, hot channels |H|/K).
 * Shown only with the record (the profile alone holds raw sides, not decisions).
 */
import { OUTLIER_SCALES, type OutlierScales, type SideDecision } from '../../../core/records/outliers.js';
import { fmtNum, type Block } from '../doc.js';
import { recordSection } from './types.js';

const short = (weight: string) => weight.replace(/^model\.layers\.(\d+)\.(self_attn|mlp)\./, 'l$1.').replace(/(_proj)?\.weight$/, '');
const side = (s: SideDecision) => `${s.decision}${s.bits === 16 ? ' (16-bit)' : ''}`;
const hot = (s: SideDecision) => (s.decision === 'shadow' ? `${s.hot.length}/${s.channels} (${fmtNum((100 * s.hot.length) / s.channels, 3)}%)` : '');

export const outliersSection = recordSection<OutlierScales>({
  record: OUTLIER_SCALES,
  async build(record) {
    if (!record) return null;
    const r = record;
    const c = r.calibration;
    const blocks: Block[] = [
      {
        kind: 'facts',
        items: [
          ['mode', r.mode === 'rank' ? `rank: shadow on the ${fmtNum(100 * r.keep, 3)}% most important linears` : `threshold: shadow where max/p99.9 ≥ ${r.tau}`],
          ['sides without shadow', r.policy === 'auto' ? `auto (widen when ρ < ${r.tau}, clip otherwise)` : r.policy],
          ['linears with shadow', `${r.kept} of ${r.linears.filter((l) => l.role !== 'hadamard').length}`],
          ['rotation', r.rotation],
          ['W8A16 for flagged sides', r.a16],
          ['hot-channel coverage', fmtNum(r.coverage, 3)],
          ['calibration', `${c.count} × ${c.length} tokens, ${c.source === 'self-generated' ? 'sampled from the model' : c.source.text}, seed ${c.seed}`],
        ],
      },
    ];
    const ranked = r.linears.filter((l) => l.rank >= 0);
    blocks.push({
      kind: 'chart',
      caption: 'Importance of each linear (largest outlier over the clipped scale, max/p99.9); orange: keeps shadow',
      chart: {
        width: 640,
        height: 300,
        option: {
          grid: { left: 55, right: 20, top: 20, bottom: 80 },
          xAxis: { type: 'category', data: ranked.map((l) => short(l.weight)), axisLabel: { rotate: 60, fontSize: 9 } },
          yAxis: { type: 'log', name: 'max / p99.9', nameLocation: 'middle', nameGap: 38 },
          series: [
            {
              type: 'bar',
              barMaxWidth: 24,
              data: ranked.map((l) => ({
                value: Number(Math.max(l.importance, 1).toPrecision(5)),
                itemStyle: l.input.decision === 'shadow' || l.output.decision === 'shadow' ? { color: '#d9822b' } : undefined,
              })),
            },
          ],
        },
      },
    });
    blocks.push({
      kind: 'table',
      caption: 'Per linear and side: decision, threshold T, ρ = max/p99.9, outliers at p99.9, hot channels |H|/K',
      columns: ['linear', 'rank', 'input', 'T in', 'ρ in', 'outliers in', 'hot in', 'output', 'T out', 'ρ out'],
      rows: r.linears.map((l) => [short(l.weight), l.rank < 0 ? '—' : String(l.rank), side(l.input), fmtNum(l.input.T, 4), fmtNum(l.input.rho, 3), String(l.input.outliers), hot(l.input), side(l.output), fmtNum(l.output.T, 4), fmtNum(l.output.rho, 3)]),
    });
    return {
      id: 'outliers',
      title: 'Outliers: static INT8 scales and shadow execution',
      blocks,
      data: {
        mode: r.mode,
        keep: r.keep,
        tau: r.tau,
        policy: r.policy,
        kept: r.kept,
        linears: r.linears.map((l) => ({ weight: l.weight, rank: l.rank, importance: l.importance, input: { decision: l.input.decision, bits: l.input.bits, T: l.input.T, rho: l.input.rho, hot: l.input.hot.length, channels: l.input.channels }, output: { decision: l.output.decision, bits: l.output.bits, T: l.output.T, rho: l.output.rho } })),
      },
    };
  },
});
