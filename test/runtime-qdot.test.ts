/**
 * The integer-activation kernels (src/exec/runtime/qdot.ts) against a scalar reference of llama.cpp's
 * vec_dot (test/ggml-vecdot.ts): x quantized exactly as ggml quantizes it, then every output within
 * f32 rounding of the reference's value, on shapes with odd row counts, row ranges and a column
 * prefix that cuts a block (its tail runs on f32, as before).
 */
import { describe, expect, it } from 'vitest';
import { dequantize, quantize } from '../src/core/quant/quantize.js';
import { Rng } from '../src/core/util/rng.js';
import { matmul, Weight } from '../src/exec/runtime/kernels.js';
import { Q8_0_BYTES, Q8_K_BYTES, quantizeQ8_0, quantizeQ8_K, type QdotFormat } from '../src/exec/runtime/qdot.js';
import { WasmArena } from '../src/exec/runtime/wasm.js';
import { ggmlVecDot, refQ8_0, refQ8_K } from './ggml-vecdot.js';

const randn = (n: number, rng: Rng, scale = 1) => Float32Array.from({ length: n }, () => rng.normal() * scale);

describe('integer-activation kernels (llama.cpp vec_dot numerics)', () => {
  it('x is quantized exactly as ggml quantize_row_q8_0_ref / quantize_row_q8_K_ref', () => {
    const rng = new Rng(3);
    const x = randn(768, rng);
    x.fill(0, 256, 512); // an all-zero K block
    x[5] = 0.5; // ties and exact values appear through the scaled products too
    const buf = new ArrayBuffer(8192);
    const [f32, i16, i8] = [new Float32Array(buf), new Int16Array(buf), new Int8Array(buf)];
    quantizeQ8_0(x, 0, 24, f32, i8, 64);
    const r0 = refQ8_0(x);
    for (let b = 0; b < 24; b++) {
      expect(f32[(64 + b * Q8_0_BYTES) >> 2]).toBe(r0.d[b]);
      expect([...i8.subarray(64 + b * Q8_0_BYTES + 4, 64 + b * Q8_0_BYTES + 36)]).toEqual([...r0.q.subarray(b * 32, b * 32 + 32)]);
    }
    quantizeQ8_K(x, 0, 3, f32, i16, i8, 64);
    const rk = refQ8_K(x);
    for (let b = 0; b < 3; b++) {
      const o = 64 + b * Q8_K_BYTES;
      expect(f32[o >> 2]).toBe(rk.d[b]);
      expect([...i8.subarray(o + 52, o + 308)]).toEqual([...rk.q.subarray(b * 256, b * 256 + 256)]);
      expect([...i16.subarray((o + 4) >> 1, (o + 36) >> 1)]).toEqual(rk.bsums.slice(b * 16, b * 16 + 16));
      for (let s = 0; s < 8; s++) expect(i16[(o + 36 + 2 * s) >> 1]).toBe(rk.bsums[b * 16 + 2 * s] + rk.bsums[b * 16 + 2 * s + 1]);
    }
  });

  const formats: [QdotFormat, number][] = [['Q8_0', 800], ['Q4_0', 800], ['Q5_0', 800], ['Q4_K', 768], ['Q6_K', 768]];
  for (const [format, cols] of formats) {
    it(`${format}: every output within f32 rounding of ggml's vec_dot (T = 1, 3, rowwise 6; row ranges; a cut block)`, () => {
      const rng = new Rng(11);
      const rows = 13;
      const f = randn(rows * cols, rng, 0.3);
      const bytes = quantize(format, f, cols);
      const deq = dequantize(format, bytes, rows * cols);
      const arena = WasmArena.create(bytes.length + 128, cols)!;
      const mem = arena.weights(bytes.length + 128);
      mem.set(bytes, 64);
      const w = new Weight('w', format, rows, cols, mem.subarray(64, 64 + bytes.length), arena);
      expect(w.arena).not.toBeNull();
      const bs = format.endsWith('K') ? 256 : 32;
      for (const [T, rowwise] of [[1, false], [3, false], [6, true]] as const) {
        const x = randn(T * cols, rng);
        for (const [r0, nRows, nCols] of [[0, rows, cols], [2, 9, cols], [0, rows, 300]]) {
          const y = new Float32Array(T * nRows);
          matmul(w, x, T, cols, y, nRows, { rowStart: r0, nRows, nCols, rowwise });
          const whole = nCols - (nCols % bs);
          for (let t = 0; t < T; t++)
            for (let r = 0; r < nRows; r++) {
              const row = bytes.subarray((r0 + r) * w.rowBytes, (r0 + r + 1) * w.rowBytes);
              const ref = ggmlVecDot(format, row, x.subarray(t * cols, (t + 1) * cols), whole);
              let tail = 0;
              let tailAbs = 0;
              for (let c = whole; c < nCols; c++) {
                tail += deq[(r0 + r) * cols + c] * x[t * cols + c];
                tailAbs += Math.abs(deq[(r0 + r) * cols + c] * x[t * cols + c]);
              }
              expect(ref.scale).toBeGreaterThan(0.1);
              expect(Math.abs(y[t * nRows + r] - ref.value - tail)).toBeLessThanOrEqual(2e-6 * (ref.scale + tailAbs));
            }
        }
      }
    });
  }
});
