/**
 * sha256 off the main thread: a compile is CPU-bound on the main thread, and hashing a checkpoint
 * and its artifact costs as much again, so workers on the second core hash the checkpoint's files
 * (read from the page cache) and the artifact's bytes (handed over as written) while the main thread
 * converts. Small inputs are hashed inline (a worker costs tens of milliseconds to start).
 */
import { createReadStream, promises as fsp } from 'node:fs';
import { createRequire } from 'node:module';
import type { Worker } from 'node:worker_threads';

// node:crypto and node:worker_threads load on first use: every command imports this module (through
// ./atomic.ts) and loading them costs `llmc run`, which hashes nothing, ~15 ms of start-up.
const builtin = createRequire(import.meta.url);
const createHash = (algorithm: string) => (builtin('node:crypto') as typeof import('node:crypto')).createHash(algorithm);

/** Below this many bytes a worker is not worth starting. */
export const WORKER_MIN_BYTES = 64 << 20;

// CommonJS run with `eval`: no script file to locate, works from dist/ and from vitest alike.
// Either hashes `files` (read here), or (`ring`) the pieces the parent copies into a shared ring or
// lends from shared memory of its own.
const WORKER_CODE = `
const { parentPort, workerData } = require('node:worker_threads');
const fs = require('node:fs');
const h = require('node:crypto').createHash('sha256');
if (workerData.ring) {
  const ring = new Uint8Array(workerData.ring);
  parentPort.on('message', (m) => {
    if (m.end) {
      parentPort.postMessage({ digest: h.digest('hex') });
      parentPort.close();
    } else if (m.shared) {
      h.update(new Uint8Array(m.shared, m.offset, m.length));
      parentPort.postMessage({ done: m.seq });
    } else {
      h.update(ring.subarray(m.offset, m.offset + m.length));
      parentPort.postMessage({ free: m.slot });
    }
  });
} else {
  if (workerData.prefix) h.update(workerData.prefix);
  const buf = Buffer.allocUnsafe(1 << 22);
  for (const f of workerData.files) {
    const fd = fs.openSync(f, 'r');
    try {
      for (let n; (n = fs.readSync(fd, buf, 0, buf.length, null)) > 0; ) h.update(buf.subarray(0, n));
    } finally {
      fs.closeSync(fd);
    }
  }
  parentPort.postMessage({ digest: h.digest('hex') });
}
`;

function startWorker(workerData: { files?: string[]; prefix?: string; ring?: SharedArrayBuffer }): Worker {
  const { Worker: NodeWorker } = builtin('node:worker_threads') as typeof import('node:worker_threads');
  const worker = new NodeWorker(WORKER_CODE, { eval: true, workerData });
  worker.unref();
  return worker;
}

/** Resolves with the worker's digest; rejects if it fails or exits without one. */
function digestOf(worker: Worker): Promise<string> {
  const digest = new Promise<string>((resolve, reject) => {
    worker.on('message', (m: { digest?: string }) => m.digest !== undefined && resolve(m.digest));
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`hash worker exited (${code})`)));
  });
  digest.catch(() => {}).finally(() => void worker.terminate());
  return digest;
}

async function hashInline(files: string[], prefix: string): Promise<string> {
  const h = createHash('sha256');
  if (prefix) h.update(prefix);
  for (const f of files) {
    await new Promise<void>((resolve, reject) => {
      createReadStream(f, { highWaterMark: 1 << 22 })
        .on('data', (c) => h.update(c))
        .on('end', resolve)
        .on('error', reject);
    });
  }
  return h.digest('hex');
}

/** sha256 over `prefix` (UTF-8) followed by the bytes of `files` in order; big inputs on a worker thread. */
export async function sha256Files(files: string[], prefix = ''): Promise<string> {
  let total = 0;
  for (const f of files) total += (await fsp.stat(f)).size;
  return total < WORKER_MIN_BYTES ? hashInline(files, prefix) : digestOf(startWorker({ files, prefix }));
}

const SLOT_BYTES = 4 << 20;
const SLOTS = 4;

/**
 * sha256 of a byte stream on a worker thread, so hashing an artifact as it is written costs the
 * writer almost nothing and nobody reads the file again. `update` copies each piece into a ring of
 * shared slots that the worker hashes as they fill; a piece that already lives in shared memory
 * is lent instead (no copy), and its update resolves once the worker is done with it. If the
 * worker fails, updates become no-ops and `digest()` rejects.
 */
export class BackgroundSha256 {
  private readonly ring = new SharedArrayBuffer(SLOT_BYTES * SLOTS);
  private readonly bytes = new Uint8Array(this.ring);
  private readonly worker = startWorker({ ring: this.ring });
  private readonly result = digestOf(this.worker);
  private readonly free: number[] = [];
  private waiting: (() => void) | null = null;
  /** Lent pieces not yet hashed: their sequence numbers and the resolvers of their updates. */
  private lent = new Map<number, () => void>();
  private seq = 0;
  private failed = false;
  /** The slot being filled (-1: none held), and how full it is. */
  private slot = -1;
  private fill = 0;

  constructor() {
    for (let k = SLOTS - 1; k >= 0; k--) this.free.push(k);
    this.worker.on('message', (m: { free?: number; done?: number }) => {
      if (m.done !== undefined) {
        this.lent.get(m.done)?.();
        this.lent.delete(m.done);
      }
      if (m.free === undefined) return;
      this.free.push(m.free);
      this.wake();
    });
    this.result.catch(() => {
      this.failed = true;
      this.wake();
    });
  }

  private wake(): void {
    const w = this.waiting;
    this.waiting = null;
    w?.();
    if (this.failed) {
      for (const done of this.lent.values()) done();
      this.lent.clear();
    }
  }

  private lend(data: Uint8Array): Promise<void> {
    if (this.fill) this.post(); // what was copied before goes first
    const seq = this.seq++;
    const done = new Promise<void>((resolve) => this.lent.set(seq, resolve));
    this.worker.postMessage({ shared: data.buffer, offset: data.byteOffset, length: data.length, seq });
    return done;
  }

  /** Hands the slot being filled to the worker (which frees it when hashed). */
  private post(): void {
    this.worker.postMessage({ slot: this.slot, offset: this.slot * SLOT_BYTES, length: this.fill });
    this.slot = -1;
    this.fill = 0;
  }

  /** The last update handed in: each starts once the one before has handed all its bytes over. */
  private tail: Promise<void> = Promise.resolve();

  /**
   * Hash `data` after everything handed in before. Callers may issue the next update before this one
   * resolves (AtomicFile.append does): updates queue in order, and only one at a time waits for a free
   * slot (two waiting at once left one waiting forever and would have hashed their bytes out of order).
   */
  update(data: Uint8Array): Promise<void> {
    const handed = this.tail.then(() => this.handOver(data));
    this.tail = handed.then(() => {});
    return handed.then((h) => h.reusable);
  }

  /** Copies `data` into the ring (or lends it): resolves once handed over, with when `data` may change. */
  private async handOver(data: Uint8Array): Promise<{ reusable: Promise<void> }> {
    if (data.buffer instanceof SharedArrayBuffer && !this.failed) return { reusable: this.lend(data) };
    for (let off = 0; off < data.length && !this.failed; ) {
      if (this.slot < 0) {
        while (!this.free.length && !this.failed) await new Promise<void>((r) => (this.waiting = r));
        if (this.failed) break;
        this.slot = this.free.pop()!;
      }
      const n = Math.min(SLOT_BYTES - this.fill, data.length - off);
      this.bytes.set(data.subarray(off, off + n), this.slot * SLOT_BYTES + this.fill);
      this.fill += n;
      off += n;
      if (this.fill === SLOT_BYTES) this.post();
    }
    return { reusable: Promise.resolve() };
  }

  /** The digest of every update handed in (the end is posted once the last is handed over). */
  async digest(): Promise<string> {
    await this.tail;
    if (!this.failed) {
      if (this.fill) this.post();
      this.worker.postMessage({ end: true });
    }
    return this.result;
  }

  cancel(): void {
    this.failed = true;
    this.wake();
    void this.worker.terminate();
  }
}
