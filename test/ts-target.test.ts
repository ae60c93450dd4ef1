/**
 * The `ts` target's artifact: manifest + tensor table, alignment, determinism, quantized bytes equal
 * src/core/quant's (the GGUF target's), tokenizer files, and every fixture architecture running in the TS
 * runtime with logits equal to the onnxruntime engine's.
 */
import { createHash } from 'node:crypto';
import { promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_ARCHS, generateFixture } from '../fixtures/generate.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { compile } from '../src/app/compile/compile.js';
import { Engine } from '../src/exec/engine/engine.js';
import { dequantize, quantize } from '../src/core/quant/quantize.js';
import type { QuantType } from '../src/core/quant/types.js';
import { transformSource } from '../src/core/checkpoint/index.js';
import { loadDir } from '../src/exec/runtime/node.js';
import type { TsTargetInfo } from '../src/exec/runtime/format.js';
import { silentProgress } from '../src/core/util/progress.js';
import { relErr } from './numeric.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');

async function compileTs(modelDir: string, outDir: string, quant = 'F32', tensorTypes: { pattern: RegExp; type: string }[] = []) {
  const source = await openCheckpoint(modelDir);
  const notes: string[] = [];
  try {
    const manifest = await compile({
      source,
      target: 'ts',
      outDir,
      passes: [],
      quant, tensorTypes,
      progress: silentProgress,
      note: (n) => notes.push(n),
    });
    return { manifest, info: manifest.targetInfo as unknown as TsTargetInfo, notes };
  } finally {
    await source.close();
  }
}

let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-ts-target-'));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

describe('ts target artifact', () => {
  it('writes weights.bin + a tensor table: 64-byte aligned offsets, lengths = shape × format, file sizes and sha256', async () => {
    const out = path.join(tmp, 'f32');
    const { manifest, info } = await compileTs(STORIES, out);
    expect(manifest.target).toBe('ts');
    expect(info.format).toBe('llmc-ts-weights');
    expect(info.version).toBe(1);
    const bin = readFileSync(path.join(out, 'weights.bin'));
    const file = manifest.files.find((f) => f.path === 'weights.bin')!;
    expect(file.size).toBe(bin.length);
    expect(file.sha256).toBe(createHash('sha256').update(bin).digest('hex'));
    const ck = await openCheckpoint(STORIES);
    try {
      expect(info.tensors.map((t) => t.name).sort()).toEqual(ck.tensors.map((t) => t.name).sort());
      for (const t of info.tensors) {
        expect(t.offset % 64).toBe(0);
        expect(t.format).toBe('F32');
        expect(t.bytes).toBe(t.shape.reduce((a, b) => a * b, 4));
        // The bytes are the checkpoint's float32 values, little-endian.
        const want = await ck.readF32(t.name);
        expect(Buffer.from(bin.subarray(t.offset, t.offset + t.bytes)).equals(Buffer.from(want.buffer, want.byteOffset, want.byteLength))).toBe(true);
      }
    } finally {
      await ck.close();
    }
  });

  it('Q8_0 / Q4_0 tensors are byte-identical to src/core/quant (the GGUF quantizers); norms stay F32; odd rows fall back with a note', async () => {
    for (const q of ['Q8_0', 'Q4_0'] as const) {
      const out = path.join(tmp, q);
      const { info, notes } = await compileTs(STORIES, out, q);
      const bin = readFileSync(path.join(out, 'weights.bin'));
      const ck = await openCheckpoint(STORIES);
      try {
        const byName = new Map(info.tensors.map((t) => [t.name, t]));
        const qproj = byName.get('model.layers.0.self_attn.q_proj.weight')!;
        expect(qproj.format).toBe(q);
        const want = quantize(q, await ck.readF32(qproj.name), qproj.shape[1]);
        expect(Buffer.from(bin.subarray(qproj.offset, qproj.offset + qproj.bytes)).equals(Buffer.from(want))).toBe(true);
        expect(byName.get('model.layers.0.input_layernorm.weight')!.format).toBe('F32');
        expect(byName.get('model.embed_tokens.weight')!.format).toBe(q);
        // stories260K's intermediate size is 172: down_proj rows are not whole 32-blocks -> F16 (ggml's fallback).
        expect(byName.get('model.layers.0.mlp.down_proj.weight')!.format).toBe('F16');
        expect(notes.join('\n')).toMatch(/down_proj.*F16/);
      } finally {
        await ck.close();
      }
    }
  });

  it('same inputs give identical bytes; --tensor-type overrides apply', async () => {
    const a = await compileTs(STORIES, path.join(tmp, 'det-a'), 'Q8_0', [{ pattern: /lm_head|embed/, type: 'F16' }]);
    const b = await compileTs(STORIES, path.join(tmp, 'det-b'), 'Q8_0', [{ pattern: /lm_head|embed/, type: 'F16' }]);
    expect(a.manifest.files).toEqual(b.manifest.files);
    expect(readFileSync(path.join(tmp, 'det-a/llmc-manifest.json'))).toEqual(readFileSync(path.join(tmp, 'det-b/llmc-manifest.json')));
    expect(a.info.tensors.find((t) => t.name === 'model.embed_tokens.weight')!.format).toBe('F16');
  });

  it('rejects a --quant the runtime cannot run, before writing anything', async () => {
    const out = path.join(tmp, 'bad-quant');
    await expect(compileTs(STORIES, out, 'Q5_K')).rejects.toThrow(/unknown quant type "Q5_K" for target ts/);
    expect(await fsp.readdir(out).catch(() => [])).toEqual([]);
  });
});

describe('every fixture architecture runs in the TS runtime and matches the onnxruntime engine', () => {
  for (const arch of FIXTURE_ARCHS) {
    it(arch, async () => {
      const src = path.join(tmp, `fx-${arch}`);
      await generateFixture(src, { arch, seed: 3 });
      const out = path.join(tmp, `fx-${arch}-ts`);
      const { manifest } = await compileTs(src, out);
      expect(manifest.files.map((f) => f.path)).toContain('tokenizer.json');
      expect(readFileSync(path.join(out, 'tokenizer.json'), 'utf8')).toBe(readFileSync(path.join(src, 'tokenizer.json'), 'utf8'));
      const model = await loadDir(out, { verifyChecksums: true });
      const ids = [1, 5, 9, 17, 33, 2, 40, 7, 11, 3];
      const ck = await openCheckpoint(src);
      const engine = await Engine.open(ck, { threads: 1 });
      try {
        const want = await engine.logits(ids);
        expect(relErr(model.forward(ids), want)).toBeLessThan(1e-4);
        // The cache path too: a prefill then single steps, against the engine's last-position logits.
        const V = model.spec.vocabSize;
        const cache = model.newCache();
        model.forward(ids.slice(0, 6), cache);
        for (let t = 6; t < ids.length; t++) {
          expect(relErr(model.forward([ids[t]], cache), want.subarray(t * V, (t + 1) * V))).toBeLessThan(1e-4);
        }
      } finally {
        await engine.close();
        await ck.close();
      }
    });
  }
});

describe('rope scaling reaches the runtime', () => {
  for (const scaling of [
    { rope_type: 'linear', factor: 2 },
    { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 16 },
    // The attention factor scales cos and sin; longrope switches to its long factors past 16 positions.
    { rope_type: 'yarn', factor: 4, original_max_position_embeddings: 16, attention_factor: 1.5 },
    { rope_type: 'longrope', short_factor: [1, 1, 1.5, 2, 2, 3, 4, 4], long_factor: [1, 2, 3, 5, 8, 13, 21, 34], original_max_position_embeddings: 16, attention_factor: 1.2 },
  ]) {
    it(scaling.rope_type, async () => {
      const src = path.join(tmp, `rope-${scaling.rope_type}`);
      await generateFixture(src, { arch: 'llama', seed: 4, tokenizer: 'none' });
      const cfgFile = path.join(src, 'config.json');
      const cfg = JSON.parse(readFileSync(cfgFile, 'utf8'));
      await fsp.writeFile(cfgFile, JSON.stringify({ ...cfg, rope_scaling: scaling }));
      const out = path.join(src, 'ts');
      const { manifest } = await compileTs(src, out);
      expect(manifest.arch.ropeScaling?.type).toBe(scaling.rope_type);
      const model = await loadDir(out);
      const ids = Array.from({ length: 40 }, (_, i) => (i * 13 + 5) % 500);
      const ck = await openCheckpoint(src);
      const engine = await Engine.open(ck, { threads: 1 });
      try {
        expect(relErr(model.forward(ids), await engine.logits(ids))).toBeLessThan(1e-4);
      } finally {
        await engine.close();
        await ck.close();
      }
      // And it matters: the same weights without scaling give other logits.
      await fsp.writeFile(cfgFile, JSON.stringify(cfg));
      await compileTs(src, path.join(src, 'ts-plain'));
      const plain = await loadDir(path.join(src, 'ts-plain'));
      expect(relErr(plain.forward(ids), model.forward(ids))).toBeGreaterThan(1e-3);
    });
  }
});

describe('quantized artifacts end to end: runtime = engine on the round-tripped (dequantized) weights', () => {
  // Rows of 256 so Q4_K applies (its quantizer is slow: keep that model to one small layer).
  const dims = { hiddenSize: 256, intermediateSize: 256, numHeads: 4, numKvHeads: 2, expertIntermediateSize: 256, vocabSize: 256 };
  for (const [arch, quant] of [['llama', 'Q8_0'], ['llama', 'Q4_0'], ['llama', 'Q4_K'], ['mixtral', 'Q8_0'], ['qwen2_moe', 'Q4_0']] as const) {
    it(`${arch} ${quant}`, async () => {
      const src = path.join(tmp, `q-${arch}-${quant === 'Q4_K' ? 'k' : 'x'}`);
      const d = quant === 'Q4_K' ? { ...dims, numLayers: 1 } : dims;
      if (!(await fsp.stat(src).catch(() => null))) await generateFixture(src, { arch, seed: 9, tokenizer: 'none', dims: d });
      const out = path.join(tmp, `q-${arch}-${quant}`);
      const { info } = await compileTs(src, out, quant);
      const entries = new Map(info.tensors.map((t) => [t.name, t]));
      expect([...entries.values()].map((e) => e.format)).toContain(quant);
      const bin = readFileSync(path.join(out, 'weights.bin'));
      // The JS kernels (f32 activations) run the artifact's bytes as they are; the wasm kernels quantize
      // the activations as llama.cpp does (test/runtime-qdot.test.ts checks them against ggml and llama.cpp).
      const model = await loadDir(out, { wasm: false });
      const ck = await openCheckpoint(src);
      // The reference: every tensor replaced by src/core/quant's dequantize() of the artifact's own bytes, run on onnxruntime.
      const rounded = transformSource(ck, {
        label: 'roundtrip',
        paramsHash: quant,
        rewrite: (name, data) => {
          const e = entries.get(name)!;
          if (e.format === 'F32') return data;
          return dequantize(e.format as QuantType, new Uint8Array(bin.subarray(e.offset, e.offset + e.bytes)), data.length);
        },
      });
      const engine = await Engine.open(rounded, { threads: 1 });
      try {
        const ids = [1, 5, 9, 17, 33, 2, 40, 7, 11, 3];
        expect(relErr(model.forward(ids), await engine.logits(ids))).toBeLessThan(1e-4);
      } finally {
        await engine.close();
        await ck.close();
      }
    });
  }
});
