/** Size breakdown: bytes per tensor group and format (an artifact's, or the checkpoint's for a profile). */
import { fmtBytes, type Block } from '../doc.js';
import type { GeneralSection } from './types.js';

export const sizesSection: GeneralSection = {
  id: 'sizes',
  async build(ctx) {
    const rows = ctx.groups;
    if (!rows?.length) return null;
    const total = rows.reduce((s, r) => s + r.bytes, 0);
    const groups = [...new Set(rows.map((r) => r.group))];
    const formats = [...new Set(rows.map((r) => r.format))].sort();
    const blocks: Block[] = [
      {
        kind: 'chart',
        caption: `Weight bytes per tensor group, by format (${fmtBytes(total)} in all)`,
        chart: {
          width: 760,
          height: 70 + 34 * groups.length,
          option: {
            grid: { left: 110, right: 30, top: 40, bottom: 30 },
            legend: { top: 5, data: formats },
            xAxis: { type: 'value', axisLabel: { formatter: (v: number) => fmtBytes(v) } },
            yAxis: { type: 'category', data: [...groups].reverse() },
            series: formats.map((f) => ({
              name: f,
              type: 'bar',
              stack: 'bytes',
              barMaxWidth: 22,
              data: [...groups].reverse().map((g) => rows.find((r) => r.group === g && r.format === f)?.bytes ?? 0),
            })),
          },
        },
      },
      {
        kind: 'table',
        columns: ['group', 'format', 'tensors', 'bytes', 'share'],
        rows: rows.map((r) => [r.group, r.format, r.tensors, fmtBytes(r.bytes), `${((100 * r.bytes) / total).toFixed(1)}%`]),
      },
    ];
    if (ctx.manifest) {
      blocks.push({ kind: 'table', caption: 'Files', columns: ['file', 'bytes', 'sha256'], rows: ctx.manifest.files.map((f) => [f.path, fmtBytes(f.size), f.sha256.slice(0, 16) + '…']) });
    }
    return {
      id: 'sizes',
      title: ctx.kind === 'artifact' ? 'Artifact size' : 'Checkpoint size',
      blocks,
      data: { totalBytes: total, byGroupAndFormat: rows },
    };
  },
};
