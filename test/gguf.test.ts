/**
 * The GGUF writer and the gguf target's decisions, against independent references:
 *  - a hand-assembled GGUF v3 byte string (spec: ggml docs/gguf.md);
 *  - @huggingface/gguf (an independent parser) reads every value type and the tensor table;
 *  - q/k permutation: RoPE on Hugging Face's half-split rows equals llama.cpp's interleaved RoPE on
 *    our permuted rows (closed form), and a hand-worked row order;
 *  - presets: per-type tensor counts llama.cpp prints when loading Llama-2-7B Q4_K_M / Q4_K_S / Q3_K_M
 *    (e.g. "type q4_K: 193 tensors, type q6_K: 33 tensors");
 *  - stories260K: metadata from config.json, tensor bytes equal to the safetensors bytes, determinism;
 *  - tokenizers: fixture tokenizer.json → tokens/merges/types; placeholder vocabulary.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { gguf, GGUFValueType } from '@huggingface/gguf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { openCheckpoint, normalizeConfig, type ModelSource } from '../src/core/checkpoint/index.js';
import { UsageError } from '../src/core/errors.js';
import { closeQuantWorkers } from '../src/core/quant/index.js';
import { Rng } from '../src/core/util/rng.js';
import { chooseTensorType, parseQuant, type ModelFacts } from '../backends/gguf/presets.js';
import type { TensorPlan } from '../backends/gguf/tensors.js';
import { permuteRotaryRows, tensorChunks } from '../src/core/checkpoint/stream.js';
import { placeholderVocab, convertTokenizer, TOKEN_TYPE } from '../backends/gguf/vocab.js';
import { GgufFileWriter, arr, layoutGguf, str, u32, type GgufKv } from '../backends/gguf/writer.js';
import { STORIES, compileGguf } from './gguf-helpers.js';

let tmp: string;
beforeAll(() => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-gguf-'));
});
afterAll(async () => {
  rmSync(tmp, { recursive: true, force: true });
  await closeQuantWorkers();
});

const parse = (file: string) => gguf(file, { allowLocalFile: true, typedMetadata: true, computeParametersCount: false } as never) as Promise<any>;

describe('GGUF writer', () => {
  it('matches a hand-assembled v3 header byte for byte', () => {
    const { header, offsets, fileSize } = layoutGguf([{ key: 'a', value: { kind: 'UINT8', value: 7 } }], [{ name: 't', ne: [2], ggmlType: 0, nbytes: 8 }]);
    const hex = [
      '47475546', // "GGUF"
      '03000000', // version 3
      '0100000000000000', // tensor count
      '0100000000000000', // kv count
      '0100000000000000', '61', // key "a"
      '00000000', '07', // UINT8 7
      '0100000000000000', '74', // tensor name "t"
      '01000000', // n_dims
      '0200000000000000', // ne[0]
      '00000000', // F32
      '0000000000000000', // offset 0
    ].join('');
    const expected = Buffer.concat([Buffer.from(hex, 'hex'), Buffer.alloc(96 - hex.length / 2)]); // pad to 32
    expect(Buffer.from(header).toString('hex')).toBe(expected.toString('hex'));
    expect(offsets).toEqual([0]);
    expect(fileSize).toBe(96 + 32);
  });

  it('writes every metadata type and aligned tensors that @huggingface/gguf reads back', async () => {
    const kvs: GgufKv[] = [
      { key: 'general.architecture', value: str('llama') },
      { key: 't.u8', value: { kind: 'UINT8', value: 200 } },
      { key: 't.i8', value: { kind: 'INT8', value: -100 } },
      { key: 't.u16', value: { kind: 'UINT16', value: 60000 } },
      { key: 't.i16', value: { kind: 'INT16', value: -30000 } },
      { key: 't.u32', value: u32(4000000000) },
      { key: 't.i32', value: { kind: 'INT32', value: -2000000000 } },
      { key: 't.f32', value: { kind: 'FLOAT32', value: 1.5 } },
      { key: 't.bool', value: { kind: 'BOOL', value: true } },
      { key: 't.str', value: str('héllo ▁ 🙂') },
      { key: 't.u64', value: { kind: 'UINT64', value: 2n ** 40n } },
      { key: 't.i64', value: { kind: 'INT64', value: -(2n ** 40n) } },
      { key: 't.f64', value: { kind: 'FLOAT64', value: 0.1 } },
      { key: 't.arr_str', value: arr('STRING', ['a', '', 'ü']) },
      { key: 't.arr_i32', value: arr('INT32', [1, -2, 3]) },
      { key: 't.arr_f32', value: arr('FLOAT32', [0.5, -0.25]) },
      { key: 't.arr_bool', value: arr('BOOL', [true, false]) },
      { key: 't.arr_empty', value: arr('UINT32', []) },
    ];
    const tensors = [
      { name: 'a', ne: [3], ggmlType: 0, nbytes: 12 },
      { name: 'b', ne: [4, 2], ggmlType: 1, nbytes: 16 },
      { name: 'c', ne: [5], ggmlType: 0, nbytes: 20 },
    ];
    const file = path.join(tmp, 'types.gguf');
    const w = await GgufFileWriter.open(file, kvs, tensors);
    const datas = tensors.map((t, i) => new Uint8Array(t.nbytes).map((_, j) => (i * 50 + j) & 0xff));
    for (let i = 0; i < tensors.length; i++) await w.writeTensor(tensors[i].name, datas[i]);
    await w.finish();

    const r = await parse(file);
    const m = r.typedMetadata;
    expect(m.version.value).toBe(3);
    expect(m['t.u8']).toMatchObject({ value: 200, type: GGUFValueType.UINT8 });
    expect(m['t.i8']).toMatchObject({ value: -100, type: GGUFValueType.INT8 });
    expect(m['t.u16']).toMatchObject({ value: 60000, type: GGUFValueType.UINT16 });
    expect(m['t.i16']).toMatchObject({ value: -30000, type: GGUFValueType.INT16 });
    expect(m['t.u32']).toMatchObject({ value: 4000000000, type: GGUFValueType.UINT32 });
    expect(m['t.i32']).toMatchObject({ value: -2000000000, type: GGUFValueType.INT32 });
    expect(m['t.f32']).toMatchObject({ value: 1.5, type: GGUFValueType.FLOAT32 });
    expect(m['t.bool']).toMatchObject({ value: true, type: GGUFValueType.BOOL });
    expect(m['t.str']).toMatchObject({ value: 'héllo ▁ 🙂', type: GGUFValueType.STRING });
    expect(m['t.u64']).toMatchObject({ value: 2n ** 40n, type: GGUFValueType.UINT64 });
    expect(m['t.i64']).toMatchObject({ value: -(2n ** 40n), type: GGUFValueType.INT64 });
    expect(m['t.f64']).toMatchObject({ value: 0.1, type: GGUFValueType.FLOAT64 });
    expect(m['t.arr_str']).toMatchObject({ value: ['a', '', 'ü'], type: GGUFValueType.ARRAY, subType: GGUFValueType.STRING });
    expect(m['t.arr_i32']).toMatchObject({ value: [1, -2, 3], subType: GGUFValueType.INT32 });
    expect(m['t.arr_f32']).toMatchObject({ value: [0.5, -0.25], subType: GGUFValueType.FLOAT32 });
    expect(m['t.arr_bool']).toMatchObject({ value: [true, false], subType: GGUFValueType.BOOL });
    expect(m['t.arr_empty']).toMatchObject({ value: [], subType: GGUFValueType.UINT32 });

    // Tensor table: ggml dims, types, 32-aligned offsets; the data sits at dataStart + offset.
    expect(r.tensorInfos.map((t: any) => [t.name, t.shape.map(Number), t.dtype, Number(t.offset)])).toEqual([
      ['a', [3], 0, 0],
      ['b', [4, 2], 1, 32],
      ['c', [5], 0, 64],
    ]);
    const bytes = readFileSync(file);
    const dataStart = r.tensorDataOffset === undefined ? bytes.length - 96 : Number(r.tensorDataOffset);
    expect(dataStart % 32).toBe(0);
    expect(bytes.length).toBe(dataStart + 96);
    for (let i = 0; i < 3; i++) {
      const off = dataStart + Number(r.tensorInfos[i].offset);
      expect([...bytes.subarray(off, off + tensors[i].nbytes)]).toEqual([...datas[i]]);
    }
  });

  it('refuses out-of-order or wrongly sized tensors and leaves no file', async () => {
    const file = path.join(tmp, 'bad.gguf');
    const w = await GgufFileWriter.open(file, [], [{ name: 'a', ne: [2], ggmlType: 0, nbytes: 8 }]);
    await expect(w.writeTensor('a', new Uint8Array(7))).rejects.toThrow(/7 bytes/);
    expect(() => readFileSync(file)).toThrow();
    expect(() => layoutGguf([{ key: 'x', value: u32(-1) }], [])).toThrow(/out of range/);
    expect(() => layoutGguf([{ key: 'x', value: u32(1) }, { key: 'x', value: u32(2) }], [])).toThrow(/twice/);
  });
});

describe('llama q/k permutation', () => {
  it('re-interleaves rotary halves (hand-worked rows)', () => {
    const rows = Float32Array.from({ length: 8 }, (_, i) => i); // 8 rows of 1 column, 2 heads of 4
    expect([...permuteRotaryRows(rows, 8, 2)]).toEqual([0, 2, 1, 3, 4, 6, 5, 7]);
  });

  it('streams q/k (and 1-D q/k biases) in whole-head chunks with the same result as permuting whole', async () => {
    const rng = new Rng(5);
    const w = Float32Array.from({ length: 16 * 3 }, () => rng.normal()); // 16 rows (4 heads of 4) x 3
    const b = Float32Array.from({ length: 16 }, (_, i) => i);
    const src = {
      meta: (n: string) => ({ name: n, dtype: 'F32', shape: n === 'w' ? [16, 3] : [16] }),
      readF32: async (n: string) => Float32Array.from(n === 'w' ? w : b),
      layout: () => null,
      description: 'fake',
    } as unknown as ModelSource;
    const collect = async (plan: TensorPlan, max: number) => {
      const parts: number[] = [];
      for await (const c of tensorChunks(src, plan, max)) parts.push(...c.data!);
      return parts;
    };
    const whole = [...permuteRotaryRows(w, 16, 4)];
    expect(await collect({ name: 'attn_q.weight', shape: [16, 3], sources: ['w'], permuteHeads: 4 }, 12)).toEqual(whole); // one head per chunk
    expect(await collect({ name: 'attn_q.weight', shape: [16, 3], sources: ['w'], permuteHeads: 4 }, 1000)).toEqual(whole);
    expect(await collect({ name: 'attn_q.bias', shape: [16], sources: ['b'], permuteHeads: 4 }, 5)).toEqual([0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15]);
  });

  it("HF half-split RoPE on W·x equals llama.cpp's interleaved RoPE on permuted W·x", () => {
    const heads = 3, hd = 8, D = 5, pos = 7, theta = 10000;
    const rng = new Rng(3);
    const W = Float32Array.from({ length: heads * hd * D }, () => rng.normal());
    const x = Float32Array.from({ length: D }, () => rng.normal());
    const mv = (M: Float32Array) => Array.from({ length: heads * hd }, (_, r) => x.reduce((a, v, c) => a + M[r * D + c] * v, 0));
    const ang = (i: number) => pos * theta ** ((-2 * i) / hd);
    // Hugging Face rotate_half: pairs (i, i + hd/2).
    const q = mv(W);
    const hf = [...q];
    for (let h = 0; h < heads; h++) for (let i = 0; i < hd / 2; i++) {
      const [a, b] = [q[h * hd + i], q[h * hd + i + hd / 2]];
      hf[h * hd + i] = a * Math.cos(ang(i)) - b * Math.sin(ang(i));
      hf[h * hd + i + hd / 2] = b * Math.cos(ang(i)) + a * Math.sin(ang(i));
    }
    // llama.cpp (rope mode 0): pairs (2i, 2i+1) of the permuted rows.
    const p = mv(permuteRotaryRows(W, heads * hd, heads));
    const gg = [...p];
    for (let h = 0; h < heads; h++) for (let i = 0; i < hd / 2; i++) {
      const [a, b] = [p[h * hd + 2 * i], p[h * hd + 2 * i + 1]];
      gg[h * hd + 2 * i] = a * Math.cos(ang(i)) - b * Math.sin(ang(i));
      gg[h * hd + 2 * i + 1] = b * Math.cos(ang(i)) + a * Math.sin(ang(i));
    }
    // Same values, in interleaved order: gg[h, 2i + j] = hf[h, j*hd/2 + i].
    for (let h = 0; h < heads; h++) for (let i = 0; i < hd / 2; i++) for (let j = 0; j < 2; j++) {
      expect(gg[h * hd + 2 * i + j]).toBeCloseTo(hf[h * hd + j * (hd / 2) + i], 4);
    }
  });
});

describe('llama.cpp presets', () => {
  /** The 291 tensors of Llama-2-7B as llama.cpp names them. */
  function llama7b(): { name: string; ne: number[] }[] {
    const t = [{ name: 'token_embd.weight', ne: [4096, 32000] }, { name: 'output_norm.weight', ne: [4096] }, { name: 'output.weight', ne: [4096, 32000] }];
    for (let l = 0; l < 32; l++) {
      const b = `blk.${l}.`;
      t.push({ name: b + 'attn_norm.weight', ne: [4096] }, { name: b + 'ffn_norm.weight', ne: [4096] });
      for (const n of ['attn_q', 'attn_k', 'attn_v', 'attn_output']) t.push({ name: `${b}${n}.weight`, ne: [4096, 4096] });
      t.push({ name: b + 'ffn_gate.weight', ne: [4096, 11008] }, { name: b + 'ffn_up.weight', ne: [4096, 11008] }, { name: b + 'ffn_down.weight', ne: [11008, 4096] });
    }
    return t;
  }
  const facts: ModelFacts = { arch: 'llama', numLayers: 32, gqa: 1, numExperts: 0, hasOutput: true, is70B: false };
  const counts = (quant: string) => {
    const c: Record<string, number> = {};
    for (const t of llama7b()) {
      const ty = chooseTensorType(parseQuant(quant, 'F16'), [], t, facts).type;
      c[ty] = (c[ty] ?? 0) + 1;
    }
    return c;
  };

  it('reproduces the tensor type counts llama.cpp reports for Llama-2-7B', () => {
    expect(counts('Q4_K_M')).toEqual({ F32: 65, Q4_K: 193, Q6_K: 33 });
    expect(counts('Q4_K_S')).toEqual({ F32: 65, Q4_K: 217, Q5_K: 8, Q6_K: 1 });
    expect(counts('Q3_K_M')).toEqual({ F32: 65, Q3_K: 129, Q4_K: 92, Q5_K: 4, Q6_K: 1 });
    expect(counts('Q8_0')).toEqual({ F32: 65, Q8_0: 226 });
    expect(counts('Q4_0')).toEqual({ F32: 65, Q4_0: 225, Q6_K: 1 });
    expect(counts('F16')).toEqual({ F32: 65, F16: 226 });
  });

  it('Q4_K_M bumps attn_v / ffn_down to Q6_K exactly on the use_more_bits layers', () => {
    const bumped = llama7b()
      .filter((t) => t.name.includes('attn_v') && chooseTensorType(parseQuant('Q4_K_M', 'F16'), [], t, facts).type === 'Q6_K')
      .map((t) => Number(t.name.split('.')[1]));
    // first and last 1/8 of the layers, and every third one in between
    expect(bumped).toEqual([0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]);
  });

  it('8-expert models: attn_v and attn_k go to Q8_0, attn_output to Q5_K; the router stays F32', () => {
    const m: ModelFacts = { ...facts, numExperts: 8, gqa: 4 };
    const q = parseQuant('Q4_K_M', 'F16');
    expect(chooseTensorType(q, [], { name: 'blk.3.attn_v.weight', ne: [4096, 1024] }, m).type).toBe('Q8_0');
    expect(chooseTensorType(q, [], { name: 'blk.3.attn_k.weight', ne: [4096, 1024] }, m).type).toBe('Q8_0');
    expect(chooseTensorType(q, [], { name: 'blk.3.attn_output.weight', ne: [4096, 4096] }, m).type).toBe('Q5_K');
    expect(chooseTensorType(q, [], { name: 'blk.3.ffn_gate_inp.weight', ne: [4096, 8] }, m).type).toBe('F32');
    expect(chooseTensorType(q, [], { name: 'blk.10.ffn_down_exps.weight', ne: [14336, 4096, 8] }, m).type).toBe('Q4_K'); // layer 10 of 32: no bump
    expect(chooseTensorType(q, [], { name: 'blk.3.ffn_down_exps.weight', ne: [14336, 4096, 8] }, m).type).toBe('Q6_K'); // first 1/8: bump
  });

  it('overrides: last match wins; rows not divisible by the block fall back as llama.cpp does', () => {
    const q = parseQuant('Q4_K_M', 'F16');
    const o = [
      { pattern: /ffn_down/, type: 'Q8_0' as const },
      { pattern: /blk\.\d+\.ffn_down/, type: 'Q5_K' as const },
    ];
    expect(chooseTensorType(q, o, { name: 'blk.5.ffn_down.weight', ne: [11008, 4096] }, facts)).toMatchObject({ type: 'Q5_K' });
    // tied embeddings act as the output: 64 % 256 != 0 -> Q8_0 (llama_tensor_get_type)
    expect(chooseTensorType(q, [], { name: 'token_embd.weight', ne: [64, 512] }, { ...facts, hasOutput: false }).type).toBe('Q8_0');
    // 172-wide rows: Q4_K -> Q5_0 needs 32 | 172: no -> F16
    expect(chooseTensorType(q, [], { name: 'blk.5.ffn_down.weight', ne: [172, 64] }, facts)).toMatchObject({ type: 'F16', fallbackFrom: 'Q4_K' });
    expect(chooseTensorType(q, [], { name: 'blk.0.attn_q.weight', ne: [64, 64] }, facts)).toMatchObject({ type: 'Q5_0', fallbackFrom: 'Q4_K' });
  });

  it('unknown quant types are usage errors listing the valid ones', () => {
    expect(() => parseQuant('Q7_X', 'F16')).toThrow(UsageError);
    expect(() => parseQuant('Q7_X', 'F16')).toThrow(/valid: F32, F16, .*Q4_K_M.*Q4_K/);
  });
});

describe('stories260K GGUF', () => {
  it('metadata, tensor names/types and data as intended; same inputs, same bytes', async () => {
    const { file, notes } = await compileGguf(STORIES, path.join(tmp, 's-q8'), { quant: 'Q8_0' });
    const r = await parse(file);
    const m = Object.fromEntries(Object.entries(r.typedMetadata).map(([k, v]: [string, any]) => [k, v.value]));
    const cfg = JSON.parse(readFileSync(path.join(STORIES, 'config.json'), 'utf8'));
    expect(m).toMatchObject({
      'general.architecture': 'llama',
      'general.name': 'stories260K',
      'general.file_type': 7, // LLAMA_FTYPE_MOSTLY_Q8_0
      'general.quantization_version': 2,
      'general.alignment': 32,
      'llama.block_count': cfg.num_hidden_layers,
      'llama.context_length': cfg.max_position_embeddings,
      'llama.embedding_length': cfg.hidden_size,
      'llama.feed_forward_length': cfg.intermediate_size,
      'llama.attention.head_count': cfg.num_attention_heads,
      'llama.attention.head_count_kv': cfg.num_key_value_heads,
      'llama.rope.dimension_count': cfg.hidden_size / cfg.num_attention_heads,
      'llama.rope.freq_base': cfg.rope_theta,
      'llama.vocab_size': cfg.vocab_size,
      'tokenizer.ggml.model': 'llama',
      'tokenizer.ggml.bos_token_id': 1,
      'tokenizer.ggml.eos_token_id': 2,
    });
    expect(m['llama.attention.layer_norm_rms_epsilon']).toBeCloseTo(cfg.rms_norm_eps, 10);
    expect(notes.some((n) => /placeholder vocabulary/.test(n))).toBe(true);
    expect(notes.some((n) => /fell back Q8_0 -> F16.*ffn_down/.test(n))).toBe(true);
    const types = Object.fromEntries(r.tensorInfos.map((t: any) => [t.name, t.dtype]));
    expect(r.tensorInfos).toHaveLength(2 + 5 * 9); // token_embd, output_norm, 9 per layer; tied: no output.weight
    expect(types['output.weight']).toBeUndefined();
    expect(types['token_embd.weight']).toBe(8); // Q8_0
    expect(types['blk.0.attn_norm.weight']).toBe(0); // F32
    expect(types['blk.0.ffn_down.weight']).toBe(1); // 172-wide rows: F16 fallback
    expect(r.tensorInfos.find((t: any) => t.name === 'blk.0.attn_k.weight').shape.map(Number)).toEqual([64, 32]); // ggml order

    // F32: token_embd and v are the safetensors bytes; q is the row-permuted one.
    const f = await compileGguf(STORIES, path.join(tmp, 's-f32'), { quant: 'F32' });
    const r32 = await parse(f.file);
    const bytes = readFileSync(f.file);
    const ck = await openCheckpoint(STORIES);
    try {
      const at = (name: string, n: number) => {
        const t = r32.tensorInfos.find((x: any) => x.name === name);
        const off = Number(r32.tensorDataOffset) + Number(t.offset);
        return bytes.subarray(off, off + n);
      };
      for (const [g, h] of [['token_embd.weight', 'model.embed_tokens.weight'], ['blk.2.attn_v.weight', 'model.layers.2.self_attn.v_proj.weight']]) {
        const raw = await ck.readRaw(h);
        expect(Buffer.compare(at(g, raw.length), raw)).toBe(0);
      }
      const q = await ck.readF32('model.layers.1.self_attn.q_proj.weight');
      const got = new Float32Array(Uint8Array.from(at('blk.1.attn_q.weight', q.length * 4)).buffer);
      // head 0 of 8 (head_dim 8): GGUF row 1 = HF row 4 (first of the second half), row 2 = HF row 1
      expect([...got.subarray(64, 128)]).toEqual([...q.subarray(4 * 64, 5 * 64)]);
      expect([...got.subarray(128, 192)]).toEqual([...q.subarray(64, 128)]);
    } finally {
      await ck.close();
    }

    const again = await compileGguf(STORIES, path.join(tmp, 's-q8-again'), { quant: 'Q8_0' });
    const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');
    expect(sha(again.file)).toBe(sha(file));
  });
});

describe('tokenizer conversion', () => {
  it('placeholder vocabulary: <unk> <s> </s>, 256 byte tokens, unique fillers', () => {
    const spec = normalizeConfig(JSON.parse(readFileSync(path.join(STORIES, 'config.json'), 'utf8')), 'config.json');
    const v = placeholderVocab(spec);
    const kv = Object.fromEntries(v.kvs.map((k) => [k.key, (k.value as any).values ?? (k.value as any).value]));
    const tokens = kv['tokenizer.ggml.tokens'] as string[];
    expect(tokens).toHaveLength(512);
    expect(tokens.slice(0, 4)).toEqual(['<unk>', '<s>', '</s>', '<0x00>']);
    expect(tokens[3 + 0x0a]).toBe('<0x0A>');
    expect(tokens[258]).toBe('<0xFF>');
    expect(new Set(tokens).size).toBe(512);
    expect((kv['tokenizer.ggml.token_type'] as number[]).slice(0, 4)).toEqual([TOKEN_TYPE.UNKNOWN, TOKEN_TYPE.CONTROL, TOKEN_TYPE.CONTROL, TOKEN_TYPE.BYTE]);
  });

  it('byte-level BPE → gpt2 vocabulary with merges and the gpt-2 pre-tokenizer', async () => {
    const dir = path.join(tmp, 'tok-bl');
    const { spec } = await generateFixture(dir, { arch: 'qwen2', tokenizer: 'byte-level' });
    const text = readFileSync(path.join(dir, 'tokenizer.json'), 'utf8');
    const tj = JSON.parse(text);
    const v = convertTokenizer(text, readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'), spec, path.join(dir, 'tokenizer.json'));
    const kv = Object.fromEntries(v.kvs.map((k) => [k.key, (k.value as any).values ?? (k.value as any).value]));
    expect(kv['tokenizer.ggml.model']).toBe('gpt2');
    expect(kv['tokenizer.ggml.pre']).toBe('gpt-2');
    const tokens = kv['tokenizer.ggml.tokens'] as string[];
    for (const [piece, id] of Object.entries(tj.model.vocab as Record<string, number>)) expect(tokens[id]).toBe(piece);
    expect(kv['tokenizer.ggml.merges']).toEqual(tj.model.merges.map((m: string | string[]) => (Array.isArray(m) ? m.join(' ') : m)));
    const eot = tj.added_tokens[0];
    expect(kv['tokenizer.ggml.eos_token_id']).toBe(eot.id);
    expect((kv['tokenizer.ggml.token_type'] as number[])[eot.id]).toBe(TOKEN_TYPE.CONTROL);
    expect(kv['tokenizer.ggml.add_bos_token']).toBe(false);
  });

  it('SentencePiece-style BPE → llama vocabulary: byte tokens, control tokens, scores by merge rank', async () => {
    const dir = path.join(tmp, 'tok-sp');
    const { spec } = await generateFixture(dir, { arch: 'llama', tokenizer: 'sentencepiece' });
    const text = readFileSync(path.join(dir, 'tokenizer.json'), 'utf8');
    const tj = JSON.parse(text);
    const v = convertTokenizer(text, readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'), spec, path.join(dir, 'tokenizer.json'));
    const kv = Object.fromEntries(v.kvs.map((k) => [k.key, (k.value as any).values ?? (k.value as any).value]));
    expect(kv['tokenizer.ggml.model']).toBe('llama');
    const types = kv['tokenizer.ggml.token_type'] as number[];
    const tokens = kv['tokenizer.ggml.tokens'] as string[];
    expect(types.slice(0, 3)).toEqual([TOKEN_TYPE.UNKNOWN, TOKEN_TYPE.CONTROL, TOKEN_TYPE.CONTROL]);
    expect(types[tokens.indexOf('<0x41>')]).toBe(TOKEN_TYPE.BYTE);
    const scores = kv['tokenizer.ggml.scores'] as number[];
    const [m0, m1] = [tj.model.merges[0], tj.model.merges[1]].map((m: string | string[]) => (Array.isArray(m) ? m.join('') : m.replace(' ', '')));
    expect(scores[tokens.indexOf(m0)]).toBeGreaterThan(scores[tokens.indexOf(m1)]);
    expect(kv['tokenizer.ggml.add_space_prefix']).toBe(true);
  });
});
