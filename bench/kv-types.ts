/**
 * `node dist/bench/kv-types.js <ts artifact> <held-out text> [windows] [decode tokens]`: the cost of
 * keeping the TS runtime's KV cache as f16 or q8_0 (`llmc run --kv-type`), written to
 * bench/out/kv-types.json:
 *  - quality: perplexity of the held-out text (windows of 256 tokens, teacher-forced through the
 *    cache) per type, and the paired per-window difference of mean NLL against f32 with its 95%
 *    interval (t ≈ 1.96 · sd / √n over windows);
 *  - memory: per type a child process decodes `decode tokens` greedily after BOS and reports its
 *    VmHWM, beside weights + KV cache + 64 MB (issue 34 item 5's bound).
 * `... --child <type> <tokens>` is the child.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { loadTokenizer } from '../src/core/tokenizer/index.js';
import type { KvType } from '../src/core/pipeline/target.js';
import { loadDir } from '../src/exec/runtime/node.js';

const TYPES: KvType[] = ['f32', 'f16', 'q8_0'];
const args = process.argv.slice(2);

if (args[1] === '--child') {
  const [dir, , type, n] = args;
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
}

const [dir, textFile, windowsArg = '24', decodeArg = '1000'] = args;
const model = await loadDir(dir);
const tok = loadTokenizer(readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
const ids = tok.encode(readFileSync(textFile, 'utf8'));
const W = 256;
const nWin = Math.min(Number(windowsArg), Math.floor(ids.length / W));
const V = model.spec.vocabSize;
const nll: Record<string, number[]> = {};
for (const type of TYPES) {
  nll[type] = [];
  for (let w = 0; w < nWin; w++) {
    const x = ids.slice(w * W, (w + 1) * W);
    const logits = model.forward(x, model.newCache(type));
    let s = 0;
    for (let t = 0; t + 1 < W; t++) {
      const row = logits.subarray(t * V, (t + 1) * V);
      let m = -Infinity;
      for (let i = 0; i < V; i++) m = Math.max(m, row[i]);
      let z = 0;
      for (let i = 0; i < V; i++) z += Math.exp(row[i] - m);
      s += m + Math.log(z) - row[x[t + 1]];
    }
    nll[type].push(s / (W - 1));
  }
}
const mean = (a: number[]) => a.reduce((x, y) => x + y, 0) / a.length;
const quality = Object.fromEntries(
  TYPES.map((type) => {
    const d = nll[type].map((x, i) => x - nll.f32[i]);
    const md = mean(d);
    const sd = Math.sqrt(d.reduce((s, x) => s + (x - md) ** 2, 0) / Math.max(1, d.length - 1));
    return [type, { perplexity: Math.exp(mean(nll[type])), deltaNll: md, deltaNll95: (1.96 * sd) / Math.sqrt(d.length), perplexityRatio: Math.exp(md) }];
  }),
);
const weightsBytes = statSync(path.join(dir, 'weights.bin')).size;
const self = new URL(import.meta.url).pathname;
const memory = Object.fromEntries(
  TYPES.map((type) => {
    const r = JSON.parse(execFileSync(process.execPath, [self, dir, '--child', type, decodeArg], { encoding: 'utf8', maxBuffer: 1 << 20 })) as { vmHwmKiB: number; kvBytes: number; tokPerSec: number };
    const boundKiB = (weightsBytes + r.kvBytes + 64 * 2 ** 20) / 1024;
    return [type, { ...r, weightsBytes, boundKiB: Math.round(boundKiB), withinBound: r.vmHwmKiB <= boundKiB }];
  }),
);
const result = { artifact: dir, text: textFile, windows: nWin, windowTokens: W, decodeTokens: Number(decodeArg), quality, memory };
mkdirSync('bench/out', { recursive: true });
writeFileSync('bench/out/kv-types.json', JSON.stringify(result, null, 2) + '\n');
process.stdout.write(JSON.stringify(result, null, 2) + '\n');
