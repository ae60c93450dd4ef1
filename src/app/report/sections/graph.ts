/**
 * An ONNX artifact's interface (cuda): the main graph's inputs and outputs with their element types
 * and shapes, read from the graph file itself (not from llmc's notes about it), and how many
 * initializers it holds, so a user wiring it into onnxruntime or TensorRT sees what to feed.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { onnx } from '../../../exec/onnx/proto.js';
import type { GeneralSection } from './types.js';
import { SHARED_TARGET_INFO } from '../../../core/records/target-info.js';

type ValueInfo = { name?: string | null; type?: { tensorType?: { elemType?: number | null; shape?: { dim?: { dimValue?: unknown; dimParam?: string | null }[] | null } | null } | null } | null };

const ELEM = onnx.TensorProto.DataType as unknown as Record<number, string>;

function describe(v: ValueInfo): [string, string, string] {
  const t = v.type?.tensorType;
  const dims = (t?.shape?.dim ?? []).map((d) => d.dimParam || String(Number(d.dimValue ?? 0)));
  return [v.name ?? '', ELEM[t?.elemType ?? 0]?.toLowerCase() ?? String(t?.elemType), `[${dims.join(', ')}]`];
}

/** `past_key_values.0.key` … `past_key_values.4.key` of one type and shape: one row `past_key_values.{0..4}.key`. */
function collapse(rows: [string, string, string][]): [string, string, string][] {
  const groups = new Map<string, { rows: [string, string, string][]; prefix: string; suffix: string; ids: number[] }>();
  for (const row of rows) {
    const m = /^(.*\.)(\d+)(\..*)$/.exec(row[0]);
    const key = m ? `${m[1]}#${m[3]}\u0000${row[1]}\u0000${row[2]}` : `\u0001${row[0]}`;
    const g = groups.get(key) ?? { rows: [], prefix: m?.[1] ?? '', suffix: m?.[3] ?? '', ids: [] };
    g.rows.push(row);
    if (m) g.ids.push(Number(m[2]));
    groups.set(key, g);
  }
  return [...groups.values()].flatMap((g): [string, string, string][] => {
    const run = g.ids.length >= 3 && g.ids.every((id, k) => id === g.ids[0] + k);
    return run ? [[`${g.prefix}{${g.ids[0]}..${g.ids.at(-1)}}${g.suffix}`, g.rows[0][1], g.rows[0][2]]] : g.rows;
  });
}

export const graphSection: GeneralSection = {
  id: 'graph',
  async build(ctx) {
    const graphFile = ctx.manifest && SHARED_TARGET_INFO.read(ctx.manifest.targetInfo).graph;
    if (!graphFile?.endsWith('.onnx')) return null;
    const model = onnx.ModelProto.decode(await fsp.readFile(path.join(ctx.dir, graphFile)));
    const g = model.graph!;
    // Inputs that are initializers (old-style graphs) are weights, not the interface.
    const inits = new Set((g.initializer ?? []).map((t) => t.name));
    const inputs = (g.input ?? []).filter((v) => !inits.has(v.name ?? '')).map((v) => describe(v as ValueInfo));
    const outputs = (g.output ?? []).map((v) => describe(v as ValueInfo));
    const opset = (model.opsetImport ?? []).map((o) => `${o.domain || 'ai.onnx'} ${Number(o.version)}`).join(', ');
    return {
      id: 'graph',
      title: `Graph interface (${graphFile})`,
      blocks: [
        { kind: 'facts', items: [['opsets', opset], ['nodes', String(g.node?.length ?? 0)], ['initializers', String(inits.size)]] },
        { kind: 'table', caption: 'Inputs', columns: ['name', 'type', 'shape'], rows: collapse(inputs) },
        { kind: 'table', caption: 'Outputs', columns: ['name', 'type', 'shape'], rows: collapse(outputs) },
      ],
      data: { file: graphFile, opsets: opset, nodes: g.node?.length ?? 0, initializers: inits.size, inputs: inputs.map(([name, type, shape]) => ({ name, type, shape })), outputs: outputs.map(([name, type, shape]) => ({ name, type, shape })) },
    };
  },
};
