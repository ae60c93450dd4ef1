/**
 * A worker pool for the matmul kernels (optional: `LoadOptions.threads`). The kernels' WebAssembly
 * memory is shared (weights, x and y live in one SharedArrayBuffer); every worker instantiates the
 * same kernel module over it. A kernel call is split by output rows, and each row's dot product is
 * the same code on the same bytes as on one thread (bit-identical outputs). Workers wait on a shared control block with
 * Atomics.wait / notify (after a short spin), so a matmul costs an atomic wake-up, not a postMessage;
 * its rows are cut into chunks that free threads claim, the calling thread included.
 *
 * Browser-safe. The worker's code is a string run by a tiny adapter (`SpawnWorker`): Node's
 * worker_threads (./node.ts, `nodeWorker`) or a browser Web Worker from a Blob URL (`webWorker`),
 * which needs a cross-origin isolated page (SharedArrayBuffer).
 */

import { LlmcError } from '../../core/errors.js';

/** What a pool needs of a worker: send it the start message, be told it is ready, end it. */
export interface PoolWorker {
  postMessage(msg: unknown): void;
  /** Called once with the worker's first message ('ready') or error. */
  onReady(fn: (err?: Error) => void): void;
  terminate(): void;
}
/** Starts a worker running WORKER_BODY on its first message (node.ts's nodeWorker, webWorker). */
export type SpawnWorker = () => PoolWorker;

/**
 * 160 KiB: on llama-100M every projection (k/v in Q8_0: 209 kB) splits; stories260K's largest matmul
 * (its 131 kB lm_head) does not — splitting it cost more than it saved (Chromium: 3,007 tokens/s with 2
 * threads vs 7,173 with one).
 */
export const DEFAULT_MIN_WORK = 160 << 10;

export interface PoolOptions {
  /** How a worker is started (Node: ./node.ts's nodeWorker; browsers: webWorker). */
  spawn: SpawnWorker;
  /** Calls that read fewer weight bytes × tokens than this run on the calling thread alone. Default DEFAULT_MIN_WORK. */
  minWork?: number;
}

// The control block (Int32 slots). SEQ: the current job's generation (16 bits), which sleeping workers
// wait on. NEXT: generation << 12 | the next unclaimed chunk. DONE: chunks finished. Then the kernel's
// index, the job's chunk count, a quit flag and the kernel's arguments; after the workers' chunk count,
// the number of matrices in the job and (w, y, nRows) of each after the first (MatmulPool.callGroup).
const SEQ = 0;
const NEXT = 1;
const DONE = 2;
const FN = 3;
const CHUNKS = 4;
const QUIT = 5;
const ARGS = 6;
const MAX_ARGS = 12;
/** Chunks the workers ran (for tests and benches: the pool really shares the work). */
const WORKER_CHUNKS = ARGS + MAX_ARGS;
const MATRICES = WORKER_CHUNKS + 1;
const MORE = MATRICES + 1;
/** Matrices one job may cover (q, k, v). */
export const MAX_GROUP = 3;
/** Chunks of rows per thread: whoever is free claims the next, so a thread the OS deschedules (a loaded machine) holds up little. */
const CHUNKS_PER_THREAD = 4;
/**
 * Large calls get up to this many chunks per thread, on average still reading ≥ CHUNK_MIN_WORK weight
 * bytes (×tokens): a call ends when its last chunk does — 4 chunks per thread of llama-100M's F32 gate
 * (6.3 MB) are ~40 µs each, 16 are ~10 µs (and runChunks makes the last ones smaller); a claim (one
 * compare-and-swap on a shared line) costs well under 1 µs, so 128 KiB chunks keep it under ~3%.
 */
const CHUNKS_PER_THREAD_MAX = 16;
const CHUNK_MIN_WORK = 128 << 10;
/** Polls of the control block before sleeping: a wake-up from Atomics.wait costs tens of microseconds. */
const SPINS = 20000;

/**
 * Claim chunks of job `gen` (compare-and-swap on NEXT) and run them until none is left; every thread
 * of the pool runs this, so no thread waits for a worker that has not woken up. A job covers one to
 * MAX_GROUP matrices of the same shape of row and the same x (q, k, v): their rows in a row, R in all.
 * Chunk c of n starts at row R − ⌊R·(n−c)²/n²⌋, cut where a matrix ends: sizes fall linearly from
 * 2R/n to R/n², so whoever takes the last chunk holds the others up for a sliver of the call, not half
 * an average chunk. The kernels' arguments all start (w, wStride, x, xStride, y, yStride, nRows, ...),
 * so rows r0.. of a matrix are w + r0·wStride and y + 4·r0. The job is read before a claim:
 * a claim only succeeds while NEXT still holds `gen` with chunks left, and the caller closes NEXT
 * before it writes the next job, so a successful claim always ran on its own job's arguments.
 * Embedded in the workers' code by its source text: it references nothing outside itself (slot
 * numbers are the constants above).
 */
function runChunks(ctl: Int32Array, kernel: (i: number) => (...a: number[]) => void, gen: number, worker: boolean): void {
  const g = (gen & 0xffff) << 12;
  const fn = kernel(Atomics.load(ctl, 3));
  const n = Atomics.load(ctl, 4);
  const a: number[] = [];
  for (let i = 0; i < 12; i++) a.push(Atomics.load(ctl, 6 + i));
  const w = [a[0]];
  const y = [a[4]];
  const rows = [a[6]];
  for (let m = 1, k = Atomics.load(ctl, 19); m < k; m++) {
    w.push(Atomics.load(ctl, 17 + 3 * m));
    y.push(Atomics.load(ctl, 18 + 3 * m));
    rows.push(Atomics.load(ctl, 19 + 3 * m));
  }
  let total = 0;
  for (const r of rows) total += r;
  for (;;) {
    const cur = Atomics.load(ctl, 1);
    if (cur - (cur & 0xfff) !== g || (cur & 0xfff) >= n) return;
    if (Atomics.compareExchange(ctl, 1, cur, cur + 1) !== cur) continue;
    const c = cur & 0xfff;
    const r0 = total - Math.floor(((n - c) * (n - c) * total) / (n * n));
    const r1 = total - Math.floor(((n - c - 1) * (n - c - 1) * total) / (n * n));
    for (let m = 0, s = 0; m < rows.length && s < r1; s += rows[m++]) {
      const lo = Math.max(r0, s) - s;
      const hi = Math.min(r1, s + rows[m]) - s;
      if (hi > lo) fn(w[m] + lo * a[1], a[1], a[2], a[3], y[m] + 4 * lo, a[5], hi - lo, a[7], a[8], a[9], a[10], a[11]);
    }
    if (worker) Atomics.add(ctl, 18, 1);
    if (Atomics.add(ctl, 2, 1) + 1 === n) Atomics.notify(ctl, 2);
  }
}

/** The workers' code: `serve(startMessage, post)`; an adapter calls it with the first message it gets. */
export const WORKER_BODY = `function serve(init, post) {
  const runChunks = ${runChunks.toString()};
  const { module, memory, control, names } = init;
  const exp = new WebAssembly.Instance(module, { env: { memory } }).exports;
  const fns = names.map((n) => exp[n]);
  const kernel = (i) => fns[i];
  const ctl = new Int32Array(control);
  let seen = Atomics.load(ctl, ${SEQ});
  post('ready');
  for (;;) {
    for (let i = 0; i < ${SPINS} && Atomics.load(ctl, ${SEQ}) === seen; i++);
    Atomics.wait(ctl, ${SEQ}, seen);
    const s = Atomics.load(ctl, ${SEQ});
    if (s === seen) continue;
    seen = s;
    if (Atomics.load(ctl, ${QUIT})) return;
    runChunks(ctl, kernel, s, true);
  }
}`;

/** A Web Worker script. */
export const WEB_WORKER_CODE = `self.onmessage = (e) => { self.onmessage = null; (${WORKER_BODY})(e.data, (x) => self.postMessage(x)); };`;

/** The browser adapter: a Web Worker from a Blob URL (the page must be cross-origin isolated). */
export const webWorker: SpawnWorker = () => {
  if (typeof Worker === 'undefined') throw new LlmcError('no Web Workers here for the worker pool; in Node, load with pool: { spawn: nodeWorker } (src/exec/runtime/node.ts) or use loadDir');
  const url = URL.createObjectURL(new Blob([WEB_WORKER_CODE], { type: 'text/javascript' }));
  const w = new Worker(url);
  URL.revokeObjectURL(url);
  return {
    postMessage: (m) => w.postMessage(m),
    onReady: (fn) => {
      w.onmessage = () => fn();
      w.onerror = (e) => fn(new Error(e.message || 'worker failed to start'));
    },
    terminate: () => w.terminate(),
  };
};

type Kernel = (...args: number[]) => void;
const NO_MORE: readonly (readonly [number, number, number])[] = [];

/** A callGroup job on the calling thread: the first matrix's call `a`, then each of `more`'s (w, y, nRows) with a's other arguments. */
export function runEach(kernel: Kernel, a: number[], more: readonly (readonly [number, number, number])[]): void {
  kernel(...a);
  for (const [w, y, rows] of more) kernel(w, a[1], a[2], a[3], y, a[5], rows, a[7], a[8], a[9], a[10], a[11]);
}

export class MatmulPool {
  private readonly ctl: Int32Array;
  private readonly minWork: number;
  private readonly index: Map<string, number>;
  /** Atomics.wait is refused on a browser's main thread: spin there instead. */
  private readonly canWait: boolean;

  private constructor(
    private readonly workers: PoolWorker[],
    control: SharedArrayBuffer,
    names: readonly string[],
    minWork: number,
  ) {
    this.ctl = new Int32Array(control);
    this.index = new Map(names.map((n, i) => [n, i]));
    this.minWork = minWork;
    let canWait = true;
    try {
      Atomics.wait(this.ctl, QUIT, 1, 0); // QUIT is 0: returns at once where waiting is allowed
    } catch {
      canWait = false;
    }
    this.canWait = canWait;
  }

  /** Threads in all, the calling one included. */
  get threads(): number {
    return this.workers.length + 1;
  }

  /**
   * Starts `threads − 1` workers over `memory` (shared) running `module`'s exports `names`. Resolves
   * once every worker waits for work.
   */
  static async start(module: WebAssembly.Module, memory: WebAssembly.Memory, names: readonly string[], threads: number, opts: PoolOptions): Promise<MatmulPool> {
    if (!(memory.buffer instanceof SharedArrayBuffer)) throw new LlmcError('the worker pool needs a shared WebAssembly memory');
    const control = new SharedArrayBuffer((MORE + 3 * (MAX_GROUP - 1)) * 4);
    const workers: PoolWorker[] = [];
    try {
      const ready: Promise<void>[] = [];
      for (let index = 1; index < threads; index++) {
        const w = opts.spawn();
        workers.push(w);
        ready.push(new Promise<void>((resolve, reject) => w.onReady((err) => (err ? reject(err) : resolve()))));
        w.postMessage({ module, memory, control, names });
      }
      await Promise.all(ready);
    } catch (err) {
      for (const w of workers) w.terminate();
      throw err;
    }
    return new MatmulPool(workers, control, names, opts.minWork ?? DEFAULT_MIN_WORK);
  }

  /** Run kernel `name` (an export of the pool's module, `kernel` here): across the pool when worth it. */
  call(name: string, kernel: Kernel, a: number[]): void {
    this.callGroup(name, kernel, a, NO_MORE);
  }

  /**
   * `call` over more matrices at once (up to MAX_GROUP in all): `a` is the first's arguments, `more`
   * each other's (w, y, nRows), the other arguments shared (the same x, row bytes, y stride). One
   * wake-up and one chunk queue cover them all.
   */
  callGroup(name: string, kernel: Kernel, a: number[], more: readonly (readonly [number, number, number])[]): void {
    if (more.length >= MAX_GROUP) throw new LlmcError(`internal: a pool job covers at most ${MAX_GROUP} matrices`);
    let nRows = a[6];
    for (const m of more) nRows += m[2];
    const work = a[1] * nRows * a[8];
    if (nRows < 2 || work < this.minWork) return runEach(kernel, a, more);
    const t = this.threads;
    this.run(this.index.get(name)!, kernel, a, more, Math.min(nRows, Math.max(CHUNKS_PER_THREAD * t, Math.min(CHUNKS_PER_THREAD_MAX * t, Math.floor(work / CHUNK_MIN_WORK)))));
  }

  private gen = 0;
  private calls = 0;

  /** Kernel calls split so far, and the chunks of them the workers ran. */
  stats(): { splitCalls: number; workerChunks: number } {
    return { splitCalls: this.calls, workerChunks: Atomics.load(this.ctl, WORKER_CHUNKS) };
  }

  private run(fn: number, kernel: Kernel, a: number[], more: readonly (readonly [number, number, number])[], n: number): void {
    const ctl = this.ctl;
    const gen = (this.gen = (this.gen + 1) & 0xffff);
    Atomics.store(ctl, NEXT, (gen << 12) | 0xfff); // closed while the job is written
    Atomics.store(ctl, FN, fn);
    Atomics.store(ctl, CHUNKS, n);
    for (let i = 0; i < MAX_ARGS; i++) Atomics.store(ctl, ARGS + i, a[i] ?? 0);
    Atomics.store(ctl, MATRICES, more.length + 1);
    for (let i = 0; i < more.length; i++) for (let k = 0; k < 3; k++) Atomics.store(ctl, MORE + 3 * i + k, more[i][k]);
    Atomics.store(ctl, DONE, 0);
    Atomics.store(ctl, NEXT, gen << 12);
    Atomics.store(ctl, SEQ, gen);
    Atomics.notify(ctl, SEQ);
    this.calls++;
    runChunks(ctl, () => kernel, gen, false);
    for (let i = 0; ; i++) {
      const done = Atomics.load(ctl, DONE);
      if (done === n) return;
      if (this.canWait && i > SPINS) Atomics.wait(ctl, DONE, done);
    }
  }

  /** Ends the workers (the pool must not be used after). */
  close(): void {
    Atomics.store(this.ctl, QUIT, 1);
    Atomics.store(this.ctl, SEQ, 0x10000); // no generation: every worker wakes and quits
    Atomics.notify(this.ctl, SEQ);
    for (const w of this.workers) w.terminate();
    this.workers.length = 0;
  }
}
