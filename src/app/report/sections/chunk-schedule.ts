/**
 * The chunk-partition section (record chunk-schedule/1): how the chunk length was chosen, the cost
 * table, and per chunk length the tabulated schedules — makespan of in-order dispatch, the paper's
 * heuristic and the improved schedule against the lower bound, for N = 1..nMax chunks — plus, for a
 * cuda or qnn artifact, what sharing the static chunk graphs saves (targetInfo.chunks, from written sizes).
 */
import { CHUNK_SCHEDULE, type ChunkSchedule } from '../../../core/records/index.js';
import { fmtBytes, fmtNum, type Block } from '../doc.js';
import { recordSection } from './types.js';
import { SHARED_TARGET_INFO } from '../../../core/records/target-info.js';

export const chunkScheduleSection = recordSection<ChunkSchedule>({
  record: CHUNK_SCHEDULE,
  async build(record, ctx) {
    if (!record) return null;
    const blocks: Block[] = [];
    const statics = record.subgraphs.filter((s) => s.share === 'static').length;
    blocks.push({
      kind: 'facts',
      items: [
        ['chunk lengths', `${record.chunks.map((p) => p.c).join(', ')} (${record.choice.mode === 'auto' ? `chosen for prompts ${record.choice.prompts}, objective ${record.choice.objective}` : 'given'})`],
        ['subgraphs per chunk', `${record.subgraphs.length}: ${statics} static (shared by every chunk), ${record.subgraphs.length - statics} dynamic (per chunk index)`],
        ['processors', record.processors.join(', ')],
        ['costs', `${record.costs.source} (${record.costs.device})`],
        ['heuristic', `mllm-NPU §3.4, successors on ${record.heuristic === 'all' ? 'any processor' : 'the other processor'}`],
        ...record.notes.map((n): [string, string] => ['note', n]),
      ],
    });
    if (record.choice.mode === 'auto') {
      blocks.push({
        kind: 'table',
        caption: `Expected prefill time per chunk length over prompts ${record.choice.prompts}`,
        columns: ['c', 'E[serial] ms', 'E[makespan] ms', 'chosen'],
        rows: record.choice.expected.map((e) => [e.c, fmtNum(e.serialMs, 4), fmtNum(e.makespanMs, 4), record.choice.chosen.includes(e.c) ? 'yes' : '']),
      });
    }
    const sets = (ctx.manifest && SHARED_TARGET_INFO.read(ctx.manifest.targetInfo).chunks) ?? [];
    for (const plan of record.chunks) {
      blocks.push({
        kind: 'table',
        caption: `c = ${plan.c}: cost per subgraph (ms; attention: ms + msPerChunk·(i+1) in chunk i)`,
        columns: ['kind', 'processor', 'ms', 'msPerChunk'],
        rows: Object.entries(plan.costs).map(([k, v]) => [k, v.device, fmtNum(v.ms, 4), fmtNum(v.msPerChunk, 4)]),
      });
      const rows = plan.schedules;
      blocks.push({
        kind: 'chart',
        caption: `c = ${plan.c}: prefill makespan by chunk count — in order, the paper's heuristic, the improved schedule and the lower bound`,
        chart: {
          width: 560,
          height: 300,
          option: {
            grid: { left: 60, right: 20, top: 40, bottom: 45 },
            legend: { top: 5 },
            xAxis: { type: 'category', data: rows.map((r) => String(r.N)), name: 'chunks N', nameLocation: 'middle', nameGap: 28 },
            yAxis: { type: 'value', name: 'ms', nameLocation: 'middle', nameGap: 42 },
            series: (
              [
                ['in order', (r) => r.makespan.inOrder],
                ['heuristic', (r) => r.makespan.heuristic],
                ['improved', (r) => r.makespan.improved],
                ['lower bound', (r) => r.lowerBound],
              ] as [string, (r: (typeof rows)[number]) => number][]
            ).map(([name, f]) => ({ name, type: 'line', data: rows.map((r) => Number(f(r).toPrecision(6))), ...(name === 'lower bound' ? { lineStyle: { type: 'dashed' } } : {}) })),
          },
        },
      });
      blocks.push({
        kind: 'table',
        caption: `c = ${plan.c}: schedules tabulated for N = 1..${plan.nMax} (ms; gap = makespan / lower bound)`,
        columns: ['N', 'serial', 'in order', 'heuristic', 'improved', 'lower bound', 'heuristic gap', 'improved gap', 'proved optimal'],
        rows: rows.map((r) => [r.N, fmtNum(r.makespan.serial), fmtNum(r.makespan.inOrder), fmtNum(r.makespan.heuristic), fmtNum(r.makespan.improved), fmtNum(r.lowerBound), fmtNum(r.makespan.heuristic / r.lowerBound, 4), fmtNum(r.makespan.improved / r.lowerBound, 4), r.optimal ? 'yes' : '']),
      });
      const mem = sets.find((s) => s.c === plan.c)?.memory.rows;
      if (mem?.length) {
        blocks.push({
          kind: 'table',
          caption: `c = ${plan.c}: chunk graphs as written (graphs + weights): shared static graphs against one graph set per chunk`,
          columns: ['N', 'one set per chunk', 'shared', 'saved'],
          rows: mem.map((r) => [r.N, fmtBytes(r.naive), fmtBytes(r.shared), `${(100 * r.saved).toFixed(1)}%`]),
        });
      }
    }
    return {
      id: 'chunk-schedule',
      title: 'Chunk partition: chunked prefill and out-of-order schedules',
      blocks,
      data: {
        chunks: record.chunks.map((p) => ({
          c: p.c,
          costs: p.costs,
          schedules: p.schedules.map((r) => ({ N: r.N, lowerBound: r.lowerBound, makespan: r.makespan, optimal: r.optimal })),
          memory: sets.find((s) => s.c === p.c)?.memory.rows ?? null,
        })),
        choice: record.choice,
        costs: record.costs,
        processors: record.processors,
        heuristic: record.heuristic,
      },
    };
  },
});
