/**
 * `node dist/bench/peak-rss.js <script> [args...]`: runs <script> (an ES module) in this process
 * as if it had been started directly, and when the process exits writes {"vmHwmKiB", "cpuMs"} — its
 * own peak resident set (VmHWM of /proc/self/status) and CPU time (user + system, all its threads) —
 * to the file named by $LLMC_PEAK_RSS_OUT.
 * Not process.resourceUsage().maxRSS: for a forked child that includes the parent's RSS at the fork
 * (a do-nothing child of a 576 MB parent reports 576 MB while its VmHWM is 40 MB).
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { vmHwmKiB } from './vmhwm.js';

const out = process.env.LLMC_PEAK_RSS_OUT;
const [script, ...args] = process.argv.slice(2);
if (!script || !out) {
  process.stderr.write('usage: LLMC_PEAK_RSS_OUT=file node peak-rss.js <script> [args...]\n');
  process.exit(2);
}
export { vmHwmKiB };
process.on('exit', () => {
  const cpu = process.cpuUsage();
  writeFileSync(out, JSON.stringify({ vmHwmKiB: vmHwmKiB(), cpuMs: (cpu.user + cpu.system) / 1000 }));
});
const abs = path.resolve(script);
process.argv = [process.argv[0], abs, ...args];
await import(pathToFileURL(abs).href);
