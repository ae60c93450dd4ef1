/**
 * The chunked-prefill driver, written once for every executor (the TS runtime's interpreters,
 * onnxruntime over the cuda chunk graphs, the qnn artifact's graphs): a prompt of P tokens is cut into
 * N = ⌈P/c⌉ chunks of c tokens (the last padded with token 0, its pads after the prompt), and the N·M
 * tasks G(i, j) — subgraph j of chunk i — run in a dispatch order (task t = i·M + j) where a chunk's
 * subgraph may run before an earlier chunk's later ones (mllm-NPU §3.2–3.4). The driver checks the
 * order (each chunk's subgraphs in sequence, every task once, and, given the record's edges, each
 * task after the tasks it depends on) and hands each task to the executor, which runs it on the
 * chunk's own values and appends a qkv subgraph's keys and values to its cache at slots i·c.. .
 * Browser-safe.
 */
import { LlmcError } from '../errors.js';

/** What an executor does per task: subgraph j of chunk i (sync executors return nothing). */
export interface ChunkExecutor<R = void> {
  task(i: number, j: number): R;
}

/** A prompt cut into chunks of c tokens. */
export class ChunkedPrompt {
  /** Chunks: ⌈P / c⌉. */
  readonly N: number;

  constructor(
    readonly ids: ArrayLike<number>,
    readonly c: number,
  ) {
    if (!Number.isInteger(c) || c < 1) throw new LlmcError(`chunk length must be a positive integer, got ${c}`);
    if (ids.length === 0) throw new LlmcError('forward: no input ids');
    this.N = Math.ceil(ids.length / c);
  }

  get P(): number {
    return this.ids.length;
  }

  /** Prompt tokens in chunk i (c, or fewer in the last). */
  real(i: number): number {
    return Math.min(this.c, this.P - i * this.c);
  }

  /** Chunk i's c token ids, padded with 0 past the prompt. */
  chunk(i: number): number[] {
    return Array.from({ length: this.c }, (_, t) => (t < this.real(i) ? this.ids[i * this.c + t] : 0));
  }

  /** Chunk i's positions (pads past the rope table clamp to its last row: their values never matter). */
  positions(i: number, maxPositions: number): number[] {
    return Array.from({ length: this.c }, (_, t) => Math.min(i * this.c + t, maxPositions - 1));
  }
}

/** A dependency of the chunk template (record chunk-schedule/1): subgraph `to` after `from`, of every earlier chunk too when `cross`. */
export interface ChunkEdge {
  from: number;
  to: number;
  cross: boolean;
}

/** How the order's checks name things (qnn: by subgraph ids, in its artifact). */
export interface ChunkOrderCheck {
  edges?: readonly ChunkEdge[];
  ids?: readonly string[];
  where?: string;
}

/** The tasks of `order` as [i, j], checked as they are handed out (see the header). */
export function* chunkTasks(order: ArrayLike<number>, N: number, M: number, check: ChunkOrderCheck = {}): Generator<[number, number]> {
  const { edges, ids, where } = check;
  if (order.length !== N * M) throw new LlmcError(`chunk order has ${order.length} tasks for ${N} chunks of ${M} subgraphs`, where);
  const next = new Int32Array(N); // the next subgraph each chunk runs
  const done = new Uint8Array(N * M);
  for (let n = 0; n < order.length; n++) {
    const i = Math.floor(order[n] / M);
    const j = order[n] % M;
    if (i < 0 || i >= N || !Number.isInteger(order[n])) throw new LlmcError(`chunk order names task ${order[n]}, outside the ${N * M} tasks`, where);
    if (edges && ids) {
      for (const e of edges) {
        if (e.to !== j) continue;
        for (let k = e.cross ? 0 : i; k <= i; k++) if (!done[k * M + e.from]) throw new LlmcError(`the schedule runs ${ids[j]} of chunk ${i} before ${ids[e.from]} of chunk ${k}`, where);
      }
    }
    if (j !== next[i]) throw new LlmcError(`chunk order runs G(${i},${j}) before G(${i},${next[i]})`, where);
    next[i]++;
    done[i * M + j] = 1;
    yield [i, j];
  }
}

/** Run every task of `order` on a synchronous executor. */
export function runChunks(exec: ChunkExecutor, order: ArrayLike<number>, N: number, M: number, check?: ChunkOrderCheck): void {
  for (const [i, j] of chunkTasks(order, N, M, check)) exec.task(i, j);
}

/** Run every task of `order` on an executor whose tasks wait (onnxruntime sessions), one at a time. */
export async function runChunksAsync(exec: ChunkExecutor<void | Promise<void>>, order: ArrayLike<number>, N: number, M: number, check?: ChunkOrderCheck): Promise<void> {
  for (const [i, j] of chunkTasks(order, N, M, check)) await exec.task(i, j);
}
