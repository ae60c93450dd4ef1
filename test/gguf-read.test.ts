/**
 * llmc's GGUF header reader (backends/gguf/read.ts) against an independent one, @huggingface/gguf, on
 * files llmc compiled; and damaged files: each one line from `llmc run`, before llama.cpp sees them.
 */
import { createHash } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { gguf } from '@huggingface/gguf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GGML_TYPES, readGgufHeader } from '../backends/gguf/read.js';
import { FIXTURE_PRESETS, generateFixture } from '../fixtures/generate.js';
import { llmcInProcess } from './cli.js';

const ROOT = path.resolve(__dirname, '..');
const STORIES = path.join(ROOT, 'fixtures/models/stories260K');
let tmp: string;
beforeAll(() => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-gguf-read-'));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

async function compiled(name: string, model: string, quant: string): Promise<string> {
  const out = path.join(tmp, name);
  const r = await llmcInProcess('compile', model, '--target', 'gguf', '--quant', quant, '-o', out);
  expect(r.code, r.stderr).toBe(0);
  return out;
}

describe('readGgufHeader', () => {
  it('reads what @huggingface/gguf reads: every metadata value, every tensor name, shape, type and offset', async () => {
    const moe = (await generateFixture(path.join(tmp, 'moe'), { arch: 'mixtral', tokenizer: 'byte-level', dims: FIXTURE_PRESETS.tiny })).dir;
    for (const [model, quant] of [[STORIES, 'Q8_0'], [STORIES, 'Q4_K_M'], [moe, 'F16']] as const) {
      const file = path.join(await compiled(`${path.basename(model)}-${quant}`, model, quant), 'model.gguf');
      const ours = await readGgufHeader(file);
      const theirs = await gguf(file, { allowLocalFile: true });
      const meta = Object.fromEntries(Object.entries(theirs.metadata).filter(([k]) => k !== 'version' && k !== 'tensor_count' && k !== 'kv_count'));
      expect(ours.metadata.size).toBe(Object.keys(meta).length);
      for (const [k, v] of Object.entries(meta)) {
        const mine = ours.metadata.get(k);
        // @huggingface/gguf gives u64 as bigint and f32 as its float64 widening, as we do.
        expect(mine, k).toEqual(v);
      }
      expect(ours.tensors.map((t) => t.name)).toEqual(theirs.tensorInfos.map((t) => t.name));
      expect(ours.tensors.map((t) => t.ne)).toEqual(theirs.tensorInfos.map((t) => t.shape.map(Number)));
      expect(ours.tensors.map((t) => t.offset)).toEqual(theirs.tensorInfos.map((t) => Number(t.offset)));
      expect(ours.tensors.map((t) => GGML_TYPES[t.type].ggmlType)).toEqual(theirs.tensorInfos.map((t) => Number(t.dtype)));
      expect(ours.dataStart).toBe(Number(theirs.tensorDataOffset));
      // The data section ends exactly at the end of the file (the last tensor padded to nothing).
      const last = ours.tensors.reduce((a, t) => (t.offset > a.offset ? t : a));
      expect(ours.dataStart + last.offset + last.nbytes).toBe(ours.fileSize);
    }
  }, 60_000);
});

describe('a damaged GGUF: one line from llmc run, before llama.cpp loads it', () => {
  let dir: string;
  let bytes: Buffer;
  beforeAll(async () => {
    dir = await compiled('run-me', STORIES, 'Q8_0');
    bytes = readFileSync(path.join(dir, 'model.gguf'));
  });

  /** The artifact with model.gguf replaced; the manifest's size check is passed only where the size is kept. */
  async function runDamaged(name: string, damage: (b: Buffer) => Buffer, match: RegExp) {
    const d = path.join(tmp, name);
    rmSync(d, { recursive: true, force: true });
    cpSync(dir, d, { recursive: true });
    const damaged = damage(Buffer.from(bytes));
    writeFileSync(path.join(d, 'model.gguf'), damaged);
    // The manifest records the damaged file's sha256, so that the background hash check passes and
    // only llmc's GGUF reader stands between the file and llama.cpp.
    const manifestFile = path.join(d, 'llmc-manifest.json');
    const manifest = JSON.parse(readFileSync(manifestFile, 'utf8'));
    for (const f of manifest.files) if (f.path === 'model.gguf') f.sha256 = createHash('sha256').update(damaged).digest('hex');
    writeFileSync(manifestFile, JSON.stringify(manifest));
    const r = await llmcInProcess('run', d, '--prompt-ids', '1', '--max-tokens', '2');
    expect(r.code, r.stderr).toBe(1);
    const lines = r.stderr.trim().split('\n');
    expect(lines, r.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(match);
  }

  it('the tensor count lies', async () => {
    await runDamaged('count', (b) => (b.writeBigUInt64LE(1n << 40n, 8), b), /model\.gguf: not a valid GGUF file: the tensor count is 1099511627776, more than the file can hold/);
  });

  it('the magic is wrong', async () => {
    await runDamaged('magic', (b) => ((b[0] = 0), b), /model\.gguf: not a valid GGUF file: it does not start with "GGUF"/);
  });

  /** Where the tensor info of `name` starts its dims (after the u64 length, the name and the u32 dim count). */
  const dimsAt = (b: Buffer, name: string) => b.indexOf(Buffer.from(name)) + name.length + 4;

  it('a zero dimension (what reached llama.cpp\'s gguf_init_from_reader)', async () => {
    await runDamaged('zero-dim', (b) => (b.writeBigUInt64LE(0n, dimsAt(b, 'blk.0.attn_q.weight')), b), /model\.gguf: not a valid GGUF file: dimension 0 of "blk\.0\.attn_q\.weight" is 0/);
  });

  it('a data offset not where llama.cpp expects it (an overlap), with the size kept', async () => {
    await runDamaged('offset', (b) => {
      const at = dimsAt(b, 'blk.0.attn_k.weight') + 2 * 8 + 4; // two dims, the type: the offset
      b.writeBigUInt64LE(b.readBigUInt64LE(at) - 32n, at);
      return b;
    }, /model\.gguf: not a valid GGUF file: tensor "blk\.0\.attn_k\.weight" has data offset \d+, expected \d+ \(tensors in order, each padded to 32 bytes\)/);
  });

  it('the model was edited after the compile (block_count)', async () => {
    await runDamaged('layers', (b) => {
      const key = Buffer.from('llama.block_count');
      const at = b.indexOf(key) + key.length + 4; // after the key, its u32 type tag
      b.writeUInt32LE(b.readUInt32LE(at) + 1, at);
      return b;
    }, /model\.gguf: llama\.block_count is 6, the manifest says 5: the file was changed after the compile/);
  });
});
