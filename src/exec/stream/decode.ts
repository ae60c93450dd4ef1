/**
 * Token-by-token generation layer-streamed: the model's pieces (./segments.ts) as onnxruntime
 * sessions whose weights are graph inputs, so a piece's session is built once per decoder (small:
 * no initializers) and each run is fed the piece's weights. The weights are read from the checkpoint
 * (float32, in the checkpoint's own layout: ./stored-layout.ts) and kept between steps when the whole model fits
 * `weightBytes`; a larger model's pieces are read again at each step (into reused buffers), the next
 * piece's while the current one runs. Every prompt of a batch advances together (one step: every piece once over all rows), each
 * layer's KV cache kept per session. So a step costs one weight sweep for the whole batch, and a
 * model whose float32 weights fit the budget is read once: a generation of G tokens costs one forward
 * plus G one-token steps, never G session builds per piece.
 *
 * The same lowering and kernels as the whole-model Engine, the weights fed rather than stored: the
 * same greedy ids as its session steps (test/tree-search-stream.test.ts, test/stream-generate.test.ts).
 */
import '../engine/ort-env.js'; // before onnxruntime-node loads
import * as ort from 'onnxruntime-node';
import { expectedTensors } from '../../core/arch/names.js';
import type { ModelSource } from '../../core/checkpoint/source.js';
import { LlmcError, UsageError } from '../../core/errors.js';
import { buildModel, IO } from '../../core/ir/build.js';
import type { ModelGraph, V } from '../../core/ir/ir.js';
import { lowerToOnnx } from '../onnx/lower.js';
import { isGather } from './engine.js';
import { float32Bytes } from './size.js';
import { streamSegments, type Segment } from '../../core/ir/segments.js';
import { pieceSessionOptions, type Device } from './device.js';
import { pieceFeeds } from './feeds.js';
import { storedLayoutPiece, WeightReader, type FedWeight } from './stored-layout.js';

/** A model whose float32 weights are at most this is kept in memory between steps by default; a larger one is read again each step. */
export const DECODE_WEIGHT_BYTES = 2 ** 30;

export interface DecodeOptions {
  /** onnxruntime intra-op threads (default: onnxruntime's choice). */
  threads?: number;
  /** The IR to run (default: the one built from the source's spec). */
  graph?: ModelGraph;
  device?: Device;
  /** Keep the weights between steps when the model's float32 size is at most this (default DECODE_WEIGHT_BYTES). */
  weightBytes?: number;
}

/** One piece ready to run: its session (weights as inputs) and what it is fed. */
interface Piece {
  seg: Segment;
  session: ort.InferenceSession | null;
  /** Fed as the checkpoint stores them (./stored-layout.ts). */
  weights: FedWeight[];
  /** Its present K/V outputs, and the past inputs they become. */
  present: { out: string; past: string }[];
  /** Float32 bytes of its weights. */
  bytes: number;
}

type PieceWeights = Map<string, ort.Tensor>;

export class StreamDecoder {
  readonly graph: ModelGraph;
  readonly segments: Segment[];
  /** Per piece: building its session (once) and each run (weights fed). */
  readonly timings: { id: string; openMs: number; runMs: number; loadMs: number }[] = [];
  /** Bytes of weights read from the checkpoint so far (a model within the budget: its float32 size once). */
  weightBytesRead = 0;
  /** The largest KV cache any of its sessions held, in bytes. */
  kvBytes = 0;
  private pieces: Promise<Piece>[] = [];
  private kept = new Map<number, PieceWeights>();
  private readonly reader: WeightReader;
  /**
   * Above the budget, the float32 buffers pieces' weights are read into (a step allocates no
   * weights). A layer's by its parity and weight: layer s+1 is read while s runs, so s+2 reuses s's.
   * The embedding's and the head's by shape only: the table read for one step's embedding is done
   * with before the head's is read, so an untied model holds one [vocab, hidden] buffer, not two.
   */
  private readonly reused = new Map<string, Float32Array>();
  /** The whole model's float32 weights fit the budget: every piece is read once. */
  private readonly keepAll: boolean;
  /** Values a piece after `s` reads. */
  private readonly later: Set<V>[];

  get spec(): ModelGraph['spec'] {
    return this.graph.spec;
  }

  constructor(
    readonly source: ModelSource,
    private readonly opts: DecodeOptions = {},
  ) {
    this.graph = opts.graph ?? buildModel(source.spec);
    const withKv = streamSegments(this.graph).map((seg) => {
      const present = seg.graph.ops.flatMap((op) => (op.op === 'attention' ? [op.presentK, op.presentV] : []));
      return { ...seg, graph: { ...seg.graph, outputs: [...seg.graph.outputs, ...present] } };
    });
    this.segments = withKv;
    this.later = withKv.map((_, s) => new Set(withKv.slice(s + 1).flatMap((g) => g.carriedIn)));
    // all or nothing: keeping part of a model that does not fit saves that part's reads only (4 of
    // TinyLlama's 22 layers for 1 GiB) at the full memory cost, so a larger model keeps none
    this.keepAll = float32Bytes(source.spec) <= (opts.weightBytes ?? DECODE_WEIGHT_BYTES);
    this.reader = new WeightReader(source);
  }

  /** A generation session: `batch` rows advance together, each layer's KV cache its own. */
  session(batch: number): StreamDecodeSession {
    return new StreamDecodeSession(this, batch);
  }

  /** Release every piece's session and the weights kept. */
  async close(): Promise<void> {
    const pieces = this.pieces;
    this.pieces = [];
    this.kept.clear();
    this.reused.clear();
    for (const p of pieces) await (await p).session?.release();
  }

  /** Piece `s`, its session built on first use. */
  piece(s: number): Promise<Piece> {
    return (this.pieces[s] ??= this.openPiece(s));
  }

  private async openPiece(s: number): Promise<Piece> {
    const seg = this.segments[s];
    const t0 = performance.now();
    const present = seg.graph.ops.flatMap((op) => (op.op === 'attention' ? [op.presentK, op.presentV] : [])).map((out) => ({ out, past: out.replace(/^present_/, 'past_') }));
    if (isGather(seg)) {
      const bytes = seg.graph.ops.reduce((a, op) => a + (op.op === 'embed' ? this.spec.vocabSize * this.spec.hiddenSize * 4 : 0), 0);
      return { seg, session: null, weights: [], present, bytes };
    }
    const lowered = await lowerToOnnx(this.source, { graph: seg.graph, weightInputs: new Set(expectedTensors(this.source.spec).map((t) => t.name)) });
    const stored = storedLayoutPiece(lowered.bytes, lowered.weightInputs);
    const options = pieceSessionOptions(this.opts.threads, this.opts.device);
    const session = await ort.InferenceSession.create(stored.bytes, options);
    const bytes = stored.weights.reduce((a, w) => a + w.dims.reduce((x, d) => x * d, 4), 0);
    this.timings.push({ id: seg.id, openMs: performance.now() - t0, runMs: 0, loadMs: 0 });
    return { seg, session, weights: stored.weights, present, bytes };
  }

  /** Piece `s`'s weights: kept ones, or read now (and kept when the whole model fits the budget). */
  async weights(s: number): Promise<PieceWeights> {
    const kept = this.kept.get(s);
    if (kept) return kept;
    const p = await this.piece(s);
    const out: PieceWeights = new Map();
    const fed = p.session ? p.weights : p.seg.graph.ops.flatMap((op) => (op.op === 'embed' ? [{ input: op.table, source: op.table, dims: [this.spec.vocabSize, this.spec.hiddenSize] }] : []));
    const reused = this.keepAll ? null : this.reused;
    const layer = p.seg.layer >= 0 && p.seg.layer < this.spec.numLayers;
    const taken = new Set<string>();
    for (const w of fed) {
      let key = layer ? `${s & 1}|${w.input.replace(/\.\d+\./, '.')}|${w.dims}` : `ends|${w.dims}`;
      while (taken.has(key)) key += '+'; // two weights of one piece never share a buffer
      taken.add(key);
      const n = w.dims.reduce((a, d) => a * d, 1);
      let into = reused?.get(key);
      if (reused && into?.length !== n) reused.set(key, (into = new Float32Array(n)));
      out.set(w.input, new ort.Tensor('float32', await this.reader.read(w, into), w.dims));
    }
    this.weightBytesRead += p.bytes;
    if (this.keepAll) {
      this.kept.set(s, out);
    }
    return out;
  }

  /** Values after piece `s` that a later piece still reads. */
  carryOn(s: number, carried: Map<V, Float32Array>): Map<V, Float32Array> {
    return new Map([...carried].filter(([v]) => this.later[s].has(v)));
  }
}

/** One batch's generation state: every layer's KV cache and the positions done. */
export class StreamDecodeSession {
  private readonly kv = new Map<string, ort.Tensor>();
  private pos = 0;

  constructor(
    private readonly decoder: StreamDecoder,
    readonly batch: number,
  ) {}

  get length(): number {
    return this.pos;
  }

  /** Feed B rows of equal length; each row's logits at its last position. */
  async step(rows: number[][]): Promise<Float32Array[]> {
    const d = this.decoder;
    const spec = d.spec;
    if (rows.length !== this.batch) throw new UsageError(`this session advances ${this.batch} rows at a time, got ${rows.length}`);
    const T = rows[0]?.length ?? 0;
    if (T === 0 || rows.some((r) => r.length !== T)) throw new UsageError('a generation step needs non-empty rows of equal length');
    for (const r of rows) for (const id of r) if (!Number.isInteger(id) || id < 0 || id >= spec.vocabSize) throw new UsageError(`token id ${id} is outside the vocabulary [0, ${spec.vocabSize})`);
    const B = rows.length;
    const P = this.pos;
    const last = d.segments.length - 1;
    let carried = new Map<V, Float32Array>();
    let logits: Float32Array | null = null;
    let next = d.weights(0);
    for (let s = 0; s <= last; s++) {
      const t0 = performance.now();
      const weights = await next;
      const t1 = performance.now();
      // the next piece's weights are read while this one runs
      if (s < last) {
        next = d.weights(s + 1);
        next.catch(() => {}); // awaited at the next piece; a failure here must not go unhandled meanwhile
      }
      const p = await d.piece(s);
      if (!p.session) {
        for (const op of p.seg.graph.ops) {
          if (op.op !== 'embed') continue;
          const table = weights.get(op.table)!.data as Float32Array;
          const D = spec.hiddenSize;
          const out = new Float32Array(B * T * D);
          rows.flat().forEach((id, r) => out.set(table.subarray(id * D, (id + 1) * D), r * D));
          carried.set(op.out, out);
        }
      } else {
        const feeds = pieceFeeds(p.seg, rows, carried, [T - 1], this.kv, P);
        for (const [name, t] of weights) feeds[name] = t;
        const outputs = await p.session.run(feeds);
        if (s === last) logits = outputs[IO.logits].data as Float32Array;
        for (const v of p.seg.carriedOut) carried.set(v, outputs[v].data as Float32Array);
        for (const k of p.present) this.kv.set(k.past, outputs[k.out]);
      }
      carried = d.carryOn(s, carried);
      d.timings.push({ id: p.seg.id, openMs: 0, runMs: performance.now() - t1, loadMs: t1 - t0 });
    }
    this.pos += T;
    d.kvBytes = Math.max(d.kvBytes, [...this.kv.values()].reduce((a, t) => a + (t.data as Float32Array).byteLength, 0));
    if (!logits) throw new LlmcError('internal: the streamed head gave no logits');
    const V = spec.vocabSize;
    return rows.map((_, b) => logits!.slice(b * V, (b + 1) * V));
  }
}
