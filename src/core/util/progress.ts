/**
 * Progress on long work: a one-line bar on a TTY stderr, nothing in CI or when piped
 * (so --json output and logs stay clean).
 */
export interface Progress {
  /** Start a task of `total` units (bytes, tensors, tokens). */
  start(label: string, total: number): void;
  tick(units?: number): void;
  /** Where the task is, in words ("block 7/22 · 41 s left"): shown in place of the bar's own time estimate. */
  status?(text: string): void;
  done(): void;
}

export const silentProgress: Progress = { start() {}, tick() {}, done() {} };

export function progressEnabled(): boolean {
  return Boolean(process.stderr.isTTY) && !process.env.CI && !process.env.LLMC_NO_PROGRESS;
}

export function createProgress(enabled = progressEnabled()): Progress {
  if (!enabled) return silentProgress;
  let label = '';
  let total = 1;
  let done = 0;
  let t0 = 0;
  let last = 0;
  let status = '';
  const draw = (force = false) => {
    const now = Date.now();
    if (!force && now - last < 100) return;
    last = now;
    const frac = Math.min(1, done / total);
    const width = 28;
    const bar = '█'.repeat(Math.round(frac * width)).padEnd(width, '·');
    const secs = (now - t0) / 1000;
    const eta = frac > 0 && frac < 1 ? ` eta ${((secs / frac) * (1 - frac)).toFixed(0)}s` : '';
    process.stderr.write(`\r${label} ${bar} ${(frac * 100).toFixed(0).padStart(3)}% ${status || `${secs.toFixed(1)}s${eta}`}\x1b[K`);
  };
  return {
    start(l, t) {
      label = l;
      total = Math.max(1, t);
      done = 0;
      status = '';
      t0 = Date.now();
      draw(true);
    },
    tick(units = 1) {
      done += units;
      draw();
    },
    status(text) {
      status = text;
      draw(true);
    },
    done() {
      done = total;
      draw(true);
      process.stderr.write('\n');
    },
  };
}
