/**
 * Chunked prefill on onnxruntime through the chunk graphs (src/exec/onnx/chunks.ts, the cuda
 * target's onnx/chunks/c<c>/): the prompt in chunks of c tokens (the last padded), every chunk's
 * subgraphs run in a given dispatch order by the one chunked-prefill driver (core/chunks/drive.ts). The KV append happens when a chunk's qkv graph returns (its
 * keys and values go to cache slots i·c..), so chunk i's attention graph reads the keys of chunks
 * 0..i−1 as past_key — Eq. 2 of mllm-NPU. Pad tokens follow the prompt (causal masking keeps them
 * out of real rows; positions past the rope table are clamped, their values never matter) and the
 * cache handed on ends at the prompt, so decoding never sees them.
 */
import './ort-env.js'; // before onnxruntime-node loads
import * as ort from 'onnxruntime-node';
import { openArtifactSession } from './session-options.js';
import { LlmcError } from '../../core/errors.js';
import { ChunkedPrompt, runChunksAsync } from '../../core/chunks/drive.js';
import type { SubgraphKind } from '../../core/chunks/partition.js';
import { ATTENTION_IO } from '../onnx/chunks.js';

/** What the driver needs of a subgraph (the record's or the partition's). */
export interface ChunkSubgraphRef {
  id: string;
  kind: SubgraphKind;
  layer: number | null;
  inputs: readonly string[];
  outputs: readonly string[];
}

type CacheArray = Float32Array | Uint16Array;

/** The KV cache a chunked prefill leaves: per layer [Hkv, capacity, hd] of the compute dtype, `length` slots valid. */
export interface ChunkCache {
  dtype: 'float32' | 'float16';
  kvHeads: number;
  headDim: number;
  capacity: number;
  length: number;
  k: CacheArray[];
  v: CacheArray[];
}

/** Slots [0, n) of a [H, capacity, hd] cache buffer as [H, n, hd]. */
export function leadingSlots<T extends CacheArray>(data: T, H: number, capacity: number, n: number, hd: number): T {
  const out = (data instanceof Uint16Array ? new Uint16Array(H * n * hd) : new Float32Array(H * n * hd)) as T;
  for (let h = 0; h < H; h++) out.set(data.subarray(h * capacity * hd, (h * capacity + n) * hd), h * n * hd);
  return out;
}

/** The KV append: chunk i's rows [c, H·hd] into slots [i·c, (i+1)·c) of every head of a [H, capacity, hd] buffer. */
export function appendChunkRows<T extends CacheArray>(dst: T, src: T, i: number, c: number, H: number, hd: number, capacity: number): void {
  for (let t = 0; t < c; t++) for (let h = 0; h < H; h++) dst.set(src.subarray((t * H + h) * hd, (t * H + h + 1) * hd), (h * capacity + i * c + t) * hd);
}

/** Slots [0, n) of a layer's cache as a [1, Hkv, n, hd] tensor. */
export function cacheTensor(c: ChunkCache, data: CacheArray, n: number): ort.Tensor {
  return new ort.Tensor(c.dtype, leadingSlots(data, c.kvHeads, c.capacity, n, c.headDim), [1, c.kvHeads, n, c.headDim]);
}


export class OrtChunkPrefill {
  private constructor(
    readonly c: number,
    readonly subgraphs: readonly ChunkSubgraphRef[],
    /** Static graphs by subgraph id; attention graphs by chunk index. */
    private readonly statics: Map<string, ort.InferenceSession>,
    private readonly attention: ort.InferenceSession[],
    private readonly openAttention: (i: number) => Promise<ort.InferenceSession>,
    /** Attention graphs there are: chunk indices 0..nMax−1. */
    readonly nMax: number,
    private readonly dims: { kvHeads: number; headDim: number; vocab: number; maxPositions: number; dtype: 'float32' | 'float16' },
  ) {
    for (const s of subgraphs) if (s.kind === 'attention') this.kvInputs.set(s.layer!, s.inputs);
  }

  /** Per layer: the attention subgraph's inputs q, k, v (what its qkv subgraph appends to the cache). */
  private readonly kvInputs = new Map<number, readonly string[]>();

  /**
   * Sessions over the chunk graphs: `load(name)` gives a graph's file path or bytes (names as
   * lowerChunkGraphs gives them: embed, l<ℓ>.qkv, l<ℓ>.mlp, head, attention.<i>).
   */
  static async open(
    c: number,
    subgraphs: readonly ChunkSubgraphRef[],
    nMax: number,
    load: (name: string) => Promise<string | Uint8Array>,
    dims: { kvHeads: number; headDim: number; vocab: number; maxPositions: number },
    opts: { threads?: number } = {},
  ): Promise<OrtChunkPrefill> {
    const open = async (name: string) => openArtifactSession(await load(name), opts.threads, `chunk graph ${name}`);
    const statics = new Map<string, ort.InferenceSession>();
    for (const s of subgraphs) if (s.kind !== 'attention' && s.kind !== 'shadow') statics.set(s.id, await open(s.id));
    // Attention graphs open on first use (a prompt of N chunks needs N of them).
    const first = await open('attention.0');
    const meta = first.inputMetadata.find((m) => m.name === ATTENTION_IO.q);
    const dtype = meta?.isTensor && meta.type === 'float16' ? 'float16' : 'float32';
    return new OrtChunkPrefill(c, subgraphs, statics, [first], (i) => open(`attention.${i}`), nMax, { ...dims, dtype });
  }

  private async attentionGraph(i: number): Promise<ort.InferenceSession> {
    while (this.attention.length <= i) this.attention.push(await this.openAttention(this.attention.length));
    return this.attention[i];
  }

  /**
   * The KV cache of the prompt (no pad slot) and the logits asked for: of every prompt position [P, V]
   * ('all'), or of the last one [V] ('last': the head runs on the last chunk only, as decoding needs).
   */
  async prefill(ids: readonly number[], order: ArrayLike<number>, onTask?: (i: number, j: number, ms: number) => void, want: 'all' | 'last' = 'all'): Promise<{ logits: Float32Array; cache: ChunkCache }> {
    const { c, subgraphs } = this;
    const { kvHeads: H, headDim: hd, vocab: V, dtype } = this.dims;
    const prompt = new ChunkedPrompt(ids, c);
    const { P, N } = prompt;
    const M = subgraphs.length;
    if (N > this.nMax) throw new LlmcError(`a prompt of ${P} tokens needs ${N} chunks of ${c}; the artifact has attention graphs for ${this.nMax} (up to ${this.nMax * c} tokens)`);
    const layers = Math.max(...subgraphs.map((s) => (s.layer ?? -1) + 1));
    const capacity = N * c;
    const make = () => (dtype === 'float16' ? new Uint16Array(H * capacity * hd) : new Float32Array(H * capacity * hd));
    const cache: ChunkCache = { dtype, kvHeads: H, headDim: hd, capacity, length: P, k: Array.from({ length: layers }, make), v: Array.from({ length: layers }, make) };
    const values: Map<string, ort.Tensor>[] = Array.from({ length: N }, () => new Map());
    const logits = new Float32Array(P * V);
    const task = async (i: number, j: number) => {
      // A chunk whose logits nobody asked for skips the head (nothing reads it).
      if (want === 'last' && subgraphs[j].kind === 'head' && i !== N - 1) return;
      const t0 = onTask ? performance.now() : 0;
      await this.runTask(subgraphs[j], i, values[i], cache, prompt, logits);
      onTask?.(i, j, performance.now() - t0);
    };
    await runChunksAsync({ task }, order, N, M);
    return { logits: want === 'last' ? logits.slice((P - 1) * V) : logits, cache };
  }

  /** G(i, j): subgraph `s` of chunk i, its inputs from the chunk's values, its outputs into them (and the cache, the logits). */
  private async runTask(s: ChunkSubgraphRef, i: number, mine: Map<string, ort.Tensor>, cache: ChunkCache, prompt: ChunkedPrompt, logits: Float32Array): Promise<void> {
    const { c } = this;
    const { kvHeads: H, headDim: hd, vocab: V, maxPositions } = this.dims;
    const capacity = cache.capacity;
    const real = (k: number) => prompt.real(k);
    const big = (xs: number[]) => new ort.Tensor('int64', BigInt64Array.from(xs, (x) => BigInt(x)), [1, xs.length]);
    if (s.kind === 'shadow') return;
    const feeds: Record<string, ort.Tensor> = {};
    for (const v of s.inputs) feeds[v] = mine.get(v)!;
    if (s.kind === 'attention') {
      const [q, k, v] = s.inputs;
      const out = await (await this.attentionGraph(i)).run(
        { [ATTENTION_IO.q]: mine.get(q)!, [ATTENTION_IO.k]: mine.get(k)!, [ATTENTION_IO.v]: mine.get(v)!, past_key: cacheTensor(cache, cache.k[s.layer!], i * c), past_value: cacheTensor(cache, cache.v[s.layer!], i * c) },
        [ATTENTION_IO.out],
      );
      mine.set(s.outputs[0], out[ATTENTION_IO.out]);
      return;
    }
    if (s.kind === 'embed') feeds.input_ids = big(prompt.chunk(i));
    if (s.kind === 'qkv') feeds.position_ids = big(prompt.positions(i, maxPositions));
    const out = await this.statics.get(s.id)!.run(feeds);
    for (const v of s.outputs) mine.set(v, out[v]);
    if (s.kind === 'qkv') {
      // The KV append: the chunk's roped keys and values [1, c, Hkv·hd] into slots i·c.. of every head.
      const [, k, v] = this.kvInputs.get(s.layer!)!;
      appendChunkRows(cache.k[s.layer!], out[k].data as CacheArray, i, c, H, hd, capacity);
      appendChunkRows(cache.v[s.layer!], out[v].data as CacheArray, i, c, H, hd, capacity);
    }
    if (s.kind === 'head') logits.set((out.logits.data as Float32Array).subarray(0, real(i) * V), i * c * V);
  }

  async close(): Promise<void> {
    for (const s of [...this.statics.values(), ...this.attention]) await s.release();
  }
}
