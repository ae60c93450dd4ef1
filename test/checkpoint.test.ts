/**
 * The checkpoint reader: values decoded exactly (F32 against raw Buffer reads at offsets computed
 * here from the header, F16/BF16 against hand-computed bit patterns), sharded layouts, header
 * validation, and config/shape checks.
 */
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { LlmcError } from '../src/core/errors.js';
import { openCheckpoint, SafetensorsFile, writeSafetensors } from '../src/core/checkpoint/index.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
beforeAll(() => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-checkpoint-'));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** Parse a safetensors header independently of the reader. */
function rawHeader(file: string) {
  const buf = readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  return { buf, dataStart: 8 + n, header: JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, any> };
}

/** A safetensors file from a header object and raw data bytes, written by hand. */
function handMade(name: string, header: Record<string, unknown>, data: Buffer, lengthOverride?: bigint): string {
  const json = Buffer.from(JSON.stringify(header));
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(lengthOverride ?? BigInt(json.length));
  const file = path.join(tmp, name);
  writeFileSync(file, Buffer.concat([len, json, data]));
  return file;
}

async function openError(file: string): Promise<LlmcError> {
  try {
    await SafetensorsFile.open(file);
  } catch (e) {
    expect(e).toBeInstanceOf(LlmcError);
    expect((e as LlmcError).file).toBe(file);
    return e as LlmcError;
  }
  throw new Error('expected an error');
}

describe('values', () => {
  it('stories260K F32 values equal raw little-endian reads at computed offsets', async () => {
    const file = path.join(STORIES, 'model.safetensors');
    const { buf, dataStart, header } = rawHeader(file);
    const ck = await openCheckpoint(STORIES);
    for (const name of ['model.embed_tokens.weight', 'model.layers.3.mlp.down_proj.weight', 'model.norm.weight', 'model.layers.0.self_attn.k_proj.weight']) {
      const h = header[name];
      const values = await ck.readF32(name);
      const n = (h.data_offsets[1] - h.data_offsets[0]) / 4;
      expect(values.length).toBe(n);
      for (const i of [0, 1, 7, Math.floor(n / 3), n - 2, n - 1]) {
        expect(values[i]).toBe(buf.readFloatLE(dataStart + h.data_offsets[0] + 4 * i));
      }
    }
    expect(ck.spec).toMatchObject({ modelType: 'llama', hiddenSize: 64, numLayers: 5, numHeads: 8, numKvHeads: 4, headDim: 8, vocabSize: 512, tieEmbeddings: true });
    expect(ck.tensors).toHaveLength(47);
    await ck.close();
  });

  it('F16 and BF16 bit patterns decode to their exact values', async () => {
    // [bits, value] pairs worked out by hand from the IEEE layouts.
    const f16: [number, number][] = [
      [0x3c00, 1], [0xc000, -2], [0x7bff, 65504], [0x0001, 2 ** -24], [0x03ff, 1023 * 2 ** -24],
      [0x8000, -0], [0x7c00, Infinity], [0xfc00, -Infinity], [0x3555, (1 + 0x155 / 1024) / 4], [0x0400, 2 ** -14],
    ];
    const bf16: [number, number][] = [
      [0x3f80, 1], [0x4049, 3.140625], [0xc2f7, -123.5], [0x0001, 2 ** -133], [0x7f7f, (2 - 2 ** -7) * 2 ** 127], [0x8000, -0], [0x7f80, Infinity],
    ];
    const u16 = (pairs: [number, number][]) => {
      const b = Buffer.alloc(2 * pairs.length);
      pairs.forEach(([bits], i) => b.writeUInt16LE(bits, 2 * i));
      return b;
    };
    const file = path.join(tmp, 'halves.safetensors');
    await writeSafetensors(file, [
      { name: 'h', dtype: 'F16', shape: [f16.length], bytes: () => u16(f16) },
      { name: 'b', dtype: 'BF16', shape: [bf16.length], bytes: () => u16(bf16) },
    ]);
    const st = await SafetensorsFile.open(file);
    const { toF32 } = await import('../src/core/checkpoint/safetensors.js');
    const h = toF32(await st.readRaw(st.tensors.get('h')!), 'F16', 'h');
    const b = toF32(await st.readRaw(st.tensors.get('b')!), 'BF16', 'b');
    expect(Array.from(h)).toEqual(f16.map(([, v]) => v));
    expect(Array.from(b)).toEqual(bf16.map(([, v]) => v));
    expect(Object.is(h[5], -0)).toBe(true);
    await st.close();
  });

  it('writeSafetensors lays out files as the reference writer: 8-byte padded header, metadata, dtype-size then name order', async () => {
    const file = path.join(tmp, 'layout.safetensors');
    await writeSafetensors(file, [
      { name: 'z', dtype: 'F32', shape: [2], bytes: () => new Uint8Array(8) },
      { name: 'a', dtype: 'F16', shape: [3], bytes: () => new Uint8Array(6) },
      { name: 'b', dtype: 'F32', shape: [1], bytes: () => new Uint8Array(4) },
    ]);
    const { buf, dataStart, header } = rawHeader(file);
    expect(dataStart % 8).toBe(0);
    expect(header.__metadata__).toEqual({ format: 'pt' });
    expect(header.b.data_offsets).toEqual([0, 4]);
    expect(header.z.data_offsets).toEqual([4, 12]);
    expect(header.a.data_offsets).toEqual([12, 18]);
    expect(buf.length).toBe(dataStart + 18);
  });

  it('writeSafetensors leaves nothing behind when a producer fails', async () => {
    const dir = mkdtempSync(path.join(tmp, 'fail-'));
    const file = path.join(dir, 'x.safetensors');
    const write = writeSafetensors(file, [
      { name: 'a', dtype: 'F32', shape: [1], bytes: () => new Uint8Array(4) },
      { name: 'b', dtype: 'F32', shape: [1], bytes: () => { throw new LlmcError('producer failed'); } },
    ]);
    await expect(write).rejects.toThrow('producer failed');
    await expect(writeSafetensors(file, [{ name: 'c', dtype: 'F32', shape: [2], bytes: () => new Uint8Array(4) }])).rejects.toThrow(/produced 4 bytes, shape needs 8/);
    expect(readdirSync(dir)).toEqual([]);
  });

  it('sharded BF16 and single F32 checkpoints of the same seed agree after rounding; identity is content-based', async () => {
    const one = await generateFixture(path.join(tmp, 'one'), { arch: 'qwen2', tokenizer: 'none', seed: 5 });
    const two = await generateFixture(path.join(tmp, 'two'), { arch: 'qwen2', tokenizer: 'none', seed: 5, shards: 2, dtype: 'BF16' });
    const a = await openCheckpoint(one.dir);
    const b = await openCheckpoint(two.dir);
    expect(b.files).toHaveLength(2);
    for (const t of a.tensors) {
      const x = await a.readF32(t.name);
      const y = await b.readF32(t.name);
      // BF16 keeps the top 16 bits, rounded to nearest even: |error| ≤ 2^-8 relative.
      let bad = 0;
      for (let i = 0; i < x.length; i++) if (!(Math.abs(y[i] - x[i]) <= Math.abs(x[i]) * 2 ** -8)) bad++;
      expect(bad).toBe(0);
      const raw = await b.readRaw(t.name);
      const { header, buf, dataStart } = rawHeader(b.info(t.name).file);
      const off = dataStart + header[t.name].data_offsets[0];
      expect(raw.equals(buf.subarray(off, off + raw.length))).toBe(true);
    }
    const copyDir = path.join(tmp, 'one-copy');
    cpSync(one.dir, copyDir, { recursive: true });
    const c = await openCheckpoint(copyDir);
    expect(await c.identity()).toBe(await a.identity());
    expect(await b.identity()).not.toBe(await a.identity());
    await Promise.all([a.close(), b.close(), c.close()]);
  });
});

describe('header validation', () => {
  const f32 = (n: number) => Buffer.alloc(4 * n);
  it('rejects a length prefix beyond the file', async () => {
    const f = handMade('len.safetensors', {}, Buffer.alloc(0), 1000n);
    expect((await openError(f)).message).toMatch(/header length 1000 exceeds the file/);
  });
  it('rejects a header that is not JSON', async () => {
    const file = path.join(tmp, 'notjson.safetensors');
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(5n);
    writeFileSync(file, Buffer.concat([len, Buffer.from('{abc}')]));
    expect((await openError(file)).message).toMatch(/not valid JSON/);
  });
  it('rejects a header that is not an object', async () => {
    expect((await openError(handMade('arr.safetensors', [] as unknown as Record<string, unknown>, Buffer.alloc(0)))).message).toMatch(/not a JSON object/);
  });
  it('rejects an unknown dtype', async () => {
    const f = handMade('dtype.safetensors', { t: { dtype: 'F8_E4M3X', shape: [2], data_offsets: [0, 2] } }, Buffer.alloc(2));
    expect((await openError(f)).message).toMatch(/unsupported dtype "F8_E4M3X"/);
  });
  it('rejects shape × dtype size ≠ byte length', async () => {
    const f = handMade('size.safetensors', { t: { dtype: 'F32', shape: [2, 3], data_offsets: [0, 20] } }, f32(6));
    expect((await openError(f)).message).toMatch(/has 20 bytes but shape \[2, 3\] × F32 needs 24/);
  });
  it('rejects offsets past the end of the data', async () => {
    const f = handMade('past.safetensors', { t: { dtype: 'F32', shape: [4], data_offsets: [0, 16] } }, f32(3));
    expect((await openError(f)).message).toMatch(/runs past the end of the file/);
  });
  it('rejects reversed or negative offsets', async () => {
    const f = handMade('rev.safetensors', { t: { dtype: 'F32', shape: [0], data_offsets: [8, 4] } }, f32(3));
    expect((await openError(f)).message).toMatch(/invalid data_offsets/);
    const g = handMade('neg.safetensors', { t: { dtype: 'F32', shape: [1], data_offsets: [-4, 0] } }, f32(3));
    expect((await openError(g)).message).toMatch(/invalid data_offsets/);
  });
  it('rejects overlapping tensors', async () => {
    const f = handMade(
      'overlap.safetensors',
      { a: { dtype: 'F32', shape: [4], data_offsets: [0, 16] }, b: { dtype: 'F32', shape: [2], data_offsets: [8, 16] } },
      f32(4),
    );
    expect((await openError(f)).message).toMatch(/tensors "a" and "b" overlap/);
  });
  it('accepts adjacent tensors and metadata, and reads them by offset', async () => {
    const data = Buffer.alloc(12);
    data.writeFloatLE(1.5, 0);
    data.writeFloatLE(-2.25, 4);
    data.writeFloatLE(3.75, 8);
    const f = handMade(
      'ok.safetensors',
      { __metadata__: { format: 'pt' }, a: { dtype: 'F32', shape: [1], data_offsets: [0, 4] }, b: { dtype: 'F32', shape: [2], data_offsets: [4, 12] } },
      data,
    );
    const st = await SafetensorsFile.open(f);
    expect(st.metadata).toEqual({ format: 'pt' });
    expect(Array.from(new Float32Array(new Uint8Array(await st.readRaw(st.tensors.get('b')!)).buffer))).toEqual([-2.25, 3.75]);
    await st.close();
  });
});

describe('checkpoint-level validation', () => {
  async function openErr(dir: string): Promise<LlmcError> {
    try {
      await openCheckpoint(dir);
    } catch (e) {
      expect(e).toBeInstanceOf(LlmcError);
      return e as LlmcError;
    }
    throw new Error('expected an error');
  }

  it('a shard index that puts a tensor in the wrong file', async () => {
    const { dir } = await generateFixture(path.join(tmp, 'wrongshard'), { arch: 'llama', tokenizer: 'none', shards: 2 });
    const idxFile = path.join(dir, 'model.safetensors.index.json');
    const idx = JSON.parse(readFileSync(idxFile, 'utf8'));
    idx.weight_map['model.norm.weight'] = idx.weight_map['model.norm.weight'].includes('00001') ? 'model-00002-of-00002.safetensors' : 'model-00001-of-00002.safetensors';
    writeFileSync(idxFile, JSON.stringify(idx));
    const e = await openErr(dir);
    expect(e.file).toBe(idxFile);
    expect(e.message).toMatch(/"model\.norm\.weight"/);
  });

  it('a tensor required by config.json that is missing', async () => {
    const { dir } = await generateFixture(path.join(tmp, 'missing'), { arch: 'llama', tokenizer: 'none' });
    const cfgFile = path.join(dir, 'config.json');
    const cfg = JSON.parse(readFileSync(cfgFile, 'utf8'));
    cfg.attention_bias = true; // requires q/k/v/o biases the file does not have
    writeFileSync(cfgFile, JSON.stringify(cfg));
    const e = await openErr(dir);
    expect(e.file).toBe(dir);
    expect(e.message).toMatch(/missing tensor "model\.layers\.0\.self_attn\.q_proj\.bias" required by config\.json/);
  });

  it('a config.json value of the wrong type', async () => {
    const { dir } = await generateFixture(path.join(tmp, 'badcfg'), { arch: 'llama', tokenizer: 'none' });
    const cfgFile = path.join(dir, 'config.json');
    const cfg = JSON.parse(readFileSync(cfgFile, 'utf8'));
    cfg.hidden_size = '64';
    writeFileSync(cfgFile, JSON.stringify(cfg));
    const e = await openErr(dir);
    expect(e.file).toBe(cfgFile);
    expect(e.message).toMatch(/"hidden_size" must be a number/);
  });
});
