/**
 * `llmc run` (and quality evaluation) on a qnn artifact: the artifact's own graphs, in the order of
 * graph/subgraphs.json, the way a device runs a chunked prefill:
 *   - every subgraph (the static QDQ graphs of the NPU, the CPU attention, embed and head graphs) at
 *     its static chunk shape [1, a, b, C]: the prompt in chunks of c tokens, the last one padded (pads
 *     masked out of attention, their KV dropped). Engine `sim` (default): ./sim.ts, the device's
 *     integer arithmetic in TS from the artifact's files; `onnxruntime`: the ONNX files on onnxruntime;
 *   - the shadow nodes on the CPU in TS (./shadow-exec.ts) from weights/shadow_{hot,cold}.bin.
 * So perplexity and agreement measured through it are the artifact's (its QDQ rounding, its clipping,
 * its shadow), not a float approximation. Decoding runs one padded chunk per new token (the static
 * graphs have one shape).
 */
import path from 'node:path';
import '../../src/exec/engine/ort-env.js'; // before onnxruntime-node loads
import * as ort from 'onnxruntime-node';
import { leadingSlots } from '../../src/exec/engine/chunks.js';
import { openArtifactSession } from '../../src/exec/engine/session-options.js';
import { normalizeConfig, type ArchSpec } from '../../src/core/arch/spec.js';
import { LlmcError, UsageError } from '../../src/core/errors.js';
import type { GenerateRequest } from '../../src/core/pipeline/target.js';
import { readJsonAs } from '../../src/core/util/json-file.js';
import type { OutlierScales } from '../../src/core/records/index.js';
import { Sampler } from '../../src/core/sampling.js';
import type { SubgraphEntry } from './emit.js';
import type { Chunk, QLinear } from './plan.js';
import { linearOf } from './plan.js';
import { applyShadow, type ShadowWork } from './shadow-exec.js';
import { ShadowStore } from './shadow.js';
import { checkSubgraphs, CONFIG_OBJECT, irOp, readSubgraphs } from './files.js';
import { openSimulation, type SubgraphExecutor } from './sim.js';

export type QnnEngine = 'sim' | 'onnxruntime';

/** The artifact's ONNX files on onnxruntime. */
export async function openOnnxruntime(dir: string, subgraphs: readonly SubgraphEntry[], threads: number): Promise<SubgraphExecutor> {
  const sessions = new Map<string, ort.InferenceSession>();
  for (const s of subgraphs) if (s.file) sessions.set(s.id, await openArtifactSession(path.join(dir, s.file), threads, 'the graph', { exactInt8: true }));
  return {
    run: (sg, feeds) => sessions.get(sg.id)!.run(feeds),
    close: async () => {
      for (const s of sessions.values()) await s.release();
    },
  };
}

export interface Kv {
  /** Per layer [1, kvHeads, length, headDim] of real positions only. */
  keys: ort.Tensor[];
  values: ort.Tensor[];
  length: number;
}

export interface QnnRunStats extends ShadowWork {
  chunks: number;
  /** Subgraph runs by device, and device switches (CPU↔NPU synchronizations). */
  npuRuns: number;
  cpuRuns: number;
  syncs: number;
  coldRows: number;
  hotRows: number;
}

export class QnnRunner {
  readonly stats: QnnRunStats = { chunks: 0, npuRuns: 0, cpuRuns: 0, syncs: 0, outliers: 0, recomputed: 0, coldRows: 0, hotRows: 0 };

  private constructor(
    readonly spec: ArchSpec,
    readonly chunk: Chunk,
    private readonly subgraphs: SubgraphEntry[],
    private readonly exec: SubgraphExecutor,
    private readonly linears: Map<string, QLinear>,
    private readonly shadow: ShadowStore,
    private readonly kvShape: { layer: number; heads: number; headDim: number }[],
  ) {}

  /** `observe`: wraps the executor (a test comparing both engines subgraph by subgraph on the same feeds). */
  static async open(dir: string, rec: OutlierScales, opts: { threads?: number; engine?: QnnEngine; observe?: (exec: SubgraphExecutor, subgraphs: readonly SubgraphEntry[]) => SubgraphExecutor } = {}): Promise<QnnRunner> {
    const configFile = path.join(dir, 'config.json');
    const spec = normalizeConfig(await readJsonAs(CONFIG_OBJECT, configFile), configFile);
    const sgFile = path.join(dir, 'graph/subgraphs.json');
    const sg = await readSubgraphs(dir);
    checkSubgraphs(sg, spec, sgFile);
    // Checked against the schema: the fields read at run time are there and well-typed.
    const subgraphs = sg.subgraphs.map((s) => ({ ...s, ops: s.ops.map(irOp) })) as unknown as SubgraphEntry[];
    const opened = opts.engine === 'onnxruntime' ? await openOnnxruntime(dir, subgraphs, opts.threads ?? 1) : openSimulation(dir, subgraphs);
    const exec = opts.observe ? opts.observe(opened, subgraphs) : opened;
    const shadow = new ShadowStore(dir);
    const decisions = new Map(rec.linears.map((l) => [l.weight, l]));
    const linears = new Map<string, QLinear>();
    for (const s of subgraphs) {
      for (const sh of s.shadow ?? []) {
        const d = decisions.get(sh.weight);
        if (!d) throw new LlmcError(`the outliers record has no linear ${sh.weight} (subgraph ${s.id})`, dir);
        linears.set(sh.weight, linearOf(d, sh.x, sh.y, null)); // its bias values come from the shadow index
      }
    }
    const kvShape = subgraphs
      .filter((s) => s.kind === 'attention')
      .map((s) => {
        const k = s.inputs.find((i) => /^past_key_values\.\d+\.key$/.test(i.name));
        const [heads, headDim] = [k?.shape[1], k?.shape[3]];
        if (!k || typeof heads !== 'number' || typeof headDim !== 'number') throw new LlmcError(`subgraph ${s.id}: no past_key_values.<layer>.key input of shape [1, heads, past, headDim]`, sgFile);
        return { layer: Number(/\.(\d+)\./.exec(k.name)![1]), heads, headDim };
      });
    return new QnnRunner(spec, sg.chunk as Chunk, subgraphs, exec, linears, shadow, kvShape);
  }

  emptyKv(): Kv {
    const empty = () => this.kvShape.map((s) => new ort.Tensor('float32', new Float32Array(0), [1, s.heads, 0, s.headDim]));
    return { keys: empty(), values: empty(), length: 0 };
  }

  /** One chunk: `ids` (≤ c tokens) after kv.length positions; logits [n, V] and the grown KV. */
  async forwardChunk(ids: number[], kv: Kv): Promise<{ logits: Float32Array; kv: Kv }> {
    const { c } = this.chunk;
    const n = ids.length;
    if (n < 1 || n > c) throw new Error(`internal: chunk of ${n} tokens (c = ${c})`);
    const maxPos = this.spec.maxPositions;
    if (kv.length + n > maxPos) throw new UsageError(`the sequence is longer than the model's context (${maxPos} tokens)`);
    const big = (xs: number[]) => BigInt64Array.from(xs, (x) => BigInt(x));
    const padded = [...ids, ...new Array<number>(c - n).fill(0)];
    const values = new Map<string, ort.Tensor>();
    values.set('input_ids', new ort.Tensor('int64', big(padded), [1, c]));
    values.set('position_ids', new ort.Tensor('int64', big(padded.map((_, i) => Math.min(kv.length + i, maxPos - 1))), [1, c]));
    const mask = new BigInt64Array(kv.length + c).fill(1n);
    mask.fill(0n, kv.length + n);
    values.set('attention_mask', new ort.Tensor('int64', mask, [1, kv.length + c]));
    this.kvShape.forEach((s, i) => {
      values.set(`past_key_values.${s.layer}.key`, kv.keys[i]);
      values.set(`past_key_values.${s.layer}.value`, kv.values[i]);
    });
    let last: string | null = null;
    for (const s of this.subgraphs) {
      if (s.kind !== 'embed' && s.kind !== 'head') {
        if (last && last !== s.device) this.stats.syncs++;
        last = s.device;
      }
      await this.runSubgraph(s, values, n);
    }
    this.stats.chunks++;
    // Keep the KV of real positions only: the next chunk's mask then needs no pad holes.
    const keep = kv.length + n;
    const trim = (t: ort.Tensor, heads: number, hd: number) => new ort.Tensor('float32', leadingSlots(t.data as Float32Array, heads, Number(t.dims[2]), keep, hd), [1, heads, keep, hd]);
    const next: Kv = {
      keys: this.kvShape.map((s) => trim(values.get(`present.${s.layer}.key`)!, s.heads, s.headDim)),
      values: this.kvShape.map((s) => trim(values.get(`present.${s.layer}.value`)!, s.heads, s.headDim)),
      length: kv.length + n,
    };
    const V = this.spec.vocabSize;
    return { logits: (values.get('logits')!.data as Float32Array).slice(0, n * V), kv: next };
  }

  /** The artifact's subgraph `s` on one chunk's `values` (n real tokens); `session` runs a graph not in subgraphs.json (chunk graphs). */
  async runSubgraph(s: Pick<SubgraphEntry, 'id' | 'device' | 'shadow'> & { inputs: readonly { name: string }[]; outputs: readonly { name: string }[] }, values: Map<string, ort.Tensor>, n: number, session?: ort.InferenceSession): Promise<void> {
    if (s.device === 'NPU') this.stats.npuRuns++;
    else this.stats.cpuRuns++;
    if (s.shadow) {
      for (const sh of s.shadow) {
        const lin = this.linears.get(sh.weight)!;
        const x = values.get(sh.x)!.data as Float32Array;
        const yT = values.get(sh.y)!;
        const y = (yT.data as Float32Array).slice();
        const work = applyShadow(lin, x, y, n, (side, k) => this.shadow.row(sh.weight, side, k), this.shadow.bias(sh.weight));
        this.stats.outliers += work.outliers;
        this.stats.recomputed += work.recomputed;
        values.set(sh.y, new ort.Tensor('float32', y, yT.dims));
      }
      this.stats.coldRows = this.shadow.stats.coldRows;
      this.stats.hotRows = this.shadow.stats.hotRows;
      return;
    }
    const feeds: Record<string, ort.Tensor> = {};
    for (const i of s.inputs) {
      const v = values.get(i.name);
      if (!v) throw new Error(`internal: ${s.id} reads ${i.name}, which nothing wrote`);
      feeds[i.name] = v;
    }
    // The artifact's subgraphs run on the chosen engine; chunk graphs (float CPU steps) on their session.
    const out = session ? await session.run(feeds) : await this.exec.run(this.entry(s.id), feeds);
    for (const o of s.outputs) values.set(o.name, out[o.name]);
  }

  /** The entry of graph/subgraphs.json named `id`. */
  entry(id: string): SubgraphEntry {
    const s = this.subgraphs.find((x) => x.id === id);
    if (!s) throw new LlmcError(`graph/subgraphs.json has no subgraph ${id}`);
    return s;
  }

  /** Logits [T, V] at every position of `ids` from an empty context, chunk by chunk. */
  async logits(ids: number[]): Promise<Float32Array> {
    const V = this.spec.vocabSize;
    const out = new Float32Array(ids.length * V);
    let kv = this.emptyKv();
    for (let at = 0; at < ids.length; at += this.chunk.c) {
      const r = await this.forwardChunk(ids.slice(at, at + this.chunk.c), kv);
      out.set(r.logits, at * V);
      kv = r.kv;
    }
    return out;
  }

  async generate(promptIds: number[], opts: GenerateRequest): Promise<number[]> {
    const V = this.spec.vocabSize;
    for (const id of promptIds) if (!Number.isInteger(id) || id < 0 || id >= V) throw new UsageError(`token id ${id} is outside the vocabulary [0, ${V})`);
    if (!promptIds.length) throw new UsageError('the prompt is empty');
    const out: number[] = [];
    if (opts.maxTokens <= 0) return out;
    const sampler = new Sampler(opts);
    const stop = new Set(opts.stopIds ?? this.spec.eosTokenIds);
    let kv = this.emptyKv();
    let logits: Float32Array = new Float32Array(0);
    for (let at = 0; at < promptIds.length; at += this.chunk.c) {
      const r = await this.forwardChunk(promptIds.slice(at, at + this.chunk.c), kv);
      logits = r.logits;
      kv = r.kv;
    }
    for (;;) {
      const next = sampler.next(logits.subarray(logits.length - V));
      out.push(next);
      opts.onToken?.(next);
      if (out.length >= opts.maxTokens || stop.has(next) || kv.length >= this.spec.maxPositions) return out;
      const r = await this.forwardChunk([next], kv);
      logits = r.logits;
      kv = r.kv;
    }
  }

  async close(): Promise<void> {
    this.shadow.close();
    await this.exec.close();
  }
}
