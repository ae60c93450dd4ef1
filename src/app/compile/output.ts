/**
 * Where a compile writes, so that no run can destroy data or leave a stale artifact:
 * - never into or over the input checkpoint, nor over a directory that holds it;
 * - a new or empty directory is written in place (a failure removes what the run added);
 * - an existing artifact (a directory with llmc-manifest.json) is replaced as a whole: the new one is
 *   built beside it and swapped in by rename, so no file of the old one survives and an interrupted
 *   run leaves the old one intact;
 * - a non-empty directory that is no llmc artifact is refused unless --force (then replaced the same way);
 * - a single-file target given `-o NAME.<ext>` writes that file, its manifest beside it as
 *   `NAME.<ext>.llmc-manifest.json`;
 * - an output named like a model file (`x.gguf`, `x.onnx`, ...) for a target that writes a directory or
 *   another kind of file is refused: it would make a directory with a file's name;
 * - one compile at a time per output (a lock file beside it: a second one is told the output is
 *   busy), and what compiles that died left there (working directories, temp files) is removed.
 */
import { existsSync, promises as fsp, readdirSync, realpathSync, rmSync } from 'node:fs';
import path from 'node:path';
import { LlmcError, UsageError } from '../../core/errors.js';
import { MANIFEST_FILE } from '../../core/records/manifest.js';
import { ensureOutputDir, ioError, writeFileAtomic } from '../../core/util/atomic.js';
import { onInterrupt } from '../../core/util/interrupt.js';
import { alive, pidLock } from '../../core/util/pid-lock.js';
import { TARGETS } from '../../../backends/index.js';
import type { TargetDescriptor } from '../../core/pipeline/target.js';

/** Model files by extension that no target's -o names as a directory: what each is. */
const MODEL_FILES: Record<string, string> = {
  '.onnx': 'an ONNX graph',
  '.safetensors': 'a safetensors file',
  '.engine': 'a TensorRT engine',
  '.plan': 'a TensorRT engine',
};

/**
 * `-o` for `target`: a name ending in another target's file extension (`x.gguf` for --target ts) or a
 * model file's (`x.onnx`) is a usage error, not a directory of that name.
 */
export function checkOutputName(out: string, target: TargetDescriptor): void {
  const ext = path.extname(out).toLowerCase();
  if (!ext || target.singleFile?.extension === ext) return;
  const other = TARGETS.find((t) => t.singleFile?.extension === ext || t.foreign?.extension === ext);
  const what = other ? `a ${other.name} file` : MODEL_FILES[ext];
  if (!what) return;
  const writes = target.singleFile ? `a directory, or one ${target.singleFile.extension} file` : 'a directory';
  throw new UsageError(`-o ${out}: ${ext} names ${what}, but --target ${target.name} writes ${writes}; give -o ${out.slice(0, -ext.length)}${other ? ` (or --target ${other.name})` : ''}`);
}

export interface Output {
  /** The directory the target writes its files into. */
  workDir: string;
  /** For a single file: its final path (the manifest lists it by its base name). */
  singleFile: string | null;
  /** Put the finished files in place with their manifest, which is always written last over whole files. */
  commit(manifest: string): Promise<void>;
  /** Undo everything this run wrote (on failure). */
  discard(): void;
  /** Stop watching for interruption (after commit, or after discard). */
  release(): void;
}

const real = (p: string) => {
  try {
    return realpathSync(p);
  } catch {
    return path.resolve(p);
  }
};

/** `inner` is `outer` or lies inside it. */
const within = (inner: string, outer: string) => inner === outer || inner.startsWith(outer.endsWith(path.sep) ? outer : outer + path.sep);

/** The deepest existing ancestor's real path, with the rest of `p` appended (for a path that may not exist yet). */
function resolvedTarget(p: string): string {
  const abs = path.resolve(p);
  let head = abs;
  const tail: string[] = [];
  while (!existsSync(head) && path.dirname(head) !== head) {
    tail.unshift(path.basename(head));
    head = path.dirname(head);
  }
  return path.join(real(head), ...tail);
}

export async function prepareOutput(out: string, opts: { inputs: readonly string[]; force: boolean; singleFile: { extension: string; file: string } | null }): Promise<Output> {
  const target = resolvedTarget(out);
  checkInputs(out, target, opts);
  const unlock = await lock(out);
  try {
    removeLeftovers(out);
    const o = await prepare(out, opts);
    return { ...o, release: () => (o.release(), unlock()), discard: o.discard };
  } catch (err) {
    unlock();
    throw err;
  }
}

function checkInputs(out: string, target: string, opts: { inputs: readonly string[]; singleFile: { extension: string } | null }): void {
  for (const input of opts.inputs) {
    const inp = real(input);
    // The input itself, or a directory holding it (a replace would remove it); a new subdirectory is fine.
    if (within(inp, target) || (opts.singleFile && path.dirname(target) === inp)) {
      throw new UsageError(`-o ${out}: the output would write into or over the input ${input}; choose another output path`);
    }
  }
}

async function prepare(out: string, opts: { force: boolean; singleFile: { extension: string; file: string } | null }): Promise<Output> {
  const stat = await fsp.stat(out).catch(() => null);

  if (opts.singleFile && out.toLowerCase().endsWith(opts.singleFile.extension)) {
    if (stat?.isDirectory()) throw new UsageError(`-o ${out} is a directory; a ${opts.singleFile.extension} output names a file`);
    const manifestPath = `${out}.${MANIFEST_FILE}`;
    if (stat && !opts.force && !existsSync(manifestPath)) {
      throw new UsageError(`-o ${out}: the file exists and is no llmc artifact (no ${path.basename(manifestPath)} beside it); pass --force to replace it`);
    }
    const parent = path.dirname(path.resolve(out));
    await ensureOutputDir(parent);
    const work = await freshSibling(out);
    const single = opts.singleFile.file;
    return watched({
      workDir: work,
      singleFile: out,
      async commit(manifest) {
        try {
          await fsp.rename(path.join(work, single), out);
        } catch (err) {
          throw ioError(err, out, 'write');
        }
        rmSync(work, { recursive: true, force: true });
        await writeFileAtomic(manifestPath, manifest);
      },
      discard: () => rmSync(work, { recursive: true, force: true }),
    });
  }

  if (stat && !stat.isDirectory()) throw new LlmcError('exists and is not a directory (give a new or existing directory as -o)', out);
  const entries = stat ? readdirSync(out) : null;
  if (!entries || entries.length === 0) {
    // New or empty: write in place; a failure removes what this run added. The marker says so to the
    // next compile when this one is killed before its manifest (files already renamed into place).
    await ensureOutputDir(out);
    const manifestPath = path.join(out, MANIFEST_FILE);
    const marker = path.join(out, `${WRITING}${process.pid}`);
    await fsp.writeFile(marker, '', { flag: 'wx' }).catch((err: unknown) => {
      throw ioError(err, out, 'write');
    });
    const discard = () => {
      if (!entries) return rmSync(out, { recursive: true, force: true });
      for (const f of readdirSafe(out)) rmSync(path.join(out, f), { recursive: true, force: true });
    };
    const commit = async (manifest: string) => {
      await writeFileAtomic(manifestPath, manifest);
      rmSync(marker, { force: true });
    };
    return watched({ workDir: out, singleFile: null, commit, discard });
  }

  const isArtifact = entries.includes(MANIFEST_FILE);
  if (!isArtifact && !opts.force) {
    throw new UsageError(`-o ${out}: the directory is not empty and holds no llmc artifact (${MANIFEST_FILE}); choose another directory, or pass --force to replace it`);
  }
  // Replace as a whole: build beside it, then swap.
  const work = await freshSibling(out);
  return watched({
    workDir: work,
    singleFile: null,
    async commit(manifest) {
      await writeFileAtomic(path.join(work, MANIFEST_FILE), manifest);
      const old = `${work}.old`;
      try {
        await fsp.rename(out, old);
        await fsp.rename(work, out);
      } catch (err) {
        if (!existsSync(out) && existsSync(old)) await fsp.rename(old, out).catch(() => {});
        throw ioError(err, out, 'replace the artifact');
      }
      rmSync(old, { recursive: true, force: true });
    },
    discard: () => rmSync(work, { recursive: true, force: true }),
  });
}

/** `.<name>.llmc-lock` beside the output (./pid-lock.ts); a lock whose process is gone is taken over. */
async function lock(out: string): Promise<() => void> {
  const parent = path.dirname(path.resolve(out));
  // Errors name the output the user gave, not its parent.
  if ((await fsp.stat(parent).catch(() => null))?.isDirectory() === false) throw new LlmcError('cannot write to output directory: a parent is not a directory', out);
  await ensureOutputDir(parent).catch((err: LlmcError) => {
    throw new LlmcError(err.message, out, err.exitCode);
  });
  const got = await pidLock(path.join(parent, `.${path.basename(out)}.llmc-lock`));
  if ('release' in got) return got.release;
  if (got.owner === process.pid) throw new LlmcError('busy: this llmc is already compiling into it; choose another output', out);
  if (got.owner > 0) throw new LlmcError(`busy: another llmc (pid ${got.owner}) is compiling into it; wait for it to finish or choose another output`, out);
  throw new LlmcError('cannot take the output lock', out);
}

/** Working directories and temp files that compiles into this output left when they died (we hold its lock). */
function removeLeftovers(out: string): void {
  const parent = path.dirname(path.resolve(out));
  const work = new RegExp(`^\\.${escapeRegExp(path.basename(out))}\\.llmc-(\\d+)(\\.old)?$`);
  for (const f of readdirSafe(parent)) {
    const m = work.exec(f);
    if (m && !alive(Number(m[1]))) rmSync(path.join(parent, f), { recursive: true, force: true });
  }
  const inside = readdirSafe(out);
  // A compile that wrote in place and died: everything there is its (the directory was empty).
  const died = inside.some((f) => f.startsWith(WRITING) && !alive(Number(f.slice(WRITING.length))));
  for (const f of inside) {
    const m = /^\..*\.(\d+)\.\d+\.tmp$/.exec(f);
    if (died || (m && !alive(Number(m[1])))) rmSync(path.join(out, f), { recursive: true, force: true });
  }
}

/** `.llmc-writing-<pid>`: in a directory a compile writes in place, until its manifest is written. */
const WRITING = '.llmc-writing-';

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

function readdirSafe(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** A new hidden directory beside `out` (same file system, so the final renames are atomic). */
async function freshSibling(out: string): Promise<string> {
  const dir = path.join(path.dirname(path.resolve(out)), `.${path.basename(out)}.llmc-${process.pid}`);
  rmSync(dir, { recursive: true, force: true });
  try {
    await fsp.mkdir(dir);
  } catch (err) {
    throw ioError(err, dir, 'create a working directory beside the output');
  }
  return dir;
}

/** Registers the discard for Ctrl-C / SIGTERM until released. */
function watched(o: Omit<Output, 'release'>): Output {
  const forget = onInterrupt(o.discard);
  return { ...o, release: () => void forget() };
}
