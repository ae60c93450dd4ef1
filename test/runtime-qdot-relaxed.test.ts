/**
 * The integer-activation kernels with relaxed SIMD's exact integer dots (src/exec/runtime/qdot.ts,
 * `body(true)`) against the same kernels without (`body(false)`): the same weights and quantized x
 * through both give the same bits, and both are within f32 rounding of ggml's vec_dot
 * (test/ggml-vecdot.ts). Random blocks (every code value), codes at their extremes, x at ±127. Node 20
 * admits relaxed SIMD only behind a flag, set here before any kernel module is built; each test file
 * runs in its own module graph.
 */
import v8 from 'node:v8';
import { describe, expect, it, vi } from 'vitest';
import { quantize } from '../src/core/quant/quantize.js';
import { rowBytes } from '../src/core/quant/types.js';
import { f32ToF16 } from '../src/core/util/half.js';
import { Rng } from '../src/core/util/rng.js';
import { QDOT_KERNELS, type QdotFormat } from '../src/exec/runtime/qdot.js';
import { relaxedIntegerDots } from '../src/exec/runtime/relaxed.js';
import { QdotVariants } from '../bench/qdot-kernels.js';
import { ggmlVecDot } from './ggml-vecdot.js';

v8.setFlagsFromString('--experimental-wasm-relaxed-simd');

/** Block bytes and the offsets of its f16 scales. */
const LAYOUT: Record<QdotFormat, { block: number; bytes: number; f16: number[] }> = {
  Q8_0: { block: 32, bytes: 34, f16: [0] },
  Q4_0: { block: 32, bytes: 18, f16: [0] },
  Q5_0: { block: 32, bytes: 22, f16: [0] },
  Q2_K: { block: 256, bytes: 84, f16: [80, 82] },
  Q3_K: { block: 256, bytes: 110, f16: [108] },
  Q4_K: { block: 256, bytes: 144, f16: [0, 2] },
  Q6_K: { block: 256, bytes: 210, f16: [208] },
};
const FORMATS = Object.keys(LAYOUT) as QdotFormat[];
/** Whether the kernel's bytes use relaxed SIMD (the opcode prefix 0xfd, then 0x112 or 0x113 as LEB128). */
const usesRelaxedDot = (body: number[]) => body.some((b, i) => b === 0xfd && (body[i + 1] === 0x92 || body[i + 1] === 0x93) && body[i + 2] === 0x02);

/** Raw blocks: every byte `fill(i)`, the f16 scales set to finite values (Q8_0's int8 kept in −127..127, as ggml writes them). */
function rawBlocks(format: QdotFormat, n: number, fill: (i: number) => number, rng: Rng): Uint8Array {
  const { bytes, f16 } = LAYOUT[format];
  const out = Uint8Array.from({ length: n * bytes }, (_, i) => fill(i));
  for (let b = 0; b < n; b++) {
    for (const o of f16) {
      const h = f32ToF16((0.5 + rng.next()) * 0.01);
      out[b * bytes + o] = h & 0xff;
      out[b * bytes + o + 1] = h >> 8;
    }
    if (format === 'Q8_0') for (let i = 2; i < bytes; i++) if (out[b * bytes + i] === 0x80) out[b * bytes + i] = 0x81;
  }
  return out;
}

describe('relaxed integer dots in the qdot kernels', () => {
  it('are on by default where relaxed SIMD validates, and only in the formats that have them', () => {
    expect(relaxedIntegerDots()).toBe(true);
    for (const f of FORMATS) {
      expect(usesRelaxedDot(QDOT_KERNELS[f].body(false))).toBe(false);
      expect(usesRelaxedDot(QDOT_KERNELS[f].body())).toBe(f !== 'Q8_0');
    }
  });

  it('LLMC_RELAXED_SIMD=off builds the kernels without them (node.ts reads it on import)', async () => {
    const fresh = async (setting: string | undefined) => {
      vi.resetModules();
      const saved = process.env.LLMC_RELAXED_SIMD;
      if (setting === undefined) delete process.env.LLMC_RELAXED_SIMD;
      else process.env.LLMC_RELAXED_SIMD = setting;
      try {
        await import('../src/exec/runtime/node.js');
        const { QDOT_KERNELS: kernels } = await import('../src/exec/runtime/qdot.js');
        const { relaxedIntegerDots: on } = await import('../src/exec/runtime/relaxed.js');
        return { on: on(), relaxed: usesRelaxedDot(kernels.Q4_K.body()) };
      } finally {
        if (saved === undefined) delete process.env.LLMC_RELAXED_SIMD;
        else process.env.LLMC_RELAXED_SIMD = saved;
      }
    };
    expect(await fresh('off')).toEqual({ on: false, relaxed: false });
    expect(await fresh(undefined)).toEqual({ on: true, relaxed: true });
  });

  const rows = 11;
  const cols = 768;
  const T = 3;
  const kernels = new QdotVariants(cols, rows, T, rows * rowBytes('Q6_K', cols) + 64);
  for (const format of FORMATS) {
    it(`${format}: both variants give the same bits, within f32 rounding of ggml's vec_dot (random, extreme codes, x = ±127)`, () => {
      const rng = new Rng(7);
      const rb = rowBytes(format, cols);
      const nb = (rows * cols) / LAYOUT[format].block;
      const cases: [string, Uint8Array][] = [
        ['quantized', quantize(format, Float32Array.from({ length: rows * cols }, () => rng.normal() * 0.3), cols)],
        ['random bytes', rawBlocks(format, nb, () => rng.int(256), rng)],
        ['all bits set', rawBlocks(format, nb, () => 0xff, rng)],
        ['all bits clear', rawBlocks(format, nb, () => 0, rng)],
        ['0x7f / 0x81', rawBlocks(format, nb, (i) => (i & 1 ? 0x7f : 0x81), rng)],
      ];
      const xs: [string, Float32Array][] = [
        ['normal', Float32Array.from({ length: T * cols }, () => rng.normal())],
        ['±127', Float32Array.from({ length: T * cols }, (_, i) => ((i * 7) % 3 === 0 ? -1 : 1) * 3.5)],
        ['−127 only', Float32Array.from({ length: T * cols }, (_, i) => (i % 5 === 0 ? -2 : rng.next() - 0.5))],
      ];
      for (const [wName, w] of cases) {
        kernels.setWeights(w);
        for (const [xName, x] of xs) {
          kernels.setX(format, x, cols, T);
          const plain = kernels.run(false, format, rb, 0, rows, cols, T);
          const relaxed = kernels.run(true, format, rb, 0, rows, cols, T);
          expect(relaxed, `${wName}, x ${xName}`).toEqual(plain);
          // a row range gives the same rows' bits (the worker pool's cuts)
          const part = kernels.run(true, format, rb, 3, 5, cols, T);
          for (let t = 0; t < T; t++) expect(part.subarray(5 * t, 5 * t + 5)).toEqual(plain.subarray(rows * t + 3, rows * t + 8));
          for (let t = 0; t < T; t++)
            for (let r = 0; r < rows; r++) {
              const ref = ggmlVecDot(format, w.subarray(r * rb, (r + 1) * rb), x.subarray(t * cols, (t + 1) * cols), cols);
              expect(Math.abs(relaxed[t * rows + r] - ref.value), `${wName}, x ${xName}, row ${r}`).toBeLessThanOrEqual(2e-6 * ref.scale);
            }
        }
      }
    });
  }
});
