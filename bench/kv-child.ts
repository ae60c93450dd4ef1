/**
 * bench/kv-types.ts's memory child, kept to the runtime's own imports (the bench's module graph —
 * compiler, fixtures, tokenizer — would count in its VmHWM): `node dist/bench/kv-child.js <ts
 * artifact> <f32|f16|q8_0> <tokens> [node-default]` decodes `tokens` greedily after BOS and prints its VmHWM, the
 * bytes of a cache of those positions and its tokens/s as one JSON line.
 */
import { readFileSync } from 'node:fs';
import type { KvType } from '../src/core/pipeline/target.js';
import { holdYoungGeneration, loadDir } from '../src/exec/runtime/node.js';

const [dir, type, n, gc] = process.argv.slice(2);
// As `llmc run` starts; `node-default` keeps V8's own young-generation sizing (for the bench's comparison row).
if (gc !== 'node-default') holdYoungGeneration();
const model = await loadDir(dir);
const t = performance.now();
let count = 0;
for await (const _ of model.generate([0], { maxTokens: Number(n), stopTokens: [], kvType: type as KvType })) count++;
const ms = performance.now() - t;
const hwm = Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1]);
// The bytes of a cache of the decoded positions (measured after VmHWM: it allocates).
const cache = model.newCache(type as KvType);
cache.reserve(Number(n) + 1);
process.stdout.write(JSON.stringify({ vmHwmKiB: hwm, kvBytes: cache.bytes, tokPerSec: (count * 1000) / ms }) + '\n');
process.exit(0);
