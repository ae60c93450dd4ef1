/**
 * `node dist/bench/expert-rss.js <ts artifact> <capacity|resident> <tokens>`: load the artifact
 * (experts offloaded to a cache of `capacity`, or fully resident), generate greedily from BOS, and
 * print {"vmHwmKiB", "ids", "tokPerSec"} — the process's own peak resident set (VmHWM from
 * /proc/self/status), for the experts bench.
 */
import { readFileSync } from 'node:fs';
import { loadDir } from '../src/exec/runtime/node.js';

const [dir, cap, n] = process.argv.slice(2);
const experts = cap === 'resident' ? undefined : { capacity: Number(cap), policy: 'lru' as const, preload: 0 };
const model = await loadDir(dir, { experts });
const ids: number[] = [];
const t = performance.now();
for await (const id of model.generate([1], { maxTokens: Number(n), stopTokens: [] })) ids.push(id);
const tokPerSec = ids.length / ((performance.now() - t) / 1000);
await model.close();
const hwm = Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1]);
process.stdout.write(JSON.stringify({ vmHwmKiB: hwm, ids, tokPerSec }) + '\n');
