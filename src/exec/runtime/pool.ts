/**
 * A worker pool for the matmul kernels (optional: `LoadOptions.threads`). The kernels' WebAssembly
 * memory is shared (weights, x and y live in one SharedArrayBuffer); every worker instantiates the
 * same kernel module over it. A kernel call is split by output rows, and each row's dot product is
 * the same code on the same bytes as on one thread (bit-identical outputs). Workers wait on a shared control block with
 * Atomics.wait / notify (after a short spin), so a matmul costs an atomic wake-up, not a postMessage.
 * Each thread (the calling one included) owns a contiguous share of a call's rows, its lane, cut into
 * chunks it claims in order; a thread done with its lane claims the next chunks of the others', so a
 * worker the OS has not scheduled yet holds nothing up. A job may first prepare x (Prep: quantize it,
 * after silu·mul for the MLP's down projection or RMSNorm's scaling for q·k·v and gate·up) in pieces the threads claim the same way, all of them
 * done before any row: the calling thread does not do it alone while the workers wait.
 *
 * Browser-safe. The worker's code is a string run by a tiny adapter (`SpawnWorker`): Node's
 * worker_threads (./node.ts, `nodeWorker`) or a browser Web Worker from a Blob URL (`webWorker`),
 * which needs a cross-origin isolated page (SharedArrayBuffer).
 */

import { LlmcError } from '../../core/errors.js';
import { attendGroups } from './attend-groups.js';

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

// The control block (Int32 slots), laid out by 64-byte cache lines (LINE slots) so that what one
// thread writes often does not evict what another polls: a worker spinning on SEQ would otherwise
// pull the line back after each of the caller's ~30 stores of a job (an empty job cost ~3.5 µs).
// Line 0: SEQ, the current job's generation (16 bits), which the workers poll and sleep on; QUIT.
// Line 1: the job: TARGET (its chunks in all), the kernel's index FN, the chunks per lane, the kernel's
// arguments, the number of matrices; line 2: (w, y, nRows) of each matrix after the first
// (MatmulPool.callGroup), then the prep phase (Prep: pieces, pre and quantizer fn, x, u, q, values and
// q bytes per block, blocks), then UNIT (rows per unit of the job's row count: a tiled kernel's
// cuts fall between its tiles). The job's slots are written plainly and published by SEQ's store.
// Then on lines of their own: DONE (chunks finished), the workers' chunk count, the prep phase's next
// piece (generation << 12 | piece) and pieces done, the epilogue (Post: fn, r, tokens, matrices;
// written with the job), then one line per lane (thread): generation << 12 | the lane's next unclaimed
// chunk; then the mail flag and its acks (MatmulPool.attach).
// runChunks spells these as numbers (it is embedded by its source text); checked below.
const LINE = 16;
const SEQ = 0;
const QUIT = 1;
const TARGET = 16;
const FN = 17;
const CHUNKS = 18;
const ARGS = 19;
const MAX_ARGS = 12;
const MATRICES = ARGS + MAX_ARGS;
const MORE = 32;
/** Matrices one job may cover (q, k, v). */
export const MAX_GROUP = 3;
const PREP = MORE + 3 * (MAX_GROUP - 1);
const UNIT = 47;
const DONE = 48;
/** Chunks the workers ran (for tests and benches: the pool really shares the work). */
const WORKER_CHUNKS = 64;
const PREP_NEXT = 80;
const PREP_DONE = 96;
const POST = 112;
const LANES = 128;
if (MATRICES !== 31 || PREP !== 38 || PREP + 9 !== UNIT || POST !== 112 || LANES !== 128) throw new Error('internal: the pool control block layout');
/** Pieces of x a prep phase is cut into per thread: each a claim and a count, small beside a block's quantization. */
const PREP_PIECES_PER_THREAD = 2;
/** Chunks of rows per lane: a thread done with its own lane claims the others' next ones, so a thread the OS deschedules (a loaded machine) holds up little. */
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
 * Claim chunks of job `gen` (compare-and-swap on a lane's slot) and run them until none is left; every
 * thread of the pool runs this, so no thread waits for a worker that has not woken up. A job covers one
 * to MAX_GROUP matrices of the same shape of row and the same x (q, k, v): their rows in a row, R in
 * all. Lane j of t holds rows ⌊jR/t⌋.. ⌊(j+1)R/t⌋ (Rj of them): thread `lane` streams its own lane
 * from start to end, as one thread would (a shared queue of chunks taken in turns ran 1.67× one thread
 * where contiguous halves ran 1.82× in C, bench/c/membw.c: each thread's reads jump), then helps the
 * next lanes. Chunk c of a lane's n = min(Rj, chunks per lane) starts at row Rj − ⌊Rj·(n−c)²/n²⌋, cut
 * where a matrix ends: sizes fall linearly from 2Rj/n to Rj/n², so whoever takes a lane's last chunk
 * holds the others up for a sliver of the call. A job's epilogue (Post, slots 112..115) runs on each
 * piece of rows of its first matrices right after the kernel, by the same thread: post(y rows, r rows,
 * bytes) per token, r laid out as y (the residual add of o_proj and down_proj; RoPE on q and k). The
 * kernels' arguments all start (w, wStride, x, xStride, y, yStride, nRows, ...), so rows r0.. of a matrix are w + r0·wStride and y + 4·r0. The job
 * is read before a claim: a claim only succeeds while the lane's slot still holds `gen` with chunks
 * left, and the caller closes every lane before it writes the next job, so a successful claim always
 * ran on its own job's arguments. Embedded in the workers' code by its source text: it references
 * nothing outside itself (slot numbers are the constants above).
 */
function runChunks(ctl: Int32Array, kernel: (i: number) => (...a: number[]) => void, gen: number, lane: number, lanes: number): void {
  const g = (gen & 0xffff) << 12;
  const fn = kernel(Atomics.load(ctl, 17));
  const m = Atomics.load(ctl, 18);
  const target = Atomics.load(ctl, 16);
  const a: number[] = [];
  for (let i = 0; i < 12; i++) a.push(Atomics.load(ctl, 19 + i));
  const w = [a[0]];
  const y = [a[4]];
  const rows = [a[6]];
  for (let m = 1, k = Atomics.load(ctl, 31); m < k; m++) {
    w.push(Atomics.load(ctl, 29 + 3 * m));
    y.push(Atomics.load(ctl, 30 + 3 * m));
    rows.push(Atomics.load(ctl, 31 + 3 * m));
  }
  let total = 0;
  for (const r of rows) total += r;
  const unit = Atomics.load(ctl, 47);
  const post = Atomics.load(ctl, 112);
  const postFn = post >= 0 ? kernel(post) : null;
  const rBase = Atomics.load(ctl, 113) - a[4];
  const postTokens = Atomics.load(ctl, 114);
  const postMatrices = Atomics.load(ctl, 115);
  // The prep phase (MatmulPool's Prep, slots 38..46; next piece 80, pieces done 96): pieces of x's
  // blocks claimed in turns, then every thread waits for all of them before it claims rows.
  const pieces = Atomics.load(ctl, 38);
  if (pieces > 0) {
    const pre = Atomics.load(ctl, 39);
    const quant = Atomics.load(ctl, 40);
    const src = Atomics.load(ctl, 41), u = Atomics.load(ctl, 42), q = Atomics.load(ctl, 43);
    const vals = Atomics.load(ctl, 44), qBytes = Atomics.load(ctl, 45), nb = Atomics.load(ctl, 46);
    for (;;) {
      const cur = Atomics.load(ctl, 80);
      if (cur - (cur & 0xfff) !== g) return;
      const c = cur & 0xfff;
      if (c >= pieces) break;
      if (Atomics.compareExchange(ctl, 80, cur, cur + 1) !== cur) continue;
      const b0 = Math.floor((nb * c) / pieces);
      const b1 = Math.floor((nb * (c + 1)) / pieces);
      if (b1 > b0) {
        if (pre >= 0) kernel(pre)(src + b0 * vals * 4, u + b0 * vals * 4, (b1 - b0) * vals * 4);
        kernel(quant)(src + b0 * vals * 4, q + b0 * qBytes, b1 - b0);
      }
      Atomics.add(ctl, 96, 1);
    }
    while (Atomics.load(ctl, 96) < pieces) {
      const cur = Atomics.load(ctl, 80);
      if (cur - (cur & 0xfff) !== g) return;
    }
  }
  let mine = 0;
  for (let k = 0; k < lanes; k++) {
    const j = (lane + k) % lanes;
    const start = Math.floor((total * j) / lanes);
    const R = Math.floor((total * (j + 1)) / lanes) - start;
    const n = Math.min(m, R);
    for (;;) {
      const cur = Atomics.load(ctl, 128 + 16 * j);
      if (cur - (cur & 0xfff) !== g) break;
      if ((cur & 0xfff) >= n) break;
      if (Atomics.compareExchange(ctl, 128 + 16 * j, cur, cur + 1) !== cur) continue;
      const c = cur & 0xfff;
      const r0 = start + R - Math.floor(((n - c) * (n - c) * R) / (n * n));
      const r1 = start + R - Math.floor(((n - c - 1) * (n - c - 1) * R) / (n * n));
      for (let i = 0, s = 0; i < rows.length && s < r1; s += rows[i++]) {
        const lo = Math.max(r0, s) - s;
        const hi = Math.min(r1, s + rows[i]) - s;
        if (hi <= lo) continue;
        fn(w[i] + lo * unit * a[1], a[1], a[2], a[3], y[i] + 4 * lo * unit, a[5], (hi - lo) * unit, a[7], a[8], a[9], a[10], a[11]);
        if (postFn && i < postMatrices) for (let t = 0, yo = y[i] + 4 * lo * unit; t < postTokens; t++, yo += a[5]) postFn(yo, rBase + yo, 4 * (hi - lo) * unit);
      }
      mine++;
    }
  }
  // Chunks done are counted once per thread and job (one shared add, not one per chunk).
  if (!mine) return;
  if (lane) Atomics.add(ctl, 64, mine);
  if (Atomics.add(ctl, 48, mine) + mine === target) Atomics.notify(ctl, 48);
}

/** The workers' code: `serve(startMessage, post)`; an adapter calls it with the first message it gets. */
export const WORKER_BODY = `function serve(init, post, listen) {
  const runChunks = ${runChunks.toString()};
  const attendGroups = ${attendGroups.toString()};
  const { module, memory, control, names, lane, lanes } = init;
  const exp = new WebAssembly.Instance(module, { env: { memory } }).exports;
  const fns = names.map((n) => exp[n]);
  const kernel = (i) => fns[i];
  const ctl = new Int32Array(control);
  const mail = ${LANES} + ${LINE} * lanes;
  let seen = Atomics.load(ctl, ${SEQ});
  // A later message attaches a module's kernel (MatmulPool.attach) as kernel names.length + slot:
  // attention's (attendGroups over its exports) or one export by name.
  listen((m) => {
    const inst = new WebAssembly.Instance(m.module, { env: { memory: m.memory } });
    fns[names.length + m.slot] = m.exportName ? inst.exports[m.exportName] : attendGroups(inst.exports, m.memory);
    Atomics.add(ctl, mail + ${LINE}, 1);
    Atomics.notify(ctl, mail + ${LINE});
    loop();
  });
  const loop = () => {
    for (;;) {
      for (let i = 0; i < ${SPINS} && Atomics.load(ctl, ${SEQ}) === seen; i++);
      Atomics.wait(ctl, ${SEQ}, seen);
      const s = Atomics.load(ctl, ${SEQ});
      if (s === seen) continue;
      seen = s;
      if (Atomics.load(ctl, ${QUIT})) return;
      if (Atomics.load(ctl, mail)) return; // back to the event loop: an attach message waits there
      runChunks(ctl, kernel, s, lane, lanes);
    }
  };
  post('ready');
  loop();
}`;

/** A Web Worker script. */
export const WEB_WORKER_CODE = `self.onmessage = (e) => { self.onmessage = null; (${WORKER_BODY})(e.data, (x) => self.postMessage(x), (fn) => { self.onmessage = (m) => fn(m.data); }); };`;

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

/**
 * What a job does to x before its rows (MatmulPool.callGroup's `prep`): `nb` blocks of `vals` f32 at
 * byte `src` (tokens back to back), optionally `pre`(src + o, u + o, bytes) first (silu(g)·u over g,
 * or ./norm.ts's rms_scale: x·r times the norm's weight at u),
 * then `quant`(src + o, q + b·qBytes, blocks) (./qact.ts's quantizers). Every block is independent of
 * the others, so cut into pieces across the threads they give the bytes one thread's call would.
 */
export interface Prep {
  pre: { name: string; fn: Kernel } | null;
  quant: { name: string; fn: Kernel };
  src: number;
  u: number;
  q: number;
  vals: number;
  qBytes: number;
  nb: number;
}

/** A prep phase on the calling thread alone, in one call each. */
export function runPrep(p: Prep): void {
  p.pre?.fn(p.src, p.u, p.nb * p.vals * 4);
  p.quant.fn(p.src, p.q, p.nb);
}

/**
 * What a job does to its rows once computed (MatmulPool.callGroup's `post`): `fn`(y + o, r + o, bytes)
 * on each piece of rows of each of `tokens` tokens, r at byte `r` laid out as the job's y (from the
 * first matrix's y), over the first `matrices` matrices of the job (all where absent):
 * ./epilogue.ts's add_f32 (y += the residual stream; rows are independent, so any cut gives the
 * bytes of one call over all of them) or rope_f32 (q's and k's heads; the job cut at whole heads).
 */
export interface Post {
  name: string;
  fn: Kernel;
  r: number;
  tokens: number;
  matrices?: number;
}

/** An epilogue on the calling thread alone, over every matrix's rows (a the first's arguments, `more` the others' (w, y, nRows)). */
export function runPost(p: Post, a: number[], more: readonly (readonly [number, number, number])[]): void {
  const each = (y: number, rows: number) => {
    for (let t = 0; t < p.tokens; t++) p.fn(y + t * a[5], p.r + (y - a[4]) + t * a[5], 4 * rows);
  };
  const m = p.matrices ?? more.length + 1;
  if (m > 0) each(a[4], a[6]);
  for (let i = 1; i < m; i++) each(more[i - 1][1], more[i - 1][2]);
}
/** Memories attached at once (KV caches whose attention runs on the pool). */
const MAX_ATTACHED = 8;
const NO_MORE: readonly (readonly [number, number, number])[] = [];

/** A callGroup job on the calling thread: the first matrix's call `a`, then each of `more`'s (w, y, nRows) with a's other arguments. */
export function runEach(kernel: Kernel, a: number[], more: readonly (readonly [number, number, number])[]): void {
  kernel(...a);
  for (const [w, y, rows] of more) kernel(w, a[1], a[2], a[3], y, a[5], rows, a[7], a[8], a[9], a[10], a[11]);
}

export class MatmulPool {
  private readonly ctl: Int32Array;
  /** The same control block, for the job's plain writes (published by SEQ's atomic store). */
  private readonly job: Int32Array;
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
    this.job = new Int32Array(control);
    this.index = new Map(names.map((n, i) => [n, i]));
    this.names = names.length;
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
    const control = new SharedArrayBuffer((LANES + LINE * (threads + 2)) * 4); // the lanes' lines, the mail flag's and its acks'
    const workers: PoolWorker[] = [];
    try {
      const ready: Promise<void>[] = [];
      for (let index = 1; index < threads; index++) {
        const w = opts.spawn();
        workers.push(w);
        ready.push(new Promise<void>((resolve, reject) => w.onReady((err) => (err ? reject(err) : resolve()))));
        w.postMessage({ module, memory, control, names, lane: index, lanes: threads });
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
  callGroup(name: string, kernel: Kernel, a: number[], more: readonly (readonly [number, number, number])[], prep: Prep | null = null, post: Post | null = null, unit = 1): void {
    if (more.length >= MAX_GROUP) throw new LlmcError(`internal: a pool job covers at most ${MAX_GROUP} matrices`);
    let nRows = a[6];
    for (const m of more) nRows += m[2];
    const work = a[1] * nRows * a[8];
    if (nRows < 2 * unit || work < this.minWork) {
      if (prep) runPrep(prep);
      runEach(kernel, a, more);
      if (post) runPost(post, a, more);
      return;
    }
    if (unit > 1) {
      // cut only at multiples of `unit` rows (each matrix's rows are): counts in units
      if (a[6] % unit || more.some((m) => m[2] % unit)) throw new LlmcError(`internal: a job cut at ${unit} rows over matrices of other row counts`);
      a = [...a.slice(0, 6), a[6] / unit, ...a.slice(7)];
      more = more.map(([w, y, rows]) => [w, y, rows / unit] as const);
    }
    this.run(this.index.get(name)!, kernel, a, more, nRows / unit, this.chunksPerLane(work), prep, unit, post);
  }

  private gen = 0;
  private calls = 0;
  private readonly names: number;
  /** Attached memories by slot (attach); a slot is reused round-robin, the oldest owner loses it. */
  private readonly attached: unknown[] = [];
  private nextSlot = 0;

  /**
   * Instantiate `module` (./attention.ts's, with `attend` and maybe `widen`; or, with `exportName`,
   * any module whose export of that name is a row kernel, ./gemm.ts's) over `memory` (shared) on
   * every worker, as kernel slot s: the workers leave their wait loop for their event loop, take the
   * message posted before, and come back. Returns the slot; `owner` marks it (isAttached).
   */
  attach(module: WebAssembly.Module, memory: WebAssembly.Memory, owner: unknown, exportName?: string): number {
    const slot = this.nextSlot;
    this.nextSlot = (slot + 1) % MAX_ATTACHED;
    this.attached[slot] = owner;
    const mail = LANES + LINE * this.threads;
    const ack = mail + LINE;
    Atomics.store(this.ctl, ack, 0);
    for (const w of this.workers) w.postMessage({ slot, module, memory, exportName });
    Atomics.store(this.ctl, mail, 1);
    this.gen = (this.gen + 1) & 0xffff;
    Atomics.store(this.ctl, SEQ, this.gen);
    Atomics.notify(this.ctl, SEQ);
    for (let i = 0; ; i++) {
      const acks = Atomics.load(this.ctl, ack);
      if (acks === this.workers.length) break;
      if (this.canWait && i > SPINS) Atomics.wait(this.ctl, ack, acks, 1000);
    }
    Atomics.store(this.ctl, mail, 0);
    return slot;
  }

  /** Whether `slot` still belongs to `owner`. */
  isAttached(slot: number, owner: unknown): boolean {
    return this.attached[slot] === owner;
  }

  /** Run attached slot `slot`'s job `kernel` (attendGroups on this thread) over rows [0, nRows): kernel(r0, 1, params, 0, 4·r0, 0, n). */
  callAttached(slot: number, kernel: Kernel, params: number, nRows: number): void {
    this.run(this.names + slot, kernel, [0, 1, params, 0, 0, 0, nRows], NO_MORE, nRows, CHUNKS_PER_THREAD);
  }

  /**
   * Run attached slot `slot`'s row kernel (`kernel` on this thread; the kernels' arguments `a`) over
   * its a[6] rows cut only at multiples of `unit` rows (a[6] a multiple of it: ./gemm.ts's tiles,
   * whose bits do not depend on where a call's rows start), when worth it as callGroup judges.
   */
  callAttachedRows(slot: number, kernel: Kernel, a: number[], unit: number): void {
    const units = a[6] / unit;
    const work = a[1] * a[6] * a[8];
    if (units < 2 || work < this.minWork) return kernel(...a);
    this.run(this.names + slot, kernel, [...a.slice(0, 6), units, ...a.slice(7)], NO_MORE, units, this.chunksPerLane(work), null, unit);
  }

  /** Chunks per lane for a job of `work` multiply-adds: more where chunks stay large enough to pay their claim. */
  private chunksPerLane(work: number): number {
    return Math.max(CHUNKS_PER_THREAD, Math.min(CHUNKS_PER_THREAD_MAX, Math.floor(work / CHUNK_MIN_WORK / this.threads)));
  }

  /** Kernel calls split so far, and the chunks of them the workers ran. */
  stats(): { splitCalls: number; workerChunks: number } {
    return { splitCalls: this.calls, workerChunks: Atomics.load(this.ctl, WORKER_CHUNKS) };
  }

  private run(fn: number, kernel: Kernel, a: number[], more: readonly (readonly [number, number, number])[], nRows: number, perLane: number, prep: Prep | null = null, unit = 1, post: Post | null = null): void {
    const ctl = this.ctl;
    const job = this.job;
    const lanes = this.threads;
    const gen = (this.gen = (this.gen + 1) & 0xffff);
    // closed while the job is written
    for (let j = 0; j < lanes; j++) Atomics.store(ctl, LANES + LINE * j, (gen << 12) | 0xfff);
    Atomics.store(ctl, PREP_NEXT, (gen << 12) | 0xfff);
    let target = 0;
    for (let j = 0; j < lanes; j++) target += Math.min(perLane, Math.floor((nRows * (j + 1)) / lanes) - Math.floor((nRows * j) / lanes));
    job[FN] = fn;
    job[CHUNKS] = perLane;
    job[TARGET] = target;
    for (let i = 0; i < MAX_ARGS; i++) job[ARGS + i] = a[i] ?? 0;
    job[MATRICES] = more.length + 1;
    job[UNIT] = unit;
    for (let i = 0; i < more.length; i++) for (let k = 0; k < 3; k++) job[MORE + 3 * i + k] = more[i][k];
    const postAt = post ? this.index.get(post.name)! : -1;
    job[POST] = postAt;
    job[POST + 1] = post?.r ?? 0;
    job[POST + 2] = post?.tokens ?? 0;
    job[POST + 3] = post ? (post.matrices ?? more.length + 1) : 0;
    let lookup = (i: number): Kernel => (i === postAt ? post!.fn : kernel);
    if (prep) {
      const quant = this.index.get(prep.quant.name)!;
      job[PREP] = Math.min(prep.nb, PREP_PIECES_PER_THREAD * lanes);
      job[PREP + 1] = prep.pre ? this.index.get(prep.pre.name)! : -1;
      job[PREP + 2] = quant;
      job[PREP + 3] = prep.src;
      job[PREP + 4] = prep.u;
      job[PREP + 5] = prep.q;
      job[PREP + 6] = prep.vals;
      job[PREP + 7] = prep.qBytes;
      job[PREP + 8] = prep.nb;
      Atomics.store(ctl, PREP_DONE, 0);
      const pre = prep.pre ? job[PREP + 1] : -2;
      lookup = (i) => (i === fn ? kernel : i === quant ? prep.quant.fn : i === pre ? prep.pre!.fn : post!.fn);
    } else job[PREP] = 0;
    Atomics.store(ctl, DONE, 0);
    for (let j = 0; j < lanes; j++) Atomics.store(ctl, LANES + LINE * j, gen << 12);
    Atomics.store(ctl, PREP_NEXT, gen << 12);
    Atomics.store(ctl, SEQ, gen); // publishes the job's plain writes above
    Atomics.notify(ctl, SEQ);
    this.calls++;
    runChunks(ctl, lookup, gen, 0, lanes);
    for (let i = 0; ; i++) {
      const done = Atomics.load(ctl, DONE);
      if (done === target) return;
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
