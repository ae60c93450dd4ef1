/**
 * `node dist/bench/read-all.js <checkpoint-dir> [into|raw|f32]`: read every tensor through the
 * Checkpoint reader, one at a time (as a backend does), and print {"tensors","bytes","ms"} as JSON.
 *   into: readRawInto one reused buffer (a streaming converter);  raw: readRaw, a fresh buffer per
 *   tensor;  f32: readF32 (decoded to float32, what passes and backends call).
 * Run as a child of the safetensors benchmark so that its peak RSS can be measured.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { openCheckpoint } from '../src/core/checkpoint/index.js';

export type ReadMode = 'into' | 'raw' | 'f32';

export async function readAll(dir: string, mode: ReadMode): Promise<{ tensors: number; bytes: number; ms: number }> {
  const ck = await openCheckpoint(dir);
  const t = performance.now();
  const reused = mode === 'into' ? new Uint8Array(Math.max(...ck.tensors.map((m) => ck.info(m.name).byteLength))) : null;
  let bytes = 0;
  // In file order: the access pattern of a converter walking the checkpoint.
  const order = [...ck.tensors].map((m) => ck.info(m.name)).sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : a.offset - b.offset));
  for (const info of order) {
    if (reused) bytes += (await ck.readRawInto(info.name, reused)).length;
    else if (mode === 'raw') bytes += (await ck.readRaw(info.name)).length;
    else {
      await ck.readF32(info.name);
      bytes += info.byteLength;
    }
  }
  const ms = performance.now() - t;
  await ck.close();
  return { tensors: order.length, bytes, ms };
}

const [, script, dir, mode = 'raw'] = process.argv;
if (script && fileURLToPath(import.meta.url) === path.resolve(script)) {
  if (!dir) throw new Error('usage: read-all.js <checkpoint-dir> [raw|f32]');
  if (mode !== 'into' && mode !== 'raw' && mode !== 'f32') throw new Error(`mode must be into, raw or f32, got ${mode}`);
  process.stdout.write(JSON.stringify(await readAll(dir, mode)) + '\n');
}
