/**
 * The pass's input files, checked with zod before any work (a bad file is one line naming it and the
 * key, exit code 2). Schemas in docs/chunk-partition.md.
 *
 * Cost file (`--opt chunk-partition.costs=FILE`): per chunk length c, per subgraph kind, the processor
 * it runs on and its time in ms; attention may grow with the chunk index i:
 *   T(i) = ms + msPerChunk · (i + 1).
 *   { "format": "llmc-chunk-costs/1", "device": "...", "note": "...",
 *     "chunks": [ { "c": 256, "subgraphs": { "embed": { "device": "CPU", "ms": 0.3 },
 *                   "qkv": { "device": "NPU", "ms": 3.3 }, "attention": { "device": "CPU", "ms": 2, "msPerChunk": 4.5 },
 *                   "mlp": { "device": "NPU", "ms": 9.8 }, "head": { "device": "CPU", "ms": 5 } } } ] }
 *
 * Dependency file (`--opt chunk-partition.deps=FILE`): ordering constraints added to the data
 * dependencies the partition derives, by subgraph id (`embed`, `l3.qkv`, `l3.attention`, `l3.mlp`,
 * `l3.shadow`, `head`); `cross`: G_{i,to} also waits for G_{k,from} of every earlier chunk k.
 *   { "format": "llmc-chunk-deps/1", "edges": [ { "from": "l0.mlp", "to": "l1.qkv", "cross": false } ] }
 * A cycle is refused, naming it.
 */
import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { LlmcError } from '../../src/core/errors.js';
import { SUBGRAPH_KINDS, type SubgraphKind } from '../../src/core/chunks/partition.js';
import type { KindCost } from '../../src/core/records/chunk-schedule.js';
import { parseJson } from '../../src/core/util/json.js';

export const COSTS_FORMAT = 'llmc-chunk-costs/1';
export const DEPS_FORMAT = 'llmc-chunk-deps/1';

const cost = z.strictObject({
  device: z.string().min(1, 'must name a processor'),
  ms: z.number().finite().min(0, 'is negative: costs are times in ms ≥ 0'),
  msPerChunk: z.number().finite().min(0, 'is negative: costs are times in ms ≥ 0').optional(),
});

const COSTS = z.strictObject({
  format: z.literal(COSTS_FORMAT),
  device: z.string().optional(),
  note: z.string().optional(),
  chunks: z
    .array(
      z.strictObject({
        c: z.number().int().min(1, 'must be at least 1 token'),
        subgraphs: z.strictObject(Object.fromEntries(SUBGRAPH_KINDS.map((k) => [k, cost.optional()])) as Record<SubgraphKind, z.ZodOptional<typeof cost>>),
      }),
    )
    .min(1, 'is empty'),
});

const DEPS = z.strictObject({
  format: z.literal(DEPS_FORMAT),
  edges: z.array(z.strictObject({ from: z.string().min(1), to: z.string().min(1), cross: z.boolean().optional() })),
});

const keyPath = (path: readonly PropertyKey[]) => path.reduce<string>((s, k) => (typeof k === 'number' ? `${s}[${k}]` : s ? `${s}.${String(k)}` : String(k)), '');

function parse<S extends z.ZodType>(schema: S, file: string, what: string): { value: z.infer<S>; sha256: string } {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new LlmcError(`cannot read the ${what}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`, file, 2);
  }
  const json = parseJson(text, file, { exitCode: 2 });
  const r = schema.safeParse(json);
  if (!r.success) {
    const issue = r.error.issues[0];
    const at = keyPath(issue.path);
    const msg = issue.code === 'unrecognized_keys' ? `unknown key "${issue.keys[0]}"` : issue.message.replace(/^Invalid input: /, '');
    throw new LlmcError(at ? `${at}: ${msg}` : msg, file, 2);
  }
  return { value: r.data, sha256: createHash('sha256').update(text).digest('hex') };
}

export interface CostTable {
  source: string;
  device: string;
  /** Per chunk length: per subgraph kind. */
  byChunk: Map<number, Record<string, KindCost>>;
}

/** A cost file, checked: every kind the partition has (`kinds`) at every chunk length, devices consistent, static kinds flat. */
export function readCostFile(file: string, kinds: readonly SubgraphKind[]): CostTable {
  const { value, sha256 } = parse(COSTS, file, 'cost file');
  const byChunk = new Map<number, Record<string, KindCost>>();
  const device = new Map<string, string>();
  value.chunks.forEach((entry, n) => {
    if (byChunk.has(entry.c)) throw new LlmcError(`chunks[${n}].c: chunk length ${entry.c} is listed twice`, file, 2);
    const table: Record<string, KindCost> = {};
    for (const kind of kinds) {
      const k = entry.subgraphs[kind];
      if (!k) throw new LlmcError(`chunks[${n}].subgraphs: lacks "${kind}" (the partition has ${kinds.join(', ')})`, file, 2);
      if (k.msPerChunk && kind !== 'attention') throw new LlmcError(`chunks[${n}].subgraphs.${kind}.msPerChunk: ${kind} is static, its cost cannot grow with the chunk index`, file, 2);
      const seen = device.get(kind);
      if (seen !== undefined && seen !== k.device) throw new LlmcError(`chunks[${n}].subgraphs.${kind}.device: ${k.device}, but ${seen} at another chunk length (a subgraph runs on one processor)`, file, 2);
      device.set(kind, k.device);
      table[kind] = { device: k.device, ms: k.ms, msPerChunk: k.msPerChunk ?? 0 };
    }
    byChunk.set(entry.c, table);
  });
  return { source: `file ${file} (sha256 ${sha256.slice(0, 16)})`, device: value.device ?? 'unnamed device', byChunk };
}

export interface DepEdge {
  from: string;
  to: string;
  cross: boolean;
}

/** A dependency file, checked for cycles among its own edges (cycles through the derived edges are found when the partition is known). */
export function readDepsFile(file: string): DepEdge[] {
  const edges = parse(DEPS, file, 'dependency file').value.edges.map((e) => ({ from: e.from, to: e.to, cross: e.cross ?? false }));
  const cycle = findCycle(edges);
  if (cycle) throw new LlmcError(`cyclic dependency: ${cycle.join(' → ')}`, file, 2);
  return edges;
}

/** A cycle of the directed graph given by `edges` (its nodes, the first repeated at the end), or null. */
export function findCycle(edges: readonly { from: string; to: string }[]): string[] | null {
  const succ = new Map<string, string[]>();
  for (const e of edges) succ.set(e.from, [...(succ.get(e.from) ?? []), e.to]);
  const state = new Map<string, 1 | 2>(); // 1 on the stack, 2 done
  const stack: string[] = [];
  const visit = (v: string): string[] | null => {
    state.set(v, 1);
    stack.push(v);
    for (const w of succ.get(v) ?? []) {
      if (state.get(w) === 1) return [...stack.slice(stack.indexOf(w)), w];
      if (!state.has(w)) {
        const c = visit(w);
        if (c) return c;
      }
    }
    stack.pop();
    state.set(v, 2);
    return null;
  };
  for (const v of [...succ.keys()].sort()) {
    if (!state.has(v)) {
      const c = visit(v);
      if (c) return c;
    }
  }
  return null;
}
