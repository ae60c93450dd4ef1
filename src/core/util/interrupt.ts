/**
 * What a run must undo if it is interrupted (Ctrl-C, SIGTERM): temp files being written, output
 * directories it created. Clean-ups are synchronous: they run in the signal handler, right before
 * the process exits. Only the CLI installs the handlers; as a library llmc leaves signals alone.
 */
const cleanups = new Set<() => void>();

/** Registers `fn` to run on interruption; returns the function that unregisters it. */
export function onInterrupt(fn: () => void): () => void {
  cleanups.add(fn);
  return () => cleanups.delete(fn);
}

let installed = false;

/** On SIGINT / SIGTERM: run the clean-ups (newest first), say so in one line, exit 130 / 143. Idempotent. */
export function installInterruptHandlers(): void {
  if (installed) return;
  installed = true;
  for (const [signal, code] of [['SIGINT', 130], ['SIGTERM', 143]] as const) {
    process.once(signal, () => {
      const pending = [...cleanups].reverse();
      for (const fn of pending) {
        try {
          fn();
        } catch {
          // best effort: the process is going down anyway
        }
      }
      process.stderr.write(`\nllmc: interrupted${pending.length ? '; removed the partial output' : ''}\n`);
      process.exit(code);
    });
  }
}

/**
 * Lets the event loop turn (signals, I/O, worker and test-runner messages) inside long work that
 * only awaits already-settled promises: those resume as microtasks, which never give the loop a
 * turn, so Ctrl-C would wait for the work's end. A macrotask does.
 */
export const letEventLoopTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
