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
