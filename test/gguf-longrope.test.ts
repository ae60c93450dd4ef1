/**
 * Phi-3.5-mini / Phi-3-*-128k's longrope through the gguf target, checked with real llama.cpp
 * (node-llama-cpp). As llama.cpp's convert_hf_to_gguf.py Phi3MiniModel writes it: rope_factors_long.weight
 * and rope_factors_short.weight (F32, rope dims / 2), phi3.rope.scaling.original_context_length and
 * phi3.rope.scaling.attn_factor. llama.cpp's phi3 uses the long factors for every position when its
 * context (n_ctx per sequence) exceeds original_context_length, the short ones otherwise
 * (llama_model::get_rope_factors); transformers — and llmc's executors, whose longrope frequencies
 * test/config-reading.test.ts checks against a float64 transcription of transformers'
 * modeling_rope_utils.py — switch on the sequence's own length. So each case gives llama.cpp a context
 * on the prompt's side of original_max_position_embeddings: 256 for a 48-token prompt (short factors),
 * 512 for a 300-token prompt (long factors, positions below 256 included).
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readGgufHeader } from '../backends/gguf/read.js';
import { compileGguf, llama } from './gguf-helpers.js';
import { checkpointLogits, worstRowError } from './numeric.js';

const PHI3 = path.resolve(__dirname, '../../shared/models/archs/phi3');
const HAVE = existsSync(PHI3);
if (!HAVE) console.log(`gguf-longrope: ${PHI3} is absent; skipped`);

const ORIG = 256;
const SHORT = [1, 1.05, 1.1, 1.2, 1.35, 1.5, 1.8, 2.2];
const LONG = [1, 1.5, 2.5, 4, 6.5, 10, 16, 24];

let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-gguf-longrope-'));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

/** ../shared's phi3 with rope_parameters as Phi-3.5-mini's (transformers 5 form), original context 256 of 512. */
async function longropePhi3(name: string, rope: Record<string, unknown> | null): Promise<string> {
  const dir = path.join(tmp, name);
  await fsp.cp(PHI3, dir, { recursive: true });
  const cfg = JSON.parse(await fsp.readFile(path.join(dir, 'config.json'), 'utf8'));
  cfg.original_max_position_embeddings = ORIG;
  cfg.rope_parameters = rope ?? { rope_type: 'default', rope_theta: 10000, partial_rotary_factor: 1.0 };
  await fsp.writeFile(path.join(dir, 'config.json'), JSON.stringify(cfg));
  return dir;
}


/** llama.cpp's logits after each token, in a context of `contextSize` (which picks the rope factors). */
async function llamaCppLogits(file: string, ids: number[], V: number, contextSize: number): Promise<Float32Array> {
  type Token = import('node-llama-cpp').Token;
  const model = await (await llama()).loadModel({ modelPath: file });
  try {
    // F32 KV cache: llama.cpp's default F16 cache alone is ~1e-3 off a float32 reference.
    const ctx = await model.createContext({ contextSize, threads: 1, experimentalKvCacheKeyType: 'F32', experimentalKvCacheValueType: 'F32' });
    try {
      expect(ctx.contextSize).toBe(contextSize);
      const res = await ctx.getSequence().controlledEvaluate(ids.map((t) => [t as Token, { generateNext: { logits: true } }] as const));
      const out = new Float32Array(ids.length * V);
      res.forEach((r, p) => {
        for (const [tok, v] of r?.next?.logits ?? new Map<number, number>()) out[p * V + tok] = v;
      });
      return out;
    } finally {
      await ctx.dispose();
    }
  } finally {
    await model.dispose();
  }
}

describe.skipIf(!HAVE)('phi3 longrope in GGUF, run by llama.cpp', () => {
  const LONGROPE = { rope_type: 'longrope', rope_theta: 10000, partial_rotary_factor: 1.0, short_factor: SHORT, long_factor: LONG, original_max_position_embeddings: ORIG };
  let dir: string;
  let file: string;
  let V: number;
  beforeAll(async () => {
    dir = await longropePhi3('phi3-longrope', LONGROPE);
    V = JSON.parse(await fsp.readFile(path.join(dir, 'config.json'), 'utf8')).vocab_size;
    ({ file } = await compileGguf(dir, path.join(tmp, 'gguf'), { quant: 'F32' }));
  });

  it("writes the converter's factor tensors and rope scaling keys", async () => {
    const h = await readGgufHeader(file);
    const t = new Map(h.tensors.map((x) => [x.name, x]));
    for (const name of ['rope_factors_long.weight', 'rope_factors_short.weight']) {
      expect(t.get(name)?.ne).toEqual([8]);
      expect(t.get(name)?.ggmlType).toBe(0); // F32
    }
    expect(h.metadata.get('phi3.rope.scaling.original_context_length')).toBe(ORIG);
    // Phi3MiniModel: sqrt(1 + ln(max / orig) / ln(orig)), max 512.
    expect(h.metadata.get('phi3.rope.scaling.attn_factor')).toBe(Math.fround(Math.sqrt(1 + Math.log(512 / ORIG) / Math.log(ORIG))));
  });

  it.each([
    ['short factors: a 48-token prompt, llama.cpp context 256 (not above the original 256)', 48, 256],
    ['long factors: a 300-token prompt, llama.cpp context 512 (above the original 256)', 300, 512],
  ] as const)('%s: every position within llama.cpp precision of llmc, and the factors matter', async (_name, T, contextSize) => {
    const ids = Array.from({ length: T }, (_, i) => (i * 37 + 11) % V);
    const want = await checkpointLogits(dir, ids);
    const got = await llamaCppLogits(file, ids, V, contextSize);
    const err = worstRowError(got, want, V);
    console.log(`phi3 longrope T=${T} n_ctx=${contextSize}: llama.cpp vs llmc worst row error ${err.toExponential(2)}`);
    // llama.cpp's precision on these checkpoints (test/arch-families: 3e-3); its float32 KV cache here.
    expect(err).toBeLessThan(3e-3);
    // The same weights with plain rope are far off: the scaling, not luck, makes the match.
    const plain = await checkpointLogits(await longropePhi3(`phi3-plain-${T}`, null), ids);
    expect(worstRowError(plain, want, V)).toBeGreaterThan(10 * err);
    // And llama.cpp applies attn_factor: without it (attention_factor 1) llmc is far from llama.cpp too.
    const noAttn = await checkpointLogits(await longropePhi3(`phi3-noattn-${T}`, { ...LONGROPE, attention_factor: 1 }), ids);
    expect(worstRowError(got, noAttn, V)).toBeGreaterThan(5 * err);
  });

  it("a context on the other side of the original length switches llama.cpp's factors (what the artifact does, documented)", async () => {
    const ids = Array.from({ length: 48 }, (_, i) => (i * 37 + 11) % V);
    const want = await checkpointLogits(dir, ids);
    const inShort = worstRowError(await llamaCppLogits(file, ids, V, 256), want, V);
    const inLong = worstRowError(await llamaCppLogits(file, ids, V, 512), want, V);
    expect(inLong).toBeGreaterThan(10 * inShort);
  });
});
