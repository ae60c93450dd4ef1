/**
 * One streamed measurement in a process of its own (bench/stream.bench.ts runs it under peak-rss.js,
 * so its VmHWM is this measurement's alone):
 *   node dist/bench/stream-child.js <checkpoint> <what> <sequences> <length>
 * what: `quality-source` (the evaluation's source logits on held-out windows, streamed),
 *       `importance` (reorder's activation importance), `outliers` (outliers' linear profiles),
 *       `anchor-losses` (reorder's per-layer skip losses: one sweep, every layer's skipped variant),
 *       `block-ort` / `block-ts` (layer 0 alone over the sequences, onnxruntime against the TS
 *       runtime's interpreter: how the executor was chosen).
 * Prints one JSON line: wall ms, the calibration activations' bytes.
 */
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { buildModel, IO } from '../src/core/ir/build.js';
import type { ModelGraph, Op } from '../src/core/ir/ir.js';
import { StreamEngine, streamSegments } from '../src/exec/stream/index.js';
import { activationScores } from '../passes/reorder/importance.js';
import { measureLinears } from '../passes/outliers/measure.js';
import { maskSource, skipLayerMasks } from '../passes/reorder/masks.js';
import { Interpreter } from '../src/exec/runtime/interpreter.js';
import { weightTable } from '../src/exec/runtime/model.js';
import { Weight } from '../src/exec/runtime/kernels.js';
import { WasmArena } from '../src/exec/runtime/wasm.js';
import { alignUp } from '../src/exec/runtime/format.js';

const [dir, what, n, len] = process.argv.slice(2);
const source = await openCheckpoint(dir);
const spec = source.spec;
let s = 12345;
const seqs = Array.from({ length: Number(n) }, () => Array.from({ length: Number(len) }, () => (s = (s * 1103515245 + 12345) >>> 0) % spec.vocabSize));
const t0 = performance.now();
let activationBytes = 0;
let extra: Record<string, unknown> = {};
const stream = (e: StreamEngine) => ({ pieces: e.timings.length, openMs: Math.round(e.timings.reduce((a, x) => a + x.openMs, 0)), runMs: Math.round(e.timings.reduce((a, x) => a + x.runMs, 0)) });

if (what === 'quality-source') {
  const e = new StreamEngine(source);
  const p = await e.prefill(seqs);
  for (let i = 0; i < seqs.length; i++) await p.logits(i);
  activationBytes = p.activationBytes;
  await p.close();
  extra = stream(e);
} else if (what === 'importance') {
  const e = new StreamEngine(source);
  await activationScores(e, seqs);
  activationBytes = e.activationBytes;
  extra = stream(e);
} else if (what === 'outliers') {
  const e = new StreamEngine(source);
  await measureLinears(source, buildModel(spec), { calib: seqs, key: 'bench' }, { engine: async () => e });
  activationBytes = e.activationBytes;
  extra = stream(e);
} else if (what === 'anchor-losses') {
  // reorder's anchor-layer losses: the model and each layer skipped, in one sweep
  const e = new StreamEngine(source);
  const at = (l: number) => e.segments.findIndex((g) => g.layer === l);
  await e.losses(seqs, Array.from({ length: spec.numLayers }, (_, l) => ({ source: maskSource(source, skipLayerMasks(spec, l), 'mask'), from: at(l), until: at(l) + 1 })));
  activationBytes = e.activationBytes;
  extra = stream(e);
} else if (what === 'block-ort') {
  const g = buildModel(spec);
  const layer0 = streamSegments(g).slice(0, 2);
  const e = new StreamEngine(source, { graph: { ...g, spec: { ...spec, numLayers: 1 }, ops: layer0.flatMap((x) => x.graph.ops), outputs: ['l0.out'], taps: [] } });
  await e.tap(seqs, []);
  activationBytes = e.activationBytes;
  const l0 = e.timings.find((x) => x.id === 'l0')!;
  extra = { buildMs: Math.round(l0.openMs), runMs: Math.round(l0.runMs) };
} else if (what === 'block-ts') {
  // layer 0 on the TS runtime's interpreter: its input rows fed through an embed op over a table of them
  const g = buildModel(spec);
  const seg = streamSegments(g)[1];
  const hidden = '__stream.hidden';
  const ops: Op[] = [{ op: 'embed', out: seg.carriedIn[0], ids: IO.ids, table: hidden }, ...seg.graph.ops];
  const graph: ModelGraph = { ...seg.graph, inputs: g.inputs, ops, outputs: [], taps: [] };
  const names = [...new Set(seg.graph.ops.flatMap((o) => (o.op === 'linear' ? [o.weight] : o.op === 'rmsnorm' ? [o.weight] : [])))];
  const shapes = new Map<string, [number, number]>();
  for (const o of seg.graph.ops) if (o.op === 'linear') shapes.set(o.weight, [o.outFeatures, o.inFeatures]);
  let size = 0;
  for (const w of names) size += alignUp((shapes.get(w)?.[0] ?? 1) * (shapes.get(w)?.[1] ?? spec.hiddenSize) * 4);
  const arena = WasmArena.create(size, Math.max(spec.intermediateSize, spec.hiddenSize, spec.vocabSize));
  const mem = arena?.weights(size) ?? new Uint8Array(size);
  const weights = new Map<string, Weight>();
  let at = 0;
  for (const w of names) {
    const data = await source.readF32(w);
    const [r, c] = shapes.get(w) ?? [1, spec.hiddenSize];
    const bytes = mem.subarray(at, at + data.length * 4);
    new Float32Array(bytes.buffer, bytes.byteOffset, data.length).set(data);
    weights.set(w, new Weight(w, 'F32', r, c, bytes, arena));
    at += alignUp(data.length * 4);
  }
  const T = Number(len);
  const emb = await source.readF32('model.embed_tokens.weight');
  const buildMs = performance.now() - t0;
  let runMs = 0;
  for (const seq of seqs) {
    const rows = new Float32Array(T * spec.hiddenSize);
    seq.forEach((id, t) => rows.set(emb.subarray(id * spec.hiddenSize, (id + 1) * spec.hiddenSize), t * spec.hiddenSize));
    const table = weightTable((x) => x === hidden || weights.has(x), (x) => (x === hidden ? new Weight(x, 'F32', T, spec.hiddenSize, new Uint8Array(rows.buffer)) : weights.get(x)!));
    const interp = new Interpreter({ ...spec, vocabSize: Math.max(spec.vocabSize, T) }, graph, table);
    const cache = interp.newCache();
    const r0 = performance.now();
    const staged = interp.stage(Array.from({ length: T }, (_, t) => t), cache, []);
    staged.runOps(0, graph.ops.length);
    runMs += performance.now() - r0;
    activationBytes = Math.max(activationBytes, staged.value(`l0.out`).byteLength);
  }
  extra = { buildMs: Math.round(buildMs), runMs: Math.round(runMs) };
} else throw new Error(`unknown measurement "${what}"`);

await source.close();
process.stdout.write(JSON.stringify({ wallMs: Math.round(performance.now() - t0), activationBytes, ...extra }) + '\n');
