/**
 * Memory by phase, for measuring (bench/, docs/lab/scale-history.md): with LLMC_PHASE_RSS set, one
 * stderr line per phase with the resident set now and its peak so far (Linux's VmHWM), in GB (10⁹ bytes).
 */
import { readFileSync } from 'node:fs';

export function phaseRss(phase: string): void {
  if (!process.env.LLMC_PHASE_RSS) return;
  let hwm = '?';
  try {
    hwm = `${((Number(/VmHWM:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1]) * 1024) / 1e9).toFixed(2)} GB`;
  } catch {
    // not Linux: the resident set alone
  }
  process.stderr.write(`phase-rss ${phase}: rss ${(process.memoryUsage().rss / 1e9).toFixed(2)} GB, peak ${hwm}\n`);
}
