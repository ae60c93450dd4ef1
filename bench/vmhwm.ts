/** This process's own peak resident set in KiB (VmHWM of /proc/self/status); maxRSS where /proc is absent. */
import { readFileSync } from 'node:fs';

export function vmHwmKiB(): number {
  try {
    const m = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync('/proc/self/status', 'utf8'));
    if (m) return Number(m[1]);
  } catch {
    /* not Linux */
  }
  return process.resourceUsage().maxRSS;
}
