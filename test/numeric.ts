/** Error measures the tests compare logits with, and the reference logits they compare against. */
import { readFileSync } from 'node:fs';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { Engine } from '../src/exec/engine/index.js';

/** max |a − b| / max |b| over the whole array. */
export function relErr(a: Float32Array, b: Float32Array): number {
  let e = 0;
  let m = 0;
  for (let i = 0; i < b.length; i++) {
    e = Math.max(e, Math.abs(a[i] - b[i]));
    m = Math.max(m, Math.abs(b[i]));
  }
  return e / m;
}

/** max |a − b| over a row, relative to the row's largest |b|; the worst row. `a` is [T, V] flat. */
export function maxRelError(a: Float32Array, rows: Float64Array[]): number {
  const V = rows[0].length;
  let worst = 0;
  rows.forEach((b, t) => {
    let scale = 0;
    let err = 0;
    for (let i = 0; i < V; i++) {
      scale = Math.max(scale, Math.abs(b[i]));
      err = Math.max(err, Math.abs(a[t * V + i] - b[i]));
    }
    worst = Math.max(worst, err / scale);
  });
  return worst;
}

/** The worst position's max |a − b| / max |b| (each position's row on its own scale; `a`, `b` are [T, V] flat). */
export function worstRowError(a: Float32Array, b: Float32Array, V: number): number {
  let worst = 0;
  for (let r = 0; r * V < b.length; r++) {
    let e = 0;
    let m = 0;
    for (let i = r * V; i < (r + 1) * V; i++) {
      e = Math.max(e, Math.abs(a[i] - b[i]));
      m = Math.max(m, Math.abs(b[i]));
    }
    worst = Math.max(worst, e / m);
  }
  return worst;
}

/** reference_logits.safetensors (../shared/models/archs): one float32 tensor [positions, vocab]. */
export function referenceLogits(file: string): { data: Float32Array; shape: number[] } {
  const buf = readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  const [name] = Object.keys(header).filter((k) => k !== '__metadata__');
  const t = header[name];
  if (t.dtype !== 'F32') throw new Error(`${file}: ${name} is ${t.dtype}, not F32`);
  const bytes = buf.subarray(8 + n + t.data_offsets[0], 8 + n + t.data_offsets[1]);
  return { data: new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength)), shape: t.shape };
}

/** A checkpoint directory's float32 logits for `ids` on llmc's onnxruntime engine (one thread). */
export async function checkpointLogits(dir: string, ids: number[]): Promise<Float32Array> {
  const ck = await openCheckpoint(dir);
  const e = await Engine.open(ck, { threads: 1 });
  try {
    return await e.logits(ids);
  } finally {
    await e.close();
    await ck.close();
  }
}
