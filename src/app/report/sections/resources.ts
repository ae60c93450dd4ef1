/**
 * Speed and memory of an artifact: each decoded token's latency as measured with the quality table
 * (the artifact's own runner, greedy from BOS), and the memory the model takes by context length —
 * its bytes as written (per elastic level where it has levels) plus the KV cache its runner keeps.
 */
import { levelRows } from '../../cli/levels.js';
import type { ChartSpec } from '../chart.js';
import type { ReportContext } from '../context.js';
import { fmtBytes, fmtNum, type Block } from '../doc.js';
import type { GeneralSection } from './types.js';

/** Bytes per cached K/V element of the runner llmc opens for a target, and what it is. */
const KV_ELEMENT: Record<string, [number, string]> = {
  ts: [4, 'float32, as the TS runtime keeps it'],
  gguf: [2, "f16, llama.cpp's default cache type"],
  'gguf-levels': [2, "f16, llama.cpp's default cache type"],
};

const median = (v: readonly number[]) => {
  const s = [...v].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/** A line chart of one or more named series over x (shared by this section and llmc report A B). */
export function lineChart(o: { series: { name: string; data: [number, number][] }[]; x: string; y: string; yFormat?: (v: number) => string; xMin?: number; xMax?: number; width?: number }): ChartSpec {
  const legend = o.series.length > 1;
  return {
    width: o.width ?? 560,
    height: 300 + (legend ? 22 * Math.ceil(o.series.length / 4) : 0),
    option: {
      ...(legend ? { legend: { top: 5, left: 10, right: 10, itemGap: 18, textStyle: { fontSize: 11 } } } : {}),
      grid: { left: o.yFormat ? 80 : 60, right: 30, top: legend ? 20 + 22 * Math.ceil(o.series.length / 4) : 20, bottom: 45 },
      xAxis: { type: 'value', min: o.xMin ?? 0, ...(o.xMax !== undefined ? { max: o.xMax } : {}), name: o.x, nameLocation: 'middle', nameGap: 28 },
      yAxis: { type: 'value', min: 0, name: o.y, nameLocation: 'middle', nameGap: o.yFormat ? 66 : 42, ...(o.yFormat ? { axisLabel: { formatter: o.yFormat } } : {}) },
      series: o.series.map((s) => ({ name: s.name, type: 'line', showSymbol: false, data: s.data })),
    },
  };
}

/** A chart of per-token decode latency (ms); none when speed was not measured. */
export function latencyBlocks(series: { name: string; tokenMs: readonly number[] | null; tokensPerSecond: number | null; executor: string }[]): Block[] {
  const measured = series.filter((s) => s.tokenMs?.length);
  if (!measured.length) return [];
  const words = measured.map((s) => `${s.name ? `${s.name}: ` : ''}${fmtNum(s.tokensPerSecond, 4)} tokens/s on ${s.executor}, median ${fmtNum(median(s.tokenMs!), 3)} ms per token, first token ${fmtNum(s.tokenMs![0], 3)} ms`);
  return [
    {
      kind: 'chart',
      caption: `Decode latency per token, greedy from BOS (the first token includes the prompt's prefill): ${words.join('; ')}`,
      chart: lineChart({ series: measured.map((s) => ({ name: s.name || 'artifact', data: s.tokenMs!.map((ms, i): [number, number] => [i + 1, ms]) })), x: 'token', y: 'ms', xMin: 1, xMax: Math.max(...measured.map((s) => s.tokenMs!.length)) }),
    },
  ];
}

/** KV-cache bytes per token of the whole model on `target`'s runner, or null when llmc does not know its cache type. */
export function kvBytesPerToken(ctx: ReportContext, target: string): { bytes: number; words: string } | null {
  const elem = KV_ELEMENT[target];
  if (!elem) return null;
  const a = ctx.arch;
  return { bytes: 2 * a.numLayers * a.numKvHeads * a.headDim * elem[0], words: elem[1] };
}

/** Context lengths the memory chart is drawn at: 0 to the model's context, 16 steps. */
const contexts = (max: number) => Array.from({ length: 17 }, (_, i) => Math.round((i * max) / 16));

export const resourcesSection: GeneralSection = {
  id: 'resources',
  async build(ctx) {
    const m = ctx.manifest;
    const blocks: Block[] = [];
    const q = ctx.quality;
    if (q) blocks.push(...latencyBlocks([{ name: '', tokenMs: q.tokenMs, tokensPerSecond: q.tokensPerSecond, executor: q.executor }]));
    const kv = m && kvBytesPerToken(ctx, m.target);
    const memory: { name: string; bytes: number; kvPerToken: number }[] = [];
    if (m && kv) {
      const levels = levelRows(m);
      if (levels) {
        const elem = KV_ELEMENT[m.target][0];
        // The record's KV bytes are at 2 bytes per element.
        levels.rows.forEach((r, i) => memory.push({ name: r.id, bytes: r.bytes, kvPerToken: (levels.record.levels[i].kvBytesPerToken / 2) * elem }));
      } else memory.push({ name: 'model', bytes: m.files.reduce((s, f) => s + f.size, 0), kvPerToken: kv.bytes });
      const xs = contexts(ctx.arch.maxPositions);
      blocks.push({
        kind: 'chart',
        caption: `Memory by context length: the ${memory.length > 1 ? "level's" : "model's"} bytes as written plus its KV cache (${kv.words}; every layer caches every position)`,
        chart: lineChart({ series: memory.map((s) => ({ name: s.name, data: xs.map((n): [number, number] => [n, s.bytes + n * s.kvPerToken]) })), x: 'context (tokens)', y: 'bytes', yFormat: fmtBytes, xMax: ctx.arch.maxPositions }),
      });
      blocks.push({
        kind: 'table',
        caption: `Memory at the model's context of ${ctx.arch.maxPositions} tokens`,
        columns: [memory.length > 1 ? 'level' : '', 'bytes as written', 'KV bytes/token', 'KV cache', 'total'],
        rows: memory.map((s) => [s.name, fmtBytes(s.bytes), String(s.kvPerToken), fmtBytes(s.kvPerToken * ctx.arch.maxPositions), fmtBytes(s.bytes + s.kvPerToken * ctx.arch.maxPositions)]),
      });
    }
    if (!blocks.length) return null;
    return {
      id: 'resources',
      title: 'Speed and memory',
      blocks,
      data: { tokensPerSecond: q?.tokensPerSecond ?? null, tokenMs: q?.tokenMs ?? null, executor: q?.executor ?? null, kvCache: kv ? kv.words : null, memory: memory.length ? memory.map((s) => ({ ...s, context: ctx.arch.maxPositions })) : null },
    };
  },
};
