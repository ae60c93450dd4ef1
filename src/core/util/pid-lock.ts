/**
 * A lock file holding the owner's pid, created exclusively: one llmc at a time writes an output or a
 * cache entry; a lock whose process is gone (killed, crashed) is taken over. Node only.
 */
import { promises as fsp, rmSync } from 'node:fs';
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

/** The lock taken (its release), or the pid of the live llmc that holds it. */
export async function pidLock(file: string): Promise<{ release: () => void } | { owner: number }> {
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const h = await fsp.open(file, 'wx');
      await h.writeFile(String(process.pid));
      await h.close();
      const forget = onInterrupt(() => rmSync(file, { force: true }));
      return {
        release: () => {
          forget();
          rmSync(file, { force: true });
        },
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw ioError(err, file, 'create the lock');
      const owner = Number(await fsp.readFile(file, 'utf8').catch(() => ''));
      if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && alive(owner)) return { owner };
      rmSync(file, { force: true }); // its process died
    }
  }
  return { owner: -1 };
}
