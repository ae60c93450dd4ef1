/**
 * Artifacts appear whole or not at all: write to a temp name beside the target, rename at the end.
 */
import { promises as fsp, rmSync, writeSync } from 'node:fs';
import path from 'node:path';
import { LlmcError } from '../errors.js';
import { onInterrupt } from './interrupt.js';
import { BackgroundSha256, WORKER_MIN_BYTES } from './sha256.js';

let counter = 0;
/** Bytes between background flushes of a file being written (see AtomicFile.flushBehind). */
const FLUSH_EVERY = 64 << 20;
/**
 * The most bytes one write() hands the kernel. A big write makes the kernel allocate big page-cache
 * folios (up to the write's size and alignment), and on a VM whose free memory is handed back to the
 * host in 2 MB blocks (free page reporting) those come from memory the host must fault in again: a
 * 1.16 GB artifact written in 6 MB pieces took 4–12 s, 2.5–4 s of it in the kernel's copy, against
 * 0.4–1.2 s in pieces of 256 KB (docs/lab/speed-history.md, "GGUF from BF16 vs cp"). `cp` itself goes through
 * splice in 64 KB pieces.
 */
const WRITE_PIECE = 256 << 10;
export function tempNameFor(finalPath: string): string {
  return path.join(path.dirname(finalPath), `.${path.basename(finalPath)}.${process.pid}.${counter++}.tmp`);
}

/** Translate an fs error into a one-line user error naming the file. */
export function ioError(err: unknown, file: string, doing: string): LlmcError {
  const e = err as NodeJS.ErrnoException;
  const why: Record<string, string> = {
    ENOSPC: 'no space left on device',
    EDQUOT: 'disk quota exceeded',
    EACCES: 'permission denied',
    EPERM: 'operation not permitted',
    EROFS: 'read-only file system',
    ENOENT: 'no such file or directory',
    ENOTDIR: 'a parent is not a directory',
    EISDIR: 'is a directory',
    EEXIST: 'exists and is not a directory',
  };
  if (err instanceof LlmcError) return err;
  return new LlmcError(`cannot ${doing}: ${why[e?.code ?? ''] ?? e?.message ?? String(err)}`, file);
}

/** sha256 of files committed by this process, valid while the file's stat still matches. */
const committed = new Map<string, { size: number; mtimeMs: number; ino: number; sha256: string }>();

/** The sha256 an AtomicFile computed while writing `file`, if the file is still the one it wrote. */
export async function knownSha256(file: string): Promise<string | undefined> {
  const d = committed.get(path.resolve(file));
  if (!d) return undefined;
  const st = await fsp.stat(file).catch(() => undefined);
  return st && st.size === d.size && st.mtimeMs === d.mtimeMs && st.ino === d.ino ? d.sha256 : undefined;
}

export interface AtomicFileOptions {
  /**
   * The size the file will have, if known. A big file (WORKER_MIN_BYTES or more) is then hashed as it
   * is written, on a worker thread, so the manifest need not read it again (see knownSha256).
   */
  expectedSize?: number;
}

/**
 * An output file being written under a temp name. `commit()` renames it into place.
 * `writeAt` (patching bytes already written) turns the running hash off.
 */
export class AtomicFile {
  private constructor(
    readonly finalPath: string,
    readonly tempPath: string,
    private handle: fsp.FileHandle,
    private hasher: BackgroundSha256 | null,
    private position = 0,
  ) {}

  private flushing: Promise<void> | null = null;
  private flushedTo = 0;

  static async open(finalPath: string, options: AtomicFileOptions = {}): Promise<AtomicFile> {
    const tmp = tempNameFor(finalPath);
    let handle: fsp.FileHandle;
    try {
      handle = await fsp.open(tmp, 'wx'); // exclusive: never through a link or over another writer's file
    } catch (err) {
      throw ioError(err, finalPath, 'create file');
    }
    const hasher = (options.expectedSize ?? 0) >= WORKER_MIN_BYTES ? new BackgroundSha256() : null;
    const file = new AtomicFile(finalPath, tmp, handle, hasher);
    file.forget = onInterrupt(() => rmSync(tmp, { force: true }));
    return file;
  }

  /** Unregisters the interrupt clean-up (once the temp file is renamed or removed). */
  private forget = () => {};

  get bytesWritten(): number {
    return this.position;
  }

  /** Appends `data`; resolves once it is written and may change again. */
  async write(data: Uint8Array): Promise<void> {
    await (await this.append(data)).hashed;
  }

  /**
   * Appends `data` and resolves once it is written, while the hash worker may still be reading it:
   * `data` must stay unchanged until `hashed` resolves. A writer converting its next piece meanwhile
   * keeps the worker busy (the artifact's hash is the longest stage of a GGUF compile).
   */
  async append(data: Uint8Array): Promise<{ hashed: Promise<void> }> {
    try {
      // The hash worker reads `data` while it is written here. The writes are synchronous: pieces
      // of WRITE_PIECE bytes through the thread pool cost a thread hand-off each, more CPU than
      // the writes themselves (measured 0.4 s of 3.6 s on a 1.16 GB artifact).
      const hashed = this.hasher?.update(data) ?? Promise.resolve();
      let off = 0;
      while (off < data.length) {
        const bytesWritten = writeSync(this.handle.fd, data, off, Math.min(WRITE_PIECE, data.length - off), this.position);
        off += bytesWritten;
        this.position += bytesWritten;
      }
      this.flushBehind();
      return { hashed };
    } catch (err) {
      await this.abort();
      throw ioError(err, this.finalPath, 'write');
    }
  }

  /**
   * Starts writing dirty pages back every FLUSH_EVERY bytes, one flush at a time, in the background:
   * the disk works while we convert, and the fsync in commit() only waits for the tail. (A failed
   * flush is not lost: the fsync in commit() reports it again.)
   */
  private flushBehind(): void {
    if (this.flushing || this.position - this.flushedTo < FLUSH_EVERY) return;
    this.flushedTo = this.position;
    this.flushing = this.handle.datasync().catch(() => {}).finally(() => (this.flushing = null));
  }

  /** Write at an absolute position (for headers patched after the body). */
  async writeAt(data: Uint8Array, position: number): Promise<void> {
    this.hasher?.cancel();
    this.hasher = null;
    try {
      await this.handle.write(data, 0, data.length, position);
    } catch (err) {
      await this.abort();
      throw ioError(err, this.finalPath, 'write');
    }
  }

  async commit(): Promise<void> {
    // The digest is an optimization: if hashing fails the manifest reads the file instead.
    const digest = this.hasher?.digest().catch(() => undefined);
    this.hasher = null;
    try {
      await this.flushing;
      await this.handle.sync();
      await this.handle.close();
      await fsp.rename(this.tempPath, this.finalPath);
      this.forget();
    } catch (err) {
      await this.abort();
      throw ioError(err, this.finalPath, 'finish writing');
    }
    const sha256 = await digest;
    if (sha256) {
      const st = await fsp.stat(this.finalPath).catch(() => undefined);
      if (st) committed.set(path.resolve(this.finalPath), { size: st.size, mtimeMs: st.mtimeMs, ino: st.ino, sha256 });
    }
  }

  async abort(): Promise<void> {
    this.hasher?.cancel();
    this.hasher = null;
    await this.flushing;
    await this.handle.close().catch(() => {});
    await fsp.rm(this.tempPath, { force: true }).catch(() => {});
    this.forget();
  }
}

/** Write a whole small file atomically. */
export async function writeFileAtomic(finalPath: string, data: string | Uint8Array): Promise<void> {
  const f = await AtomicFile.open(finalPath);
  await f.write(typeof data === 'string' ? Buffer.from(data) : data);
  await f.commit();
}

/** Make sure `dir` exists and is writable; a clear error otherwise. */
export async function ensureOutputDir(dir: string): Promise<void> {
  try {
    await mkdirs(path.resolve(dir));
    await fsp.access(dir, 2 /* W_OK */);
  } catch (err) {
    throw ioError(err, dir, 'write to output directory');
  }
}

/**
 * mkdir -p, one level at a time (each new level with `mode`, as mkdir's). Node's own `recursive: true`
 * spins forever under a parent that refuses new entries with ENOENT (any path in /proc), so a bad -o
 * would hang instead of failing.
 */
export async function mkdirs(dir: string, mode?: number): Promise<void> {
  try {
    await fsp.mkdir(dir, mode);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' && (await fsp.stat(dir)).isDirectory()) return;
    const parent = path.dirname(dir);
    if (code !== 'ENOENT' || parent === dir || (await fsp.stat(parent).then(() => true, () => false))) throw err;
    await mkdirs(parent, mode);
    await fsp.mkdir(dir, mode);
  }
}

/** Text files of an artifact, each written atomically; entries without text are skipped. Returns the names written. */
export async function writeTextFiles(dir: string, files: readonly [string, string | undefined][]): Promise<string[]> {
  const written: string[] = [];
  for (const [name, text] of files) {
    if (text === undefined) continue;
    await writeFileAtomic(path.join(dir, name), text);
    written.push(name);
  }
  return written;
}
