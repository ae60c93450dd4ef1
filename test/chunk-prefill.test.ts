/**
 * Chunked prefill (pass chunk-partition, docs/chunk-partition.md) against whole-prompt prefill:
 * the TS runtime's staged chunks and onnxruntime's chunk graphs give the logits of the ordinary
 * forward pass (relative error ≤ 1e-5 in f32) for prompts that are and are not multiples of c, in
 * order and in the out-of-order heuristic's order; pad tokens never reach decoding. Then the CLI:
 * `llmc run --chunk` on ts and cuda artifacts continues stories260K exactly as reference.json, the
 * cuda chunk graphs' memory saving is checked against the files on disk, and bad input is refused.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture, type FixtureArch } from '../fixtures/generate.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { partitionGraph, templateOf, DEFAULT_DEVICE, type Partition } from '../src/core/chunks/partition.js';
import { buildProblem, heuristic } from '../src/core/chunks/schedule.js';
import { buildModel } from '../src/core/ir/build.js';
import type { ModelGraph } from '../src/core/ir/ir.js';
import { CHUNK_SCHEDULE, findRecord } from '../src/core/records/index.js';
import { ChunkedPrefill } from '../src/exec/runtime/chunked.js';
import { modelFromTensors } from '../src/exec/runtime/memory.js';
import type { Model } from '../src/exec/runtime/model.js';
import { OrtChunkPrefill } from '../src/exec/engine/chunks.js';
import { inlineBytes, lowerChunkGraphs } from '../src/exec/onnx/chunks.js';
import { lowerDecoder } from '../src/exec/onnx/decoder.js';
import { splicedBytes, splicedModel, valueInfo } from '../src/exec/onnx/lower.js';
import { DT_FLOAT16 } from '../src/exec/onnx/proto.js';
import { artifactSessionOptions } from '../src/exec/engine/session-options.js';
import * as ort from 'onnxruntime-node';
import { decodeF16 } from '../src/core/util/half.js';
import { llmcInProcess as llmc } from './cli.js';
import { relErr } from './numeric.js';
import { storiesEngine } from './stories-engine.js';

const STORIES = 'fixtures/models/stories260K';
const REFERENCE = JSON.parse(await fsp.readFile(path.join(STORIES, 'reference.json'), 'utf8')) as { prompt_ids: number[]; greedy_ids: number[] };

/** Dispatch orders for N chunks of a partition: chunk by chunk, and the paper's heuristic on a two-processor split (interleaves chunks). */
function orders(p: Partition, N: number): { name: string; order: ArrayLike<number> }[] {
  const M = p.subgraphs.length;
  const problem = buildProblem(templateOf(p, (k) => DEFAULT_DEVICE[k]), N, (i, j) => (p.subgraphs[j].kind === 'attention' ? 1 + i : 2));
  return [
    { name: 'in order', order: Int32Array.from({ length: N * M }, (_, t) => t) },
    { name: 'heuristic', order: heuristic(problem, 'all').order },
  ];
}

const same = (a: Float32Array, b: Float32Array) => a.length === b.length && a.every((x, i) => Object.is(x, b[i]));
const promptOf = (V: number, P: number) => Array.from({ length: P }, (_, t) => (t * 31 + 7) % V);

describe('chunked prefill on the TS runtime equals whole-prompt prefill', () => {
  const tmp = path.join(os.tmpdir(), `llmc-chunk-prefill-${process.pid}`);
  const models: { name: string; model: Model; close: () => Promise<void> }[] = [];

  beforeAll(async () => {
    const open = async (name: string, dir: string) => {
      const ck = await openCheckpoint(dir);
      models.push({ name, model: await modelFromTensors(ck), close: () => ck.close() });
    };
    await open('stories260K', STORIES);
    for (const arch of ['llama', 'qwen2', 'mixtral'] as FixtureArch[]) {
      const f = await generateFixture(path.join(tmp, arch), { arch, seed: 3, tokenizer: 'none' });
      await open(arch, f.dir);
    }
  });
  afterAll(async () => {
    for (const m of models) await m.close();
    await fsp.rm(tmp, { recursive: true, force: true });
  });

  it('P ∈ {1, c−1, c, c+1, 3c+5}, c ∈ {4, 8}, in order and out of order; the cache holds the prompt only', () => {
    for (const { name, model } of models) {
      const p = partitionGraph(model.graph);
      const V = model.spec.vocabSize;
      for (const c of [4, 8]) {
        for (const P of [1, c - 1, c, c + 1, 3 * c + 5]) {
          const ids = promptOf(V, P);
          const whole = model.newCache();
          const ref = model.forward(ids, whole);
          const N = Math.ceil(P / c);
          const next = (P * 13) % V;
          const refNext = model.forward([next], whole, { lastOnly: true });
          for (const { name: how, order } of orders(p, N)) {
            const chunked = new ChunkedPrefill(model, { c, subgraphs: p.subgraphs, order: () => order });
            const cache = model.newCache();
            const logits = chunked.prefill(ids, cache, 'all');
            const at = `${name} c=${c} P=${P} ${how}`;
            expect(logits.length, at).toBe(P * V);
            expect(relErr(logits, ref), at).toBeLessThan(1e-5);
            expect(cache.length, at).toBe(P);
            // Decoding after the chunked prefill sees what it sees after the whole one (no pad key).
            expect(relErr(model.forward([next], cache, { lastOnly: true }), refNext), at).toBeLessThan(1e-5);
          }
        }
      }
    }
  });
});

/** The chunk graphs of `graph` lowered at `compute` (weights in that format), and a runner over them. */
async function openChunks(ck: Checkpoint, graph: ModelGraph, p: Partition, compute: 'fp32' | 'fp16', c: number, nMax: number) {
  const spec = ck.spec;
  const set = lowerChunkGraphs(ck, graph, p, { compute, format: () => ({ kind: compute }) }, c, nMax);
  const runner = await OrtChunkPrefill.open(c, p.subgraphs, nMax, async (name) => inlineBytes(set.graphs.find((g) => g.name === name)!), {
    kvHeads: spec.numKvHeads,
    headDim: spec.headDim,
    vocab: spec.vocabSize,
    maxPositions: spec.maxPositions,
  });
  return { set, runner };
}

describe('chunk graphs on onnxruntime equal the whole-prompt graph', () => {
  const stories = storiesEngine();

  it('stories260K, c = 4: P ∈ {3, 4, 5, 17}, in order and out of order', async () => {
    const { ck, engine } = stories;
    const spec = ck.spec;
    const graph = buildModel(spec);
    const p = partitionGraph(graph);
    const c = 4;
    const nMax = 5;
    const { set, runner } = await openChunks(ck, graph, p, 'fp32', c, nMax);
    try {
      // One graph per static subgraph and one weightless attention graph per chunk index.
      expect(set.graphs.filter((g) => g.i === null).length).toBe(p.subgraphs.filter((s) => s.share === 'static').length);
      expect(set.graphs.filter((g) => g.i !== null).map((g) => g.tensors.length)).toEqual(new Array(nMax).fill(0));
      for (const P of [3, 4, 5, 17]) {
        const ids = promptOf(spec.vocabSize, P);
        const ref = await engine.logits(ids);
        for (const { name, order } of orders(p, Math.ceil(P / c))) {
          const { logits, cache } = await runner.prefill(ids, order);
          expect(relErr(logits, ref), `P=${P} ${name}`).toBeLessThan(1e-5);
          expect(cache.length).toBe(P);
          // Decoding needs the last position's logits only: the head runs on the last chunk alone.
          const heads: number[] = [];
          const last = await runner.prefill(ids, order, (i, j) => p.subgraphs[j].kind === 'head' && heads.push(i), 'last');
          expect(heads).toEqual([Math.ceil(P / c) - 1]);
          expect(same(last.logits, logits.slice((P - 1) * spec.vocabSize))).toBe(true);
          expect(same(last.cache.k[0] as Float32Array, cache.k[0] as Float32Array)).toBe(true);
        }
      }
      await expect(runner.prefill(promptOf(spec.vocabSize, 21), Int32Array.from({ length: 6 * p.subgraphs.length }, (_, t) => t))).rejects.toThrow(/attention graphs for 5/);
    } finally {
      await runner.close();
    }
  });
});

describe('fp16 chunk graphs (the cuda default) on onnxruntime', () => {
  const stories = storiesEngine();

  it('are bit-identical for every chunk length, padded last chunks included (c ∈ {1, 8, 16, 17, 32}, P = 17), and within fp16 rounding of the f32 whole-prompt logits', async () => {
    const { ck, engine } = stories;
    const spec = ck.spec;
    const graph = buildModel(spec);
    const p = partitionGraph(graph);
    const P = 17;
    const ids = promptOf(spec.vocabSize, P);
    const ref = await engine.logits(ids);
    const got: Float32Array[] = [];
    for (const c of [17, 1, 8, 16, 32]) {
      const nMax = Math.ceil(P / c);
      const { runner } = await openChunks(ck, graph, p, 'fp16', c, nMax);
      try {
        got.push((await runner.prefill(ids, Int32Array.from({ length: nMax * p.subgraphs.length }, (_, t) => t))).logits);
      } finally {
        await runner.close();
      }
    }
    // chunking adds no rounding of its own: the KV crosses graphs in fp16, as it is stored in one graph
    for (const g of got.slice(1)) expect(same(g, got[0])).toBe(true);
    // fp16 activations against f32: ~2^-11 per rounding over 5 layers, logits of magnitude ~10
    expect(relErr(got[0], ref)).toBeLessThan(2e-2);
  });
});

/** The whole-prompt fp16 decoder (onnx/model.onnx of a cuda artifact) in memory; `taps` become extra graph outputs. */
async function fp16Decoder(ck: Checkpoint, graph: ModelGraph, taps: readonly string[] = []) {
  const d = lowerDecoder(ck, graph, { compute: 'fp16', format: () => ({ kind: 'fp16' }) });
  d.graph.output = [...d.graph.output!, ...taps.map((t) => valueInfo(t, DT_FLOAT16))];
  return ort.InferenceSession.create(await splicedBytes(splicedModel({ ...d.model }, d.graph, d.tensors), d.tensors), artifactSessionOptions(1));
}

const i64 = (xs: readonly number[]) => new ort.Tensor('int64', BigInt64Array.from(xs, (x) => BigInt(x)), [1, xs.length]);
const emptyKv = (spec: Checkpoint['spec']) => new ort.Tensor('float16', new Uint16Array(0), [1, spec.numKvHeads, 0, spec.headDim]);

/** A prompt through the whole fp16 decoder from an empty cache: every output it names. */
async function wholeFp16(sess: ort.InferenceSession, spec: Checkpoint['spec'], ids: number[], outputs?: string[]) {
  const feeds: Record<string, ort.Tensor> = { input_ids: i64(ids), attention_mask: i64(ids.map(() => 1)), position_ids: i64(ids.map((_, t) => t)) };
  for (const n of sess.inputNames) if (n.startsWith('past_key_values')) feeds[n] = emptyKv(spec);
  return sess.run(feeds, outputs ?? sess.outputNames);
}

const argmaxRow = (a: Float32Array, t: number, V: number) => {
  let b = 0;
  for (let v = 1; v < V; v++) if (a[t * V + v] > a[t * V + b]) b = v;
  return b;
};

/**
 * Chunked = whole prefill at fp16 (the cuda default), against the artifact's own whole-prompt graph.
 * They are not bit-identical on onnxruntime's CPU, and the cause is not chunking: the CPU has no fp16
 * kernel for Add and friends, so onnxruntime runs them in float32 and elides the fp16 rounding of a
 * value whose next reader is a float32 island (the residual sum feeding the next layer's RMSNorm).
 * Where a chunk graph ends, the value is a graph output and is rounded, as ONNX says it is. So every
 * chunk graph fed the whole graph's own values reproduces them (layer 0 bit for bit, later layers
 * within an fp16 ulp), and the logits differ by the rounding steps the whole graph skips.
 * Stated tolerance (docs/chunk-partition.md): max |Δlogit| ≤ 2⁻⁸·max |logit|, smaller than either
 * graph's distance from float32, and greedy ids equal wherever float32's top-2 margin exceeds 2× it.
 */
describe('fp16 chunked prefill against the cuda artifact\'s whole fp16 graph', () => {
  const stories = storiesEngine();

  it('each chunk graph reproduces what the whole graph computes from the same inputs (P = 16, c = 16)', async () => {
    const { ck } = stories;
    const spec = ck.spec;
    const graph = buildModel(spec);
    const p = partitionGraph(graph);
    const P = 16;
    const ids = promptOf(spec.vocabSize, P);
    const taps = [...new Set(p.subgraphs.flatMap((s) => s.outputs))];
    const sess = await fp16Decoder(ck, graph, taps);
    const W = await wholeFp16(sess, spec, ids);
    await sess.release();
    const set = lowerChunkGraphs(ck, graph, p, { compute: 'fp16', format: () => ({ kind: 'fp16' }) }, P, 1);
    const open = async (name: string) => ort.InferenceSession.create(await inlineBytes(set.graphs.find((g) => g.name === name)!), artifactSessionOptions(1));
    /** max |a − b| in ulps of the tensor's largest |b| (an fp16 ulp there is 2^(⌊log2 max⌋ − 10)). */
    const ulps = (a: ort.Tensor, b: ort.Tensor) => {
      const x = decodeF16(a.data as Uint16Array);
      const y = decodeF16(b.data as Uint16Array);
      const top = y.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
      return x.reduce((m, v, k) => Math.max(m, Math.abs(v - y[k])), 0) / 2 ** (Math.floor(Math.log2(top)) - 10);
    };
    const attention = await open('attention.0');
    for (const s of p.subgraphs) {
      let got: Record<string, ort.Tensor>;
      if (s.kind === 'attention') {
        const [q, k, v] = s.inputs;
        const out = await attention.run({ q: W[q], k: W[k], v: W[v], past_key: emptyKv(spec), past_value: emptyKv(spec) });
        got = { [s.outputs[0]]: out.attn };
      } else if (s.kind === 'head') {
        continue;
      } else {
        const g = await open(s.id);
        const feeds: Record<string, ort.Tensor> = {};
        for (const n of g.inputNames) feeds[n] = n === 'input_ids' ? i64(ids) : n === 'position_ids' ? i64(ids.map((_, t) => t)) : W[n];
        got = await g.run(feeds);
        await g.release();
      }
      for (const v of s.outputs) {
        const u = ulps(got[v], W[v]);
        if (s.layer === null || s.layer === 0 || s.kind === 'attention') expect(u, `${s.id} ${v}`).toBe(0);
        else expect(u, `${s.id} ${v}`).toBeLessThanOrEqual(1);
      }
    }
    await attention.release();
  });

  it('logits within 2⁻⁸·max|logit| (P ∈ {16, 40}, c ∈ {P, 16, 4}); greedy ids equal where float32\'s top-2 margin exceeds twice that', async () => {
    const { ck, engine } = stories;
    const spec = ck.spec;
    const V = spec.vocabSize;
    const graph = buildModel(spec);
    const p = partitionGraph(graph);
    const sess = await fp16Decoder(ck, graph);
    try {
      for (const P of [16, 40]) {
        const ids = promptOf(V, P);
        const whole = (await wholeFp16(sess, spec, ids, ['logits'])).logits.data as Float32Array;
        const f32 = await engine.logits(ids);
        const scale = whole.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
        const tol = scale / 256;
        const dist = (a: Float32Array, b: Float32Array) => a.reduce((m, x, k) => Math.max(m, Math.abs(x - b[k])), 0);
        for (const c of [P, 16, 4]) {
          const nMax = Math.ceil(P / c);
          const { runner } = await openChunks(ck, graph, p, 'fp16', c, nMax);
          let chunked: Float32Array;
          try {
            chunked = (await runner.prefill(ids, Int32Array.from({ length: nMax * p.subgraphs.length }, (_, t) => t))).logits;
          } finally {
            await runner.close();
          }
          const d = dist(chunked, whole);
          expect(d, `P=${P} c=${c}`).toBeLessThanOrEqual(tol);
          // both are fp16 approximations of the same float32 model, closer to each other than either is to it
          expect(d).toBeLessThan(Math.min(dist(chunked, f32), dist(whole, f32)));
          for (let t = 0; t < P; t++) {
            const row = Array.from(f32.subarray(t * V, (t + 1) * V)).sort((a, b) => b - a);
            if (row[0] - row[1] > 2 * tol) expect(argmaxRow(chunked, t, V), `P=${P} c=${c} t=${t}`).toBe(argmaxRow(whole, t, V));
          }
        }
      }
    } finally {
      await sess.release();
    }
  });
});

describe('llmc run --chunk', () => {
  const tmp = path.join(os.tmpdir(), `llmc-chunk-cli-${process.pid}`);
  const cache = path.join(tmp, 'cache');
  const ts = path.join(tmp, 'ts');
  const cuda = path.join(tmp, 'cuda');
  // BOS + the first 10 reference ids (11 tokens: 3 chunks of 4, the last padded): the continuation is the reference's.
  const prompt = [...REFERENCE.prompt_ids, ...REFERENCE.greedy_ids.slice(0, 10)];
  const expected = REFERENCE.greedy_ids.slice(10, 26);
  const opts = ['--passes', 'chunk-partition', '--opt', 'chunk-partition.chunk=4,16', '--opt', 'chunk-partition.nMax=6', '--cache-dir', cache];

  beforeAll(async () => {
    await fsp.mkdir(tmp, { recursive: true });
    // The ts artifact's costs measured on the TS runtime, the cuda one's on onnxruntime's chunk graphs.
    for (const [target, out, costs] of [['ts', ts, 'measure'], ['cuda', cuda, 'measure-ort']]) {
      const r = await llmc('compile', STORIES, '--target', target, ...opts, '--opt', `chunk-partition.costs=${costs}`, '-o', out);
      expect(r.code, r.stderr).toBe(0);
    }
  });
  afterAll(() => fsp.rm(tmp, { recursive: true, force: true }));

  const run = async (dir: string, ...extra: string[]) => {
    const r = await llmc('run', dir, '--prompt-ids', prompt.join(','), '-n', String(expected.length), '--json', ...extra);
    expect(r.code, r.stderr).toBe(0);
    return JSON.parse(r.stdout) as { generated_ids: number[]; notes: string[] };
  };

  it('ts and cuda artifacts continue stories260K as reference.json with c = 4, 16 and auto', async () => {
    for (const dir of [ts, cuda]) {
      for (const chunk of ['4', '16', 'auto']) {
        const out = await run(dir, '--chunk', chunk);
        expect(out.generated_ids, `${dir} --chunk ${chunk}`).toEqual(expected);
        expect(out.notes.join('\n')).toMatch(/chunked prefill/);
        if (chunk === '4') {
          // Streamed without --json: the same ids, one line.
          const streamed = await llmc('run', dir, '--prompt-ids', prompt.join(','), '-n', String(expected.length), '--chunk', chunk);
          expect(streamed.stdout).toBe(`${expected.join(' ')}\n`);
        }
      }
      expect((await run(dir)).generated_ids).toEqual(expected);
    }
    const four = await run(ts, '--chunk', '4');
    expect(four.notes.join('\n')).toMatch(/3 chunk\(s\) of 4, tabulated schedule/);
  });

  it('the record carries the plan; the cuda memory saving is computed from the files on disk', async () => {
    const manifest = JSON.parse(await fsp.readFile(path.join(cuda, 'llmc-manifest.json'), 'utf8'));
    const rec = findRecord(manifest.passes, CHUNK_SCHEDULE)!;
    expect(rec.chunks.map((p) => p.c)).toEqual([4, 16]);
    expect(rec.costs.source).toMatch(/onnxruntime/);
    expect(rec.chunks[0].schedules.map((r) => r.N)).toEqual([1, 2, 3, 4, 5, 6]);
    const info = manifest.targetInfo.chunks as { c: number; graphs: { file: string; i: number | null; graphBytes: number }[]; memory: { rows: { N: number; naive: number; shared: number; saved: number; modelNaive: number; modelShared: number; modelSaved: number }[] } }[];
    const set = info.find((s) => s.c === 4)!;
    const size = async (f: string) => (await fsp.stat(path.join(cuda, f))).size;
    let staticBytes = 0;
    for (const g of set.graphs) {
      expect(await size(g.file)).toBe(g.graphBytes);
      if (g.i === null) staticBytes += g.graphBytes;
    }
    // The static graphs read every weight of model.onnx_data except what only model.onnx reads (none here: same graph).
    const weights = await size('onnx/model.onnx_data');
    const att = (i: number) => set.graphs.find((g) => g.i === i)!.graphBytes;
    const row = set.memory.rows.find((r) => r.N === 4)!;
    const dyn = att(0) + att(1) + att(2) + att(3);
    expect(row.shared).toBeLessThanOrEqual(staticBytes + weights + dyn);
    expect(row.naive).toBe(4 * (row.shared - dyn) + dyn);
    expect(row.saved).toBeGreaterThan(0.6);
    expect(row.saved).toBeLessThan(0.75);
    // SPEC §1.6's model adds the record's activation buffers: A_stat per graph set, A_dyn per chunk index.
    const act = rec.chunks[0].memory;
    const dynAct = act.dynamicActivationBytes.slice(0, 4).reduce((a, b) => a + b, 0);
    expect(row.modelNaive).toBe(row.naive + 4 * act.staticActivationBytes + dynAct);
    expect(row.modelShared).toBe(row.shared + act.staticActivationBytes + dynAct);
    expect(row.modelSaved).toBeCloseTo(1 - row.modelShared / row.modelNaive, 12);
    // The report's section shows the schedules and the saving.
    const r = await llmc('report', cuda, '--json', '--no-quality');
    expect(r.code, r.stderr).toBe(0);
    const section = (JSON.parse(r.stdout) as { sections: { id: string; data: { chunks: { c: number; schedules: unknown[]; memory: unknown[] }[] } }[] }).sections.find((s) => s.id === 'chunk-schedule')!;
    expect(section.data.chunks.map((p) => [p.c, p.schedules.length])).toEqual([[4, 6], [16, 6]]);
    expect(section.data.chunks[0].memory).toEqual(set.memory.rows);
  });

  it('chunk=auto picks argmin_c E_P[Σ_i t_chunk(i, c)] from a cost file (one length, and the best pair)', async () => {
    // Static costs grow sub-linearly with c (a fuller NPU), attention grows with the chunk index.
    const table: Record<number, Record<string, { device: string; ms: number; msPerChunk?: number }>> = {
      32: { embed: { device: 'CPU', ms: 0.05 }, qkv: { device: 'NPU', ms: 0.9 }, attention: { device: 'CPU', ms: 0.2, msPerChunk: 0.05 }, mlp: { device: 'NPU', ms: 2.2 }, head: { device: 'CPU', ms: 0.8 } },
      128: { embed: { device: 'CPU', ms: 0.1 }, qkv: { device: 'NPU', ms: 1.6 }, attention: { device: 'CPU', ms: 0.8, msPerChunk: 0.6 }, mlp: { device: 'NPU', ms: 4.5 }, head: { device: 'CPU', ms: 2.5 } },
      256: { embed: { device: 'CPU', ms: 0.3 }, qkv: { device: 'NPU', ms: 3.3 }, attention: { device: 'CPU', ms: 2, msPerChunk: 4.5 }, mlp: { device: 'NPU', ms: 9.8 }, head: { device: 'CPU', ms: 5 } },
    };
    const file = path.join(tmp, 'costs-auto.json');
    await fsp.writeFile(file, JSON.stringify({ format: 'llmc-chunk-costs/1', device: 'test', chunks: Object.entries(table).map(([c, subgraphs]) => ({ c: Number(c), subgraphs })) }));
    const prompts = [20, 100, 300, 500];
    // stories260K: embed, 5 × (qkv, attention, mlp), head.
    const count: Record<string, number> = { embed: 1, qkv: 5, attention: 5, mlp: 5, head: 1 };
    const cost = (c: number, P: number) => {
      let s = 0;
      const N = Math.ceil(P / c);
      // the head runs on the last chunk only
      for (let i = 0; i < N; i++) for (const [k, n] of Object.entries(count)) if (k !== 'head' || i === N - 1) s += n * (table[c][k].ms + (table[c][k].msPerChunk ?? 0) * (i + 1));
      return s;
    };
    const E = (set: number[]) => prompts.reduce((a, P) => a + Math.min(...set.map((c) => cost(c, P))), 0) / prompts.length;
    const cs = [32, 128, 256];
    const best1 = cs.reduce((a, b) => (E([b]) < E([a]) ? b : a));
    const pairs = [[32, 128], [32, 256], [128, 256]];
    const best2 = pairs.reduce((a, b) => (E(b) < E(a) ? b : a));
    for (const [lengths, want] of [['1', [best1]], ['2', best2]] as const) {
      const out = path.join(tmp, `auto${lengths}`);
      const r = await llmc('compile', STORIES, '--target', 'ts', '--passes', 'chunk-partition', '--opt', `chunk-partition.costs=${file}`, '--opt', `chunk-partition.prompts=${prompts.join(',')}`, '--opt', `chunk-partition.lengths=${lengths}`, '--opt', 'chunk-partition.nMax=2', '-o', out);
      expect(r.code, r.stderr).toBe(0);
      const rec = findRecord(JSON.parse(await fsp.readFile(path.join(out, 'llmc-manifest.json'), 'utf8')).passes, CHUNK_SCHEDULE)!;
      expect(rec.choice.chosen).toEqual(want);
      for (const e of rec.choice.expected) expect(Math.abs(e.serialMs - E([e.c])) / E([e.c])).toBeLessThan(1e-5); // 6 significant digits
      expect(rec.processors.sort()).toEqual(['CPU', 'NPU']);
    }
    expect(best1).not.toBe(32); // the table makes the choice non-trivial
  });

  it('refuses bad input with one line and exit code 2', async () => {
    const bad = async (args: string[], re: RegExp) => {
      const r = await llmc(...args);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(re);
    };
    const file = async (name: string, v: unknown) => {
      const f = path.join(tmp, name);
      await fsp.writeFile(f, JSON.stringify(v));
      return f;
    };
    const runArgs = ['run', ts, '--prompt-ids', '1,2', '-n', '2'];
    await bad([...runArgs, '--chunk', '0'], /--chunk must be a chunk length of at least 1/);
    // options chunk=auto reads, given with a fixed chunk, are refused rather than ignored
    await bad(['compile', STORIES, '--target', 'ts', '--passes', 'chunk-partition', '--opt', 'chunk-partition.chunk=4', '--opt', 'chunk-partition.lengths=2', '-o', path.join(tmp, 'x')], /chunk-partition\.lengths chooses among chunk lengths for chunk=auto; chunk=4 fixes them/);
    await bad(['compile', STORIES, '--target', 'ts', '--passes', 'chunk-partition', '--opt', 'chunk-partition.chunk=4', '--opt', 'chunk-partition.candidates=8,16', '-o', path.join(tmp, 'x')], /chunk-partition\.candidates chooses/);
    await bad([...runArgs, '--chunk', '5'], /chunk graphs for c = 4, 16, not 5/);
    await bad(['run', STORIES, '--prompt-ids', '1', '-n', '2', '--chunk', '4'], /--chunk needs an artifact with chunk graphs \(llmc compile --passes chunk-partition .*\); this is a Hugging Face checkpoint/);
    const out = path.join(tmp, 'bad');
    const compile = (...o: string[]) => ['compile', STORIES, '--target', 'ts', '--passes', 'chunk-partition', ...o, '-o', out];
    await bad(compile('--opt', 'chunk-partition.chunk=0'), /at least 1 token/);
    await bad(compile('--opt', 'chunk-partition.chunk=1024'), /larger than the model's context \(512 tokens\)/);
    const costs = (sub: Record<string, unknown>) => ({ format: 'llmc-chunk-costs/1', chunks: [{ c: 4, subgraphs: sub }] });
    const full = { embed: { device: 'CPU', ms: 0.1 }, qkv: { device: 'NPU', ms: 1 }, attention: { device: 'CPU', ms: 0.5, msPerChunk: 0.2 }, mlp: { device: 'NPU', ms: 2 }, head: { device: 'CPU', ms: 1 } };
    const { mlp: _, ...lacking } = full;
    await bad(compile('--opt', `chunk-partition.costs=${await file('lacking.json', costs(lacking))}`), /lacking\.json.*mlp/);
    await bad(compile('--opt', `chunk-partition.costs=${await file('negative.json', costs({ ...full, qkv: { device: 'NPU', ms: -1 } }))}`), /negative/);
    const deps = { format: 'llmc-chunk-deps/1', edges: [{ from: 'l1.mlp', to: 'l0.qkv' }] };
    await bad(compile('--opt', `chunk-partition.deps=${await file('cycle.json', deps)}`), /cycle\.json.*cyclic/);
    await expect(fsp.stat(out)).rejects.toThrow();
  });
});
