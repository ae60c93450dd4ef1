/**
 * quantizeParallel: the rows of a tensor split across worker_threads plus the calling thread.
 * Every row is quantized independently, so the bytes are identical to quantize().
 *
 * The worker script is the compiled dist/src/core/quant/worker.js. From compiled code it sits next to this
 * file; when this module runs from its TypeScript source (vitest), the dist copy is used and, unless a stamp
 * says it was built from the current sources, src/core/quant is compiled into dist/ first.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { LlmcError } from '../errors.js';
import { checkRows, quantize, quantizeInto } from './quantize.js';
import { letEventLoopTurn } from '../util/interrupt.js';
import { rowBytes, type QuantType } from './types.js';

/**
 * Types whose single-thread quantizer (WebAssembly SIMD) runs at GB/s: handing their rows to a worker
 * (a copy each way) costs as much as the work, so by default they stay on the calling thread (bench
 * quant: 0.07–0.9x of one thread on 2 cores with workers). The K-quants' searches run at tens to
 * hundreds of MB/s and gain from workers.
 */
const SINGLE_THREAD_TYPES: ReadonlySet<QuantType> = new Set(['F32', 'F16', 'BF16', 'Q8_0', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1']);
/**
 * Threads for the K-quants, by the machine: with fewer than four cores, one. A compile's second core
 * already hashes the artifact and serves the writes, and workers measured 0.5-1.1x of one thread on
 * 2 cores (bench quant, a loaded machine, K-quants after the wasm packing); from four cores, all but one
 * (left to hashing and I/O).
 */
export function defaultQuantThreads(type: QuantType, cores = os.availableParallelism()): number {
  if (SINGLE_THREAD_TYPES.has(type) || cores < 4) return 1;
  return cores - 1;
}
/** Below this many elements the hand-off costs more than it saves. */
const MIN_PARALLEL_ELEMENTS = 1 << 16;
/** Elements per chunk handed out (4 MB of f32): bounds the copies in flight. */
const CHUNK_ELEMENTS = 1 << 20;
/** Below this a chunk's hand-off (a message each way) starts to cost more than its work. */
const MIN_CHUNK_ELEMENTS = 1 << 16;

interface Pending { resolve: (b: Uint8Array) => void; reject: (e: Error) => void }
interface Slot { worker: Worker; pending: Map<number, Pending> }

let slots: Slot[] = [];
let nextId = 1;
let workerScript: string | null | undefined;

/**
 * The sources compiled for the worker: index.ts and worker.ts and everything they import, relatively,
 * found by following their relative import clauses (a hand-kept list went stale), relative to the repo root.
 */
function workerSources(root: string): string[] {
  const seen = new Set<string>();
  const visit = (rel: string) => {
    if (seen.has(rel)) return;
    seen.add(rel);
    const text = fs.readFileSync(path.join(root, rel), 'utf8');
    for (const m of text.matchAll(/^(?:import|export)[^;]*?from '(\.{1,2}\/[^']+)\.js'/gm)) visit(path.join(path.dirname(rel), `${m[1]}.ts`));
  };
  visit('src/core/quant/index.ts');
  visit('src/core/quant/worker.ts');
  return [...seen];
}

/** Hash of the worker's sources; dist/ is current when its stamp matches (mtimes lie when builds race edits). */
function sourcesHash(root: string): string {
  const h = createHash('sha256');
  for (const src of workerSources(root).sort()) h.update(src).update('\0').update(fs.readFileSync(path.join(root, src))).update('\0');
  return h.digest('hex');
}

const STAMP = 'dist/src/core/quant/.sources-sha256';

function isFresh(root: string, hash: string): boolean {
  try {
    return fs.readFileSync(path.join(root, STAMP), 'utf8') === hash && fs.existsSync(path.join(root, 'dist/src/core/quant/worker.js'));
  } catch {
    return false;
  }
}

/** Whether `b` exists with `a`'s bytes: such files stay as they are, so their mtimes keep saying dist/ is current (bin/llmc.js's run bundle checks them). */
function sameBytes(a: string, b: string): boolean {
  try {
    return fs.readFileSync(a).equals(fs.readFileSync(b));
  } catch {
    return false;
  }
}

/**
 * Compile src/core/quant (index.ts + worker.ts and their imports; not the whole project, whose other parts may be
 * mid-edit) into a scratch folder, then rename each file into dist/ so a concurrent reader never sees half a file.
 */
function buildWorker(root: string, hash: string): void {
  const dist = path.join(root, 'dist');
  fs.mkdirSync(dist, { recursive: true });
  const scratch = fs.mkdtempSync(path.join(dist, '.quant-build-'));
  try {
    execFileSync(process.execPath, [
      path.join(root, 'node_modules/typescript/bin/tsc'), '--outDir', scratch, '--rootDir', root,
      '--module', 'NodeNext', '--moduleResolution', 'NodeNext', '--target', 'ES2022', '--strict', '--skipLibCheck',
      '--types', 'node', '--sourceMap', path.join(root, 'src/core/quant/index.ts'), path.join(root, 'src/core/quant/worker.ts'),
    ], { cwd: root, stdio: 'pipe' });
    const move = (rel: string) => {
      for (const e of fs.readdirSync(path.join(scratch, rel), { withFileTypes: true })) {
        const r = path.join(rel, e.name);
        if (e.isDirectory()) move(r);
        else if (!sameBytes(path.join(scratch, r), path.join(dist, r))) {
          fs.mkdirSync(path.join(dist, rel), { recursive: true });
          fs.renameSync(path.join(scratch, r), path.join(dist, r));
        }
      }
    };
    move('');
    fs.writeFileSync(path.join(root, STAMP), hash);
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

/** Absolute path of the worker script, or null when it cannot be found or built (callers then run in-process). */
export function resolveWorkerScript(): string | null {
  if (workerScript !== undefined) return workerScript;
  const here = fileURLToPath(import.meta.url);
  if (here.endsWith('.mjs')) {
    // A bundle in dist/ (scripts/bundle-run.mjs): the worker script is tsc's, under dist/src.
    const js = path.join(path.dirname(here), 'src/core/quant/worker.js');
    workerScript = fs.existsSync(js) ? js : null;
    return workerScript;
  }
  if (here.endsWith('.js')) {
    const js = path.join(path.dirname(here), 'worker.js');
    workerScript = fs.existsSync(js) ? js : null;
    return workerScript;
  }
  const root = path.resolve(path.dirname(here), '../../..');
  const js = path.join(root, 'dist/src/core/quant/worker.js');
  try {
    const hash = sourcesHash(root);
    if (!isFresh(root, hash)) buildWorker(root, hash);
    workerScript = fs.existsSync(js) ? js : null;
  } catch {
    workerScript = null;
  }
  return workerScript;
}

function failSlot(slot: Slot, err: Error): void {
  for (const p of slot.pending.values()) p.reject(err);
  slot.pending.clear();
  slots = slots.filter((s) => s !== slot);
  void slot.worker.terminate();
}

/** The parent's node flags minus those of a `node -e` / `-p` run, which a worker refuses. */
function workerExecArgv(): string[] {
  const a = process.execArgv;
  const out: string[] = [];
  for (let i = 0; i < a.length; i++) {
    if (['-e', '-p', '-pe', '--eval', '--print', '--input-type'].includes(a[i])) i++; // the value follows
    else if (!/^(--eval|--print|--input-type)=/.test(a[i])) out.push(a[i]);
  }
  return out;
}

function spawn(script: string): Slot {
  // A worker holds the process open only while it has jobs (ref on the first, unref after the last).
  const slot: Slot = { worker: new Worker(script, { execArgv: workerExecArgv() }), pending: new Map() };
  slot.worker.unref();
  slot.worker.on('message', (msg: { id: number; out?: Uint8Array; error?: string }) => {
    const p = slot.pending.get(msg.id);
    if (!p) return;
    slot.pending.delete(msg.id);
    if (slot.pending.size === 0) slot.worker.unref();
    if (msg.error !== undefined || !msg.out) p.reject(new LlmcError(`quantize worker: ${msg.error ?? 'no output'}`));
    else p.resolve(msg.out);
  });
  slot.worker.on('error', (e) => failSlot(slot, new LlmcError(`quantize worker failed: ${e.message}`)));
  slot.worker.on('exit', (code) => { if (slot.pending.size) failSlot(slot, new LlmcError(`quantize worker exited (${code})`)); });
  return slot;
}

/** Rows in shared memory are lent to the worker as they are; others go as a copy, transferred. */
function run(slot: Slot, type: QuantType, rows: Float32Array, rowLength: number): Promise<Uint8Array> {
  const id = nextId++;
  const shared = rows.buffer instanceof SharedArrayBuffer;
  const data = shared ? rows : rows.slice();
  return new Promise((resolve, reject) => {
    if (slot.pending.size === 0) slot.worker.ref();
    slot.pending.set(id, { resolve, reject });
    slot.worker.postMessage({ id, type, rowLength, data }, shared ? [] : [data.buffer as ArrayBuffer]);
  });
}

/**
 * Same as quantize but split across worker_threads for large tensors (by default defaultQuantThreads: one
 * thread for the GB/s types and on machines of under four cores); identical bytes.
 * The rows go out in chunks of about CHUNK_ELEMENTS from a shared queue: each worker holds at most two chunks
 * (copies, transferred; or views, when `data` is in shared memory), the calling thread takes chunks too, so extra memory stays a few chunks whatever the
 * tensor size, and a core that is busy with something else simply takes fewer chunks.
 */
export async function quantizeParallel(
  type: QuantType, data: Float32Array, rowLength: number,
  opts: { threads?: number; /** elements per chunk handed out (tests use small ones) */ chunkElements?: number } = {},
): Promise<Uint8Array> {
  const rows = checkRows(type, data.length, rowLength);
  const threads = Math.max(1, Math.min(opts.threads ?? defaultQuantThreads(type), rows));
  // F32 is a copy: handing it to a worker would cost more than doing it
  if (threads < 2 || data.length < MIN_PARALLEL_ELEMENTS || type === 'F32') return quantize(type, data, rowLength);
  const script = resolveWorkerScript();
  if (!script) return quantize(type, data, rowLength);
  while (slots.length < threads - 1) slots.push(spawn(script));
  const workers = slots.slice(0, threads - 1);

  const bytesPerRow = rowBytes(type, rowLength);
  const out = new Uint8Array(rows * bytesPerRow);
  // At most CHUNK_ELEMENTS, and ~16 chunks per thread (but not below MIN_CHUNK_ELEMENTS): the caller
  // waits for the last chunk out, so small ones at the end keep the other threads from idling.
  const maxRows = Math.floor((opts.chunkElements ?? CHUNK_ELEMENTS) / rowLength);
  const shareRows = Math.max(Math.ceil(rows / (16 * threads)), Math.ceil(MIN_CHUNK_ELEMENTS / rowLength));
  const rowsPerChunk = Math.max(1, Math.min(maxRows, shareRows));
  let nextRow = 0;
  const take = (): [number, number] | null => {
    if (nextRow >= rows) return null;
    const r0 = nextRow;
    nextRow = Math.min(rows, r0 + rowsPerChunk);
    return [r0, nextRow];
  };
  let failure: Error | null = null;
  // A worker lane: keep the worker fed with the next chunk until the queue is empty.
  const lane = async (slot: Slot): Promise<void> => {
    for (let chunk = take(); chunk && !failure; chunk = take()) {
      const [r0, r1] = chunk;
      const bytes = await run(slot, type, data.subarray(r0 * rowLength, r1 * rowLength), rowLength);
      out.set(bytes, r0 * bytesPerRow);
    }
  };
  const lanes = workers.flatMap((w) => [lane(w), lane(w)]).map((p) => p.catch((e: Error) => { failure ??= e; }));
  // This thread's lane: between chunks, yield so worker replies are handled and their lanes refilled.
  for (let chunk = take(); chunk && !failure; chunk = take()) {
    const [r0, r1] = chunk;
    quantizeInto(type, data.subarray(r0 * rowLength, r1 * rowLength), rowLength, out, r0 * bytesPerRow);
    await letEventLoopTurn();
  }
  await Promise.all(lanes);
  if (failure) throw failure;
  return out;
}

/** Stop the worker pool (tests, or a CLI that wants to exit promptly; idle workers never hold the process). */
export async function closeQuantWorkers(): Promise<void> {
  const old = slots;
  slots = [];
  await Promise.all(old.map((s) => s.worker.terminate()));
}
