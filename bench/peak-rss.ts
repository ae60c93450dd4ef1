/**
 * `node dist/bench/peak-rss.js <script> [args...]`: runs <script> (an ES module) in this process
 * as if it had been started directly, and when the process exits writes
 * {"maxRssKiB": process.resourceUsage().maxRSS} to the file named by $LLMC_PEAK_RSS_OUT.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const out = process.env.LLMC_PEAK_RSS_OUT;
const [script, ...args] = process.argv.slice(2);
if (!script || !out) {
  process.stderr.write('usage: LLMC_PEAK_RSS_OUT=file node peak-rss.js <script> [args...]\n');
  process.exit(2);
}
process.on('exit', () => writeFileSync(out, JSON.stringify({ maxRssKiB: process.resourceUsage().maxRSS })));
const abs = path.resolve(script);
process.argv = [process.argv[0], abs, ...args];
await import(pathToFileURL(abs).href);
