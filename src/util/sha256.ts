/**
 * sha256 of big files off the main thread: a compile is CPU-bound on the main thread, and hashing a
 * checkpoint and its artifact costs as much again, so a worker on the second core reads and hashes
 * (from the page cache) while the main thread converts. Small inputs are hashed inline (a worker
 * costs tens of milliseconds to start). Same digests either way.
 */
import { createHash } from 'node:crypto';
import { closeSync, createReadStream, openSync, promises as fsp } from 'node:fs';
import { Worker } from 'node:worker_threads';

/** Below this many bytes a worker is not worth starting. */
export const WORKER_MIN_BYTES = 64 << 20;

// CommonJS run with `eval`: no script file to locate, works from dist/ and from vitest alike.
const WORKER_CODE = `
const { parentPort, workerData } = require('node:worker_threads');
const fs = require('node:fs');
const h = require('node:crypto').createHash('sha256');
if (workerData.prefix) h.update(workerData.prefix);
const buf = Buffer.allocUnsafe(1 << 22);
function hashRange(fd, pos, end) {
  while (pos < end) {
    const n = fs.readSync(fd, buf, 0, Math.min(buf.length, end - pos), pos);
    if (n === 0) throw new Error('file shorter than expected');
    h.update(buf.subarray(0, n));
    pos += n;
  }
  return pos;
}
if (!workerData.follow) {
  for (const f of workerData.files) {
    const fd = fs.openSync(f, 'r');
    try { hashRange(fd, 0, fs.fstatSync(fd).size); } finally { fs.closeSync(fd); }
  }
  parentPort.postMessage({ digest: h.digest('hex') });
} else {
  // The descriptor is the parent's (opened before the file can be renamed; the parent closes it).
  const fd = workerData.fd;
  let pos = 0;
  parentPort.on('message', (m) => {
    pos = hashRange(fd, pos, m.upTo);
    if (m.end) {
      parentPort.postMessage({ digest: h.digest('hex') });
      parentPort.close();
    }
  });
}
`;

function startWorker(files: string[], prefix: string, follow: boolean, fd?: number): { worker: Worker; digest: Promise<string> } {
  const worker = new Worker(WORKER_CODE, { eval: true, workerData: { files, prefix, follow, fd } });
  worker.unref();
  const digest = new Promise<string>((resolve, reject) => {
    worker.once('message', (m: { digest: string }) => resolve(m.digest));
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`hash worker exited (${code})`)));
  });
  digest.catch(() => {}).finally(() => void worker.terminate());
  return { worker, digest };
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
  return total < WORKER_MIN_BYTES ? hashInline(files, prefix) : startWorker(files, prefix, false).digest;
}

/**
 * Hashes a file that is being written front to back, on a worker reading behind the writer:
 * `advance(n)` says bytes [0, n) are written, `finish(size)` returns the digest of the whole file.
 */
export class TrailingSha256 {
  private posted = 0;
  private constructor(
    private readonly w: { worker: Worker; digest: Promise<string> },
    private readonly fd: number,
  ) {}

  /**
   * Opened here, synchronously, not in the worker: the writer may rename the file before a busy
   * worker starts, and an open descriptor follows the file through the rename.
   */
  static start(file: string): TrailingSha256 {
    const fd = openSync(file, 'r');
    return new TrailingSha256(startWorker([], '', true, fd), fd);
  }

  advance(upTo: number): void {
    if (upTo - this.posted < 4 << 20) return; // fewer, larger reads
    this.w.worker.postMessage({ upTo });
    this.posted = upTo;
  }

  finish(size: number): Promise<string> {
    this.w.worker.postMessage({ upTo: size, end: true });
    return this.w.digest.finally(() => this.w.worker.terminate().then(() => closeSync(this.fd)));
  }

  cancel(): void {
    void this.w.worker.terminate().then(() => closeSync(this.fd));
  }
}
