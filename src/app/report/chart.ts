/**
 * Charts as static SVG, rendered in Node by Apache ECharts' server-side renderer (no DOM, no canvas,
 * no script in the output). Only the chart types and components the report uses are registered, so
 * loading stays cheap. ECharts numbers its element ids per chart instance in the process; they are
 * renamed after the chart's own id, so several charts share a page without clashing and the same
 * report gives the same bytes.
 */
import * as echarts from 'echarts/core';
import { BarChart, HeatmapChart, LineChart, ScatterChart, CustomChart, TreeChart } from 'echarts/charts';
import { GridComponent, LegendComponent, MarkLineComponent, TitleComponent, VisualMapComponent } from 'echarts/components';
import { SVGRenderer } from 'echarts/renderers';

echarts.use([BarChart, HeatmapChart, LineChart, ScatterChart, CustomChart, TreeChart, GridComponent, LegendComponent, MarkLineComponent, TitleComponent, VisualMapComponent, SVGRenderer]);

/**
 * Without a canvas ECharts lays text out by its own table of Arial-like glyph widths, but a browser
 * draws system-ui: DejaVu Sans on Linux, up to 1.18× as wide (measured in Chromium on the report's
 * texts), so a legend label ran into the next item's marker. Layout takes every text TEXT_ROOM times
 * its table width: the room the widest common UI font needs (test/report.test.ts checks the drawn
 * page for overlaps).
 */
const TEXT_ROOM = 1.2;
const GLYPH_AT_100PX = new Map<string, number>();
for (let c = 32; c < 127; c++) {
  const ch = String.fromCharCode(c);
  GLYPH_AT_100PX.set(ch, new echarts.graphic.Text({ style: { text: ch, font: '100px sans-serif' } }).getBoundingRect().width);
}
echarts.setPlatformAPI({
  measureText(text: string, font?: string) {
    const size = Number(/(\d+(?:\.\d+)?)px/.exec(font ?? '')?.[1] ?? 12);
    let width = 0;
    for (const ch of text ?? '') width += ((GLYPH_AT_100PX.get(ch) ?? 100) * size) / 100;
    return { width: width * TEXT_ROOM } as TextMetrics;
  },
});

/** An ECharts option (https://echarts.apache.org/en/option.html) and the chart's size in CSS pixels. */
export interface ChartSpec {
  width: number;
  height: number;
  option: Record<string, unknown>;
}

export const PALETTE = ['#3b6ea8', '#d9822b', '#4e9a5a', '#b5485d', '#7a5ea8', '#3f9fa6', '#a8873b', '#6b6b6b'];

/** The chart as one <svg> element whose ids all start with `id`. */
export function renderChart(id: string, spec: ChartSpec): string {
  const chart = echarts.init(null, null, { renderer: 'svg', ssr: true, width: spec.width, height: spec.height });
  try {
    chart.setOption({ animation: false, color: PALETTE, textStyle: { fontFamily: 'system-ui, sans-serif' }, ...spec.option });
    const svg = chart.renderToSVGString();
    return svg.replace(/\bzr\d+-/g, `${id}-`).replace('<svg ', `<svg role="img" data-chart="${id}" `);
  } finally {
    chart.dispose();
  }
}
