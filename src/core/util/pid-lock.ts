/**
 * A lock file holding the owner's pid, created exclusively: one llmc at a time writes an output or a
 * cache entry; a lock whose process is gone (killed, crashed) is taken over. Node only.
 *
 * A lock this process holds is busy to it too (two compiles into one output in one process), and a
 * release removes only the lock file this holder created: if another llmc took it over meanwhile
 * (this one was judged dead, say), that llmc's lock stays.
 */
import { linkSync, promises as fsp, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';
import { ioError } from './atomic.js';
import { onInterrupt } from './interrupt.js';

/** The process `pid` runs (EPERM: it runs as another user). */
export const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/** Lock files this process holds: path → the inode of the file it created. */
const held = new Map<string, number>();

const readOwner = (file: string): string | null => {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return null;
  }
};

/** The lock file at `file` is the one this holder created (same inode, our pid). */
function ours(file: string, ino: number): boolean {
  try {
    return statSync(file).ino === ino && readOwner(file) === String(process.pid);
  } catch {
    return false;
  }
}

/**
 * Moves a dead owner's lock out of the way. Only the file judged dead goes: it is renamed aside
 * first, and if what was renamed is no longer that file (another llmc took the lock over between the
 * look and the rename), it is put back and that llmc is the owner (or, while its pid is still
 * unwritten, the caller looks again).
 */
function takeOver(file: string, judged: string): { owner: number } | null {
  const aside = `${file}.${process.pid}.stale`;
  try {
    renameSync(file, aside);
  } catch {
    return null; // gone already: try to create it again
  }
  const got = readOwner(aside);
  if (got === judged) {
    rmSync(aside, { force: true });
    return null;
  }
  try {
    linkSync(aside, file); // put back, unless yet another lock was created meanwhile
  } catch {
    /* a newer lock is there: it decides */
  }
  rmSync(aside, { force: true });
  // An empty lock is one whose creator has not yet written its pid: look again (the caller waits for it).
  const owner = Number(got);
  return got && Number.isInteger(owner) && owner > 0 ? { owner } : null;
}

/** The lock taken (its release), or the pid of the live llmc that holds it (this process's own pid if it holds it). */
export async function pidLock(file: string): Promise<{ release: () => void } | { owner: number }> {
  const key = path.resolve(file);
  for (let attempt = 0; attempt < 6; attempt++) {
    try {
      const h = await fsp.open(file, 'wx');
      let ino: number;
      try {
        await h.writeFile(String(process.pid));
        ino = (await h.stat()).ino;
      } finally {
        await h.close();
      }
      held.set(key, ino);
      const drop = () => {
        if (held.get(key) === ino) held.delete(key);
        if (ours(file, ino)) rmSync(file, { force: true });
      };
      const forget = onInterrupt(drop);
      return {
        release: () => {
          forget();
          drop();
        },
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw ioError(err, file, 'create the lock');
      const text = readOwner(file);
      if (text === null) continue; // released meanwhile
      // Empty: its creator is between the exclusive open and writing its pid; give it a moment.
      if (text === '' && attempt < 4) {
        await new Promise((r) => setTimeout(r, 25));
        continue;
      }
      const owner = Number(text);
      // Ours: held by this process (busy), or left by an earlier process that had our pid (dead).
      if (owner === process.pid && held.has(key)) return { owner };
      if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && alive(owner)) return { owner };
      const other = takeOver(file, text);
      if (other) return other;
    }
  }
  return { owner: -1 };
}
