/**
 * A worker pool for the matmul kernels (optional: `LoadOptions.threads`). The kernels' WebAssembly
 * memory is shared (weights, x and y live in one SharedArrayBuffer); every worker instantiates the
 * same kernel module over it. A kernel call is split by output rows: the calling thread runs rows
 * [0, r1) itself while the workers run the rest, so each row's dot product is the same code on the
 * same bytes as on one thread (bit-identical outputs). Workers wait on a shared control block with
 * Atomics.wait / notify, so a matmul costs two atomic wake-ups, not a postMessage.
 *
 * Browser-safe. The worker's code is a string run by a tiny adapter (`SpawnWorker`): Node's
 * worker_threads (./node.ts, `nodeWorker`) or a browser Web Worker from a Blob URL (`webWorker`),
 * which needs a cross-origin isolated page (SharedArrayBuffer).
 */

/** What a pool needs of a worker: send it the start message, be told it is ready, end it. */
export interface PoolWorker {
  postMessage(msg: unknown): void;
  /** Called once with the worker's first message ('ready') or error. */
  onReady(fn: (err?: Error) => void): void;
  terminate(): void;
}
/** Starts a worker running NODE_WORKER_CODE or WEB_WORKER_CODE (they read one start message). */
export type SpawnWorker = () => PoolWorker;

export interface PoolOptions {
  /** How a worker is started (Node: ./node.ts's nodeWorker; browsers: webWorker). */
  spawn: SpawnWorker;
  /** Calls that read fewer weight bytes × tokens than this run on the calling thread alone. Default 64 KiB. */
  minWork?: number;
}

// The control block (Int32 slots): a generation counter the workers wait on, the workers still busy,
// the kernel's index, a quit flag, then the kernel's arguments.
const SEQ = 0;
const PENDING = 1;
const FN = 2;
const QUIT = 3;
const ARGS = 4;
const MAX_ARGS = 12;
/** Polls of the control block before sleeping: a wake-up from Atomics.wait costs tens of microseconds. */
const SPINS = 20000;

/**
 * The kernels' arguments all start (w, wStride, x, xStride, y, yStride, nRows, ...): rows [r0, r1)
 * are w + r0·wStride and y + 4·r0. Thread k of n takes rows [⌊k·nRows/n⌋, ⌊(k+1)·nRows/n⌋).
 */
const WORKER_BODY = `function serve(init, post) {
  const { module, memory, control, names, index, threads } = init;
  const exp = new WebAssembly.Instance(module, { env: { memory } }).exports;
  const fns = names.map((n) => exp[n]);
  const ctl = new Int32Array(control);
  const a = new Array(${MAX_ARGS}).fill(0);
  let seen = Atomics.load(ctl, ${SEQ});
  post('ready');
  for (;;) {
    for (let i = 0; i < ${SPINS} && Atomics.load(ctl, ${SEQ}) === seen; i++);
    Atomics.wait(ctl, ${SEQ}, seen);
    const s = Atomics.load(ctl, ${SEQ});
    if (s === seen) continue;
    seen = s;
    if (Atomics.load(ctl, ${QUIT})) return;
    for (let i = 0; i < ${MAX_ARGS}; i++) a[i] = ctl[${ARGS} + i];
    const nRows = a[6];
    const r0 = Math.floor((index * nRows) / threads);
    const r1 = Math.floor(((index + 1) * nRows) / threads);
    if (r1 > r0) fns[ctl[${FN}]](a[0] + r0 * a[1], a[1], a[2], a[3], a[4] + 4 * r0, a[5], r1 - r0, a[7], a[8], a[9], a[10], a[11]);
    if (Atomics.sub(ctl, ${PENDING}, 1) === 1) Atomics.notify(ctl, ${PENDING});
  }
}`;

/** A Node worker_threads script (eval'd, CommonJS). */
export const NODE_WORKER_CODE = `const { parentPort } = require('node:worker_threads');
parentPort.once('message', (m) => (${WORKER_BODY})(m, (x) => parentPort.postMessage(x)));`;
/** A Web Worker script. */
export const WEB_WORKER_CODE = `self.onmessage = (e) => { self.onmessage = null; (${WORKER_BODY})(e.data, (x) => self.postMessage(x)); };`;

/** The browser adapter: a Web Worker from a Blob URL (the page must be cross-origin isolated). */
export const webWorker: SpawnWorker = () => {
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
    if (!(memory.buffer instanceof SharedArrayBuffer)) throw new Error('the worker pool needs a shared WebAssembly memory');
    const control = new SharedArrayBuffer((ARGS + MAX_ARGS) * 4);
    const workers: PoolWorker[] = [];
    try {
      const ready: Promise<void>[] = [];
      for (let index = 1; index < threads; index++) {
        const w = opts.spawn();
        workers.push(w);
        ready.push(new Promise<void>((resolve, reject) => w.onReady((err) => (err ? reject(err) : resolve()))));
        w.postMessage({ module, memory, control, names, index, threads });
      }
      await Promise.all(ready);
    } catch (err) {
      for (const w of workers) w.terminate();
      throw err;
    }
    return new MatmulPool(workers, control, names, opts.minWork ?? 64 << 10);
  }

  /** Run kernel `name` (an export of the pool's module, `kernel` here): across the pool when worth it. */
  call(name: string, kernel: Kernel, a: number[]): void {
    const nRows = a[6];
    if (nRows < 2 || a[1] * nRows * a[8] < this.minWork) return kernel(...a);
    this.run(this.index.get(name)!, kernel, a);
  }

  private run(fn: number, kernel: Kernel, a: number[]): void {
    const ctl = this.ctl;
    const n = this.threads;
    ctl[FN] = fn;
    for (let i = 0; i < a.length; i++) ctl[ARGS + i] = a[i];
    Atomics.store(ctl, PENDING, n - 1);
    Atomics.add(ctl, SEQ, 1);
    Atomics.notify(ctl, SEQ);
    const r1 = Math.floor(a[6] / n);
    if (r1 > 0) kernel(a[0], a[1], a[2], a[3], a[4], a[5], r1, ...a.slice(7));
    for (let i = 0; ; i++) {
      const p = Atomics.load(ctl, PENDING);
      if (p === 0) return;
      if (this.canWait && i > SPINS) Atomics.wait(ctl, PENDING, p);
    }
  }

  /** Ends the workers (the pool must not be used after). */
  close(): void {
    Atomics.store(this.ctl, QUIT, 1);
    Atomics.add(this.ctl, SEQ, 1);
    Atomics.notify(this.ctl, SEQ);
    for (const w of this.workers) w.terminate();
    this.workers.length = 0;
  }
}
