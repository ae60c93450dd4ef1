/**
 * `node dist/bench/chunk-rss.js <cuda artifact> <c> <P> <shared|naive|whole>`: prefill a P-token
 * prompt of a cuda artifact compiled with chunk-partition and print {"vmHwmKiB", "lastLogit"}: the
 * process's own peak resident set (VmHWM). shared: the chunk graphs as shipped (static graphs once,
 * an attention graph per chunk index); naive: one graph set per chunk, the N = ⌈P/c⌉ sets resident
 * at once (each opens its own static graphs: their weights N times), the prompt run through the
 * first; whole: onnx/model.onnx over the whole prompt.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { chunkGraphFile } from '../backends/cuda/chunks.js';
import { CHUNK_SCHEDULE, findRecord } from '../src/core/records/index.js';
import { OrtChunkPrefill } from '../src/exec/engine/chunks.js';
import { OnnxDecoder } from '../src/exec/engine/decoder-dir.js';

const [dir, cArg, pArg, mode] = process.argv.slice(2);
const c = Number(cArg);
const P = Number(pArg);
const manifest = JSON.parse(readFileSync(path.join(dir, 'llmc-manifest.json'), 'utf8'));
const rec = findRecord(manifest.passes, CHUNK_SCHEDULE)!;
const spec = manifest.arch as { vocabSize: number };
const cfg = JSON.parse(readFileSync(path.join(dir, 'config.json'), 'utf8'));
const heads = cfg.num_attention_heads as number;
const dims = { kvHeads: (cfg.num_key_value_heads ?? heads) as number, headDim: (cfg.head_dim ?? cfg.hidden_size / heads) as number, vocab: cfg.vocab_size as number, maxPositions: cfg.max_position_embeddings as number };
const ids = Array.from({ length: P }, (_, t) => ((t * 31 + 7) % (dims.vocab - 1)) + 1);
const N = Math.ceil(P / c);
let last: number;
if (mode === 'whole') {
  const d = await OnnxDecoder.open(path.join(dir, 'onnx/model.onnx'), { threads: 1 });
  const l = await d.logits(ids);
  last = l[l.length - 1];
  await d.close();
} else {
  const sets: OrtChunkPrefill[] = [];
  for (let k = 0; k < (mode === 'naive' ? N : 1); k++) sets.push(await OrtChunkPrefill.open(c, rec.subgraphs, N, async (name) => path.join(dir, chunkGraphFile(c, name)), dims, { threads: 1 }));
  const r = await sets[0].prefill(ids, Int32Array.from({ length: N * rec.subgraphs.length }, (_, t) => t), undefined, 'last');
  last = r.logits[r.logits.length - 1];
  for (const s of sets) await s.close();
}
void spec;
const hwm = Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1]);
process.stdout.write(JSON.stringify({ vmHwmKiB: hwm, lastLogit: last }) + '\n');
