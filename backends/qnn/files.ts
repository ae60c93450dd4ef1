/**
 * The JSON files `llmc run` reads from a qnn artifact, as zod schemas: graph/subgraphs.json and
 * weights/shadow_index.json are checked (keys, types, positive sizes, paths inside the artifact)
 * before any value is used, so a damaged file is one line naming it and the key, never a property
 * read of undefined or a NaN dimension handed to onnxruntime.
 */
import path from 'node:path';
import { z } from 'zod';
import type { ArchSpec } from '../../src/core/arch/types.js';
import { LlmcError, summarize } from '../../src/core/errors.js';
import type { Op } from '../../src/core/ir/ir.js';
import { opInputs, opOutputs } from '../../src/core/ir/values.js';
import { causalWindow } from '../../src/core/ir/mask.js';
import { readJsonAs } from '../../src/core/util/json-file.js';
import { DECODER_IO } from '../../src/exec/onnx/decoder.js';

const count = z.number().int().positive();
const offset = z.number().int().nonnegative();
/** A file of the artifact: relative, no `..`, no NUL. */
const artifactPath = z.string().min(1).refine((p) => !p.startsWith('/') && !/^[a-zA-Z]:/.test(p) && !p.split(/[\\/]/).includes('..') && !p.includes('\0'), 'is not a file of the artifact');
const dim = z.union([count, z.string()]);
const value = z.object({ name: z.string().min(1), shape: z.array(dim).max(8), dtype: z.enum(['float32', 'int64']), encodingRef: z.string().nullable() });

/**
 * An IR op as graph/subgraphs.json keeps it (format llmc-qnn-subgraphs/1): the attention mask is the
 * window of a causal mask, `slidingWindow` (null: causal); the qnn target lowers no other kind.
 */
export function fileOp(op: Op): unknown {
  if (op.op !== 'attention') return op;
  const { mask, ...rest } = op;
  return { ...rest, slidingWindow: causalWindow(mask, 'the qnn target') };
}

/** The IR op of a graph/subgraphs.json op (an IR op already is one). */
export function irOp(o: unknown): Op {
  const a = o as { op: string; slidingWindow?: number | null; mask?: unknown };
  if (a.op !== 'attention' || a.mask !== undefined) return o as Op;
  const { slidingWindow, ...rest } = a;
  return { ...rest, mask: slidingWindow ? { kind: 'sliding', window: slidingWindow } : { kind: 'causal' } } as Op;
}

/** The IR ops the simulation runs (./sim.ts), each with its value names and sizes typed. */
const v = z.string().min(1);
const op = z.discriminatedUnion('op', [
  z.looseObject({ op: z.literal('embed'), out: v, ids: v, table: z.string() }),
  z.looseObject({ op: z.literal('rmsnorm'), out: v, x: v, weight: z.string(), eps: z.number().positive(), dim: count, heads: count.optional() }),
  z.looseObject({ op: z.literal('scale'), out: v, x: v, by: z.number() }),
  z.looseObject({ op: z.literal('linear'), out: v, x: v, weight: z.string(), bias: z.string().nullable(), inFeatures: count, outFeatures: count }),
  z.looseObject({ op: z.literal('rope'), out: v, x: v, cos: v, sin: v, heads: count, headDim: count }),
  z.looseObject({ op: z.literal('attention'), out: v, presentK: v, presentV: v, q: v, k: v, v, pastK: v, pastV: v, layer: offset, heads: count, kvHeads: count, headDim: count, slidingWindow: count.nullable() }),
  z.looseObject({ op: z.enum(['silu', 'sigmoid', 'gelu_tanh']), out: v, x: v }),
  z.looseObject({ op: z.literal('softcap'), out: v, x: v, cap: z.number().positive() }),
  z.looseObject({ op: z.enum(['mul', 'add']), out: v, a: v, b: v }),
  z.looseObject({ op: z.literal('gatherPositions'), out: v, x: v, positions: v }),
]);

const subgraphEntry = z.looseObject({
  id: z.string().min(1),
  kind: z.enum(['embed', 'static', 'attention', 'shadow', 'head']),
  layer: z.number().int(),
  j: z.number().int(),
  part: offset,
  device: z.enum(['NPU', 'CPU']),
  ops: z.array(op),
  inputs: z.array(value),
  outputs: z.array(value),
  file: artifactPath.nullable(),
  encodings: artifactPath.nullable(),
  shadow: z.array(z.object({ weight: z.string(), x: z.string(), y: z.string() })).optional(),
});

const chunkGraph = z.looseObject({ id: z.string(), layer: z.number().int(), inputs: z.array(v), outputs: z.array(v) });
const chunked = z.object({
  format: z.literal('llmc-qnn-chunked/1'),
  c: count,
  attentionGraphs: count,
  attentionFile: z.string(),
  groups: z.array(z.object({ id: z.string(), j: z.number().int(), kind: z.string(), device: z.string(), run: z.array(z.string()), attentionLayer: offset.optional() })),
  ropes: z.array(chunkGraph.extend({ file: artifactPath })),
  attention: z.array(chunkGraph),
  schedules: z.array(z.object({ N: count, makespanMs: z.number(), inOrderMs: z.number(), lowerBoundMs: z.number(), order: z.array(z.tuple([offset, offset])) })),
});

export const SUBGRAPHS_FILE = z.looseObject({
  format: z.literal('llmc-qnn-subgraphs/1'),
  chunk: z.object({ c: count, a: count, b: count }).refine((c) => c.a * c.b === c.c, 'c must be a·b'),
  subgraphs: z.array(subgraphEntry).min(1),
  chunked: chunked.optional(),
});

const shadowEntry = z.object({
  weight: z.string(),
  side: z.enum(['input', 'output']),
  rows: count,
  rowBytes: count,
  hot: z.array(offset),
  hotOffset: offset,
  coldOffset: offset,
});

export const SHADOW_INDEX_FILE = z
  .object({
    format: z.literal('llmc-qnn-shadow/1'),
    entries: z.array(shadowEntry),
    biases: z.record(z.string(), z.array(z.number())),
    hotBytes: offset,
    coldBytes: offset,
  })
  .superRefine((ix, ctx) => {
    // Every row an entry addresses lies inside the bytes the index declares (the files are checked against those).
    ix.entries.forEach((e, i) => {
      const bad = (key: string, message: string) => ctx.addIssue({ code: 'custom', path: ['entries', i, key], message });
      if (e.hot.some((k) => k >= e.rows) || new Set(e.hot).size !== e.hot.length) bad('hot', `hot channels must be distinct and below rows (${e.rows})`);
      else if (e.hotOffset + e.hot.length * e.rowBytes > ix.hotBytes) bad('hotOffset', `its rows run past hotBytes (${ix.hotBytes})`);
      else if (e.coldOffset + (e.rows - e.hot.length) * e.rowBytes > ix.coldBytes) bad('coldOffset', `its rows run past coldBytes (${ix.coldBytes})`);
    });
  });

/** config.json: an object (normalizeConfig checks its keys). */
export const CONFIG_OBJECT = z.record(z.string(), z.unknown());

export type SubgraphsFile = z.infer<typeof SUBGRAPHS_FILE>;

/** graph/subgraphs.json of the artifact in `dir`, checked. */
export const readSubgraphs = (dir: string): Promise<SubgraphsFile> => readJsonAs(SUBGRAPHS_FILE, path.join(dir, 'graph/subgraphs.json'));

/**
 * What the schema cannot say: the ops' sizes are the model's (config.json), and every value a
 * subgraph or op reads is a graph input or written before it, every output written by it.
 */
export function checkSubgraphs(sg: SubgraphsFile, spec: ArchSpec, file: string): void {
  const bad = (at: string, problem: string): never => {
    throw new LlmcError(`${at}: ${problem}`, file);
  };
  const layers = sg.subgraphs.filter((s) => s.kind === 'attention').length;
  if (layers !== spec.numLayers) bad('subgraphs', `has ${layers} attention subgraphs, config.json says ${spec.numLayers} layers`);
  const known = new Set<string>([DECODER_IO.inputIds, DECODER_IO.positionIds, DECODER_IO.attentionMask]);
  for (let l = 0; l < spec.numLayers; l++) known.add(DECODER_IO.pastKey(l)).add(DECODER_IO.pastValue(l));
  const ids = new Set<string>();
  sg.subgraphs.forEach((s, i) => {
    const at = `subgraphs[${i}] (${s.id})`;
    if (ids.has(s.id)) bad(at, 'repeats an id');
    ids.add(s.id);
    // A shadow node runs on the CPU from the shadow files; every other subgraph from its graph file.
    if (s.shadow ? s.kind !== 'shadow' : s.kind === 'shadow' || s.file === null) bad(at, s.shadow || s.kind === 'shadow' ? 'a shadow node must be of kind shadow and list its shadow linears' : 'names no graph file');
    for (const x of s.inputs) if (!known.has(x.name)) bad(at, `reads ${x.name}, which no earlier subgraph writes`);
    // The runner sizes each layer's KV cache from its past inputs' shapes: [1, kvHeads, past, headDim] of config.json.
    for (const x of s.inputs) {
      if (!/^past_key_values\.\d+\.(key|value)$/.test(x.name)) continue;
      const [, heads, , headDim] = x.shape;
      if (x.shape.length !== 4 || heads !== spec.numKvHeads || headDim !== spec.headDim) bad(`${at}.inputs (${x.name})`, `has shape ${summarize(x.shape)}, config.json says [1, ${spec.numKvHeads}, past, ${spec.headDim}]`);
    }
    // The simulation keeps float32 inputs as values; int64 ones (ids, positions, mask) it reads from the feeds.
    const local = new Set(s.inputs.filter((x) => x.dtype === 'float32').map((x) => x.name));
    const ints = new Set(s.inputs.filter((x) => x.dtype === 'int64').map((x) => x.name));
    s.ops.forEach((o, k) => {
      const want: [string, number, number][] =
        o.op === 'attention'
          ? [['heads', o.heads, spec.numHeads], ['kvHeads', o.kvHeads, spec.numKvHeads], ['headDim', o.headDim, spec.headDim]]
          : o.op === 'rope'
            ? [['headDim', o.headDim, spec.headDim]]
            : [];
      // A norm over the hidden state, or a q/k norm over each head or the whole projection.
      const normed = o.op === 'rmsnorm' ? o.dim * (o.heads ?? 1) : 0;
      if (o.op === 'rmsnorm' && ![spec.hiddenSize, spec.numHeads * spec.headDim, spec.numKvHeads * spec.headDim].includes(normed)) {
        bad(`${at}.ops[${k}].dim`, `is ${o.dim}${o.heads ? ` × ${o.heads} heads` : ''}, config.json says ${spec.hiddenSize} (or a q/k projection's width)`);
      }
      for (const [key, got, value] of want) if (got !== value) bad(`${at}.ops[${k}].${key}`, `is ${got}, config.json says ${value}`);
      if (o.op === 'attention' && o.layer >= spec.numLayers) bad(`${at}.ops[${k}].layer`, `is ${o.layer}, the model has ${spec.numLayers} layers`);
      if (o.op === 'rope' && o.heads !== spec.numHeads && o.heads !== spec.numKvHeads) bad(`${at}.ops[${k}].heads`, `is ${o.heads}, config.json says ${spec.numHeads} (or ${spec.numKvHeads} KV)`);
      // RoPE makes cos/sin from position_ids, the head's gather keeps every position; attention reads its cache from past_key_values.<layer>.* and writes present.<layer>.*.
      const feeds = o.op === 'embed' ? [o.ids] : o.op === 'rope' ? [DECODER_IO.positionIds] : o.op === 'attention' ? [DECODER_IO.attentionMask] : [];
      for (const x of feeds) if (!ints.has(x)) bad(`${at}.ops[${k}]`, `reads ${x}, which is not an int64 input of the subgraph`);
      const reads = o.op === 'embed' ? [] : o.op === 'attention' ? [o.q, o.k, o.v, DECODER_IO.pastKey(o.layer), DECODER_IO.pastValue(o.layer)] : o.op === 'rope' || o.op === 'gatherPositions' ? [o.x] : opInputs(o as Op);
      for (const x of reads) if (!local.has(x)) bad(`${at}.ops[${k}]`, `reads ${x}, which nothing before it writes`);
      for (const x of opOutputs(o as Op)) local.add(x);
      if (o.op === 'attention') local.add(DECODER_IO.presentKey(o.layer)).add(DECODER_IO.presentValue(o.layer));
    });
    for (const sh of s.shadow ?? []) for (const x of [sh.x, sh.y]) if (!local.has(x)) bad(at, `shadow of ${sh.weight} reads ${x}, which is not a float32 input of it`);
    for (const x of s.outputs) {
      if (!local.has(x.name)) bad(at, `lists output ${x.name}, which it does not write`);
      known.add(x.name);
    }
  });
  // The runner reads every layer's grown cache and the logits once the chunk's subgraphs have run.
  const needed = [DECODER_IO.logits, ...Array.from({ length: spec.numLayers }, (_, l) => [DECODER_IO.presentKey(l), DECODER_IO.presentValue(l)]).flat()];
  for (const x of needed) if (!known.has(x)) bad('subgraphs', `no subgraph lists ${x} among its outputs`);
}
