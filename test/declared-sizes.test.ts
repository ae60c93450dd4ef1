/**
 * Declared sizes are checked against the file's real size before anything is allocated: a
 * safetensors or GGUF file that declares huge counts (tensors, metadata entries, array lengths,
 * string lengths, dimensions, a header length) is refused in one line, and the child process that
 * read it peaks under 200 MB of RSS (measured by the kernel: getrusage's maxrss).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt } from './build-once.js';

const ROOT = path.resolve(__dirname, '..');
let tmp: string;
beforeAll(() => {
  ensureBuilt();
  tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-declared-'));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** Reads `file` in a child as llmc does; its one-line rejection and peak RSS in MB. */
async function readInChild(kind: 'gguf' | 'checkpoint', file: string): Promise<{ message: string | null; crash: string | null; peakMb: number }> {
  const script = `
    const { LlmcError } = await import(${JSON.stringify(path.join(ROOT, 'dist/src/core/errors.js'))});
    let message = null, crash = null;
    try {
      if (${JSON.stringify(kind)} === 'gguf') {
        const { readGgufHeader } = await import(${JSON.stringify(path.join(ROOT, 'dist/backends/gguf/read.js'))});
        await readGgufHeader(${JSON.stringify(file)});
      } else {
        const { openCheckpoint } = await import(${JSON.stringify(path.join(ROOT, 'dist/src/core/checkpoint/checkpoint.js'))});
        const ck = await openCheckpoint(${JSON.stringify(file)});
        for (const t of ck.tensors) await ck.readF32(t.name);
        await ck.close();
      }
    } catch (e) {
      if (e instanceof LlmcError) message = e.message; else crash = String(e && e.message);
    }
    process.stdout.write(JSON.stringify({ message, crash, peakMb: process.resourceUsage().maxRSS / 1024 }));`;
  const { stdout } = await promisify(execFile)('node', ['--input-type=module', '-e', script], { maxBuffer: 1 << 20 });
  return JSON.parse(stdout);
}

// --- GGUF v3, written by hand (ggml's gguf.c layout) ---
const u32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
};
const u64 = (n: bigint) => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(n);
  return b;
};
const str = (s: string, len = BigInt(Buffer.byteLength(s))) => Buffer.concat([u64(len), Buffer.from(s)]);
const GGUF_STRING = 8;
const GGUF_ARRAY = 9;
const GGUF_U32 = 4;
const kvU32 = (k: string, v: number) => Buffer.concat([str(k), u32(GGUF_U32), u32(v)]);
const gguf = (tensors: bigint, kvs: bigint, body: Buffer[]) => Buffer.concat([Buffer.from('GGUF'), u32(3), u64(tensors), u64(kvs), ...body, Buffer.alloc(4096)]);
const tensorInfo = (name: string, dims: bigint[], type = 0, offset = 0n) => Buffer.concat([str(name), u32(dims.length), ...dims.map(u64), u32(type), u64(offset)]);

const GGUF_CASES: [string, Buffer, RegExp][] = [
  ['2^40 tensors', gguf(2n ** 40n, 0n, []), /tensor count|more than the file can hold/],
  ['2^40 metadata entries', gguf(0n, 2n ** 40n, []), /more than the file can hold/],
  ['a key of 2^40 bytes', gguf(0n, 1n, [str('k', 2n ** 40n)]), /runs past the end|more than the file can hold/],
  ['a string value of 2^33 bytes', gguf(0n, 1n, [str('general.name'), u32(GGUF_STRING), u64(2n ** 33n)]), /runs past the end|more than the file can hold/],
  ['an array of 2^31 strings', gguf(0n, 1n, [str('tokenizer.ggml.tokens'), u32(GGUF_ARRAY), u32(GGUF_STRING), u64(2n ** 31n)]), /more than the file can hold|runs past the end/],
  ['an array of 2^62 u32', gguf(0n, 1n, [str('x.y'), u32(GGUF_ARRAY), u32(GGUF_U32), u64(2n ** 62n)]), /more than the file can hold|runs past the end/],
  ['a tensor of 2^31 x 2^31 floats', gguf(1n, 1n, [kvU32('general.alignment', 32), tensorInfo('w', [2n ** 31n, 2n ** 31n])]), /runs past the end|more than the file can hold/],
];

/** safetensors: an 8-byte header length, the JSON header, the data. */
const safetensors = (header: unknown, data = Buffer.alloc(64), lenLie?: bigint) => {
  const h = Buffer.from(JSON.stringify(header));
  return Buffer.concat([u64(lenLie ?? BigInt(h.length)), h, data]);
};
const CONFIG = JSON.stringify({ model_type: 'llama', architectures: ['LlamaForCausalLM'], hidden_size: 8, intermediate_size: 16, num_hidden_layers: 1, num_attention_heads: 2, num_key_value_heads: 2, vocab_size: 16, max_position_embeddings: 32, rms_norm_eps: 1e-5 });

const ST_CASES: [string, Buffer, RegExp][] = [
  ['a header length of 2^40', safetensors({}, Buffer.alloc(64), 2n ** 40n), /exceeds the file/],
  ['a tensor of 2^20 x 2^20 floats in 64 bytes', safetensors({ 'model.embed_tokens.weight': { dtype: 'F32', shape: [2 ** 20, 2 ** 20], data_offsets: [0, 2 ** 42] } }), /runs past the end of the file/],
  ['a shape whose product overflows 2^53', safetensors({ 'model.embed_tokens.weight': { dtype: 'F32', shape: [2 ** 30, 2 ** 30, 2 ** 30], data_offsets: [0, 64] } }), /has 64 bytes but shape/],
];

describe('declared sizes against the file, before allocation (peak RSS < 200 MB in a child)', () => {
  it.each(GGUF_CASES)('GGUF: %s', async (_w, bytes, match) => {
    const f = path.join(tmp, `g${Math.random().toString(36).slice(2)}.gguf`);
    writeFileSync(f, bytes);
    const r = await readInChild('gguf', f);
    expect(r.crash).toBeNull();
    expect(r.message).toMatch(match);
    expect(r.message!.split('\n')).toHaveLength(1);
    expect(r.peakMb).toBeLessThan(200);
  }, 30_000);

  it.each(ST_CASES)('safetensors: %s', async (_w, bytes, match) => {
    const d = mkdtempSync(path.join(tmp, 'st-'));
    writeFileSync(path.join(d, 'config.json'), CONFIG);
    writeFileSync(path.join(d, 'model.safetensors'), bytes);
    const r = await readInChild('checkpoint', d);
    expect(r.crash).toBeNull();
    expect(r.message).toMatch(match);
    expect(r.message!.split('\n')).toHaveLength(1);
    expect(r.peakMb).toBeLessThan(200);
  }, 30_000);
});
