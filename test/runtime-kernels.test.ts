/**
 * The runtime's fused dequant-dot kernels against an independent path: src/core/quant's dequantize()
 * (ggml's dequantize_row_* arithmetic) followed by a plain float64 matmul.
 */
import { describe, expect, it } from 'vitest';
import { fromF32 } from '../src/core/checkpoint/safetensors.js';
import { dequantize, quantize } from '../src/core/quant/quantize.js';
import type { QuantType } from '../src/core/quant/types.js';
import { dequantRow, matmul, Weight } from '../src/exec/runtime/kernels.js';
import type { WeightFormat } from '../src/exec/runtime/format.js';
import { WasmArena, wasmSimdAvailable } from '../src/exec/runtime/wasm.js';
import { f16ToF32 } from '../src/core/util/half.js';
import { Rng } from '../src/core/util/rng.js';

function randn(n: number, rng: Rng, scale = 1): Float32Array {
  return Float32Array.from({ length: n }, () => rng.normal() * scale);
}

function makeWeight(format: WeightFormat, rows: number, cols: number, rng: Rng, wasm = false) {
  const f = randn(rows * cols, rng, 0.2);
  let bytes = format === 'F32' || format === 'F16' ? fromF32(f, format).slice() : quantize(format as QuantType, f, cols);
  const ref = format === 'F32' ? f : dequantize(format as QuantType, bytes, rows * cols);
  let arena: WasmArena | null = null;
  if (wasm) {
    // Place the bytes at a 64-aligned offset inside a WebAssembly arena, as the loader does.
    arena = WasmArena.create(bytes.length + 128, Math.max(rows, cols))!;
    const mem = arena.weights(bytes.length + 128);
    mem.set(bytes, 64);
    bytes = mem.subarray(64, 64 + bytes.length);
  }
  const w = new Weight('w', format, rows, cols, bytes, arena);
  if (wasm) expect(w.arena).not.toBeNull();
  return { w, ref };
}

/** float64 reference: y[t, r] = sum_{c < nCols} ref[(r0 + r), c] * x[t, c] (+ bias). */
function refMatmul(ref: Float32Array, cols: number, x: Float32Array, T: number, r0: number, nRows: number, nCols: number, bias?: Float32Array) {
  const y = new Float64Array(T * nRows);
  for (let t = 0; t < T; t++)
    for (let r = 0; r < nRows; r++) {
      let s = 0;
      for (let c = 0; c < nCols; c++) s += ref[(r0 + r) * cols + c] * x[t * cols + c];
      y[t * nRows + r] = s + (bias ? bias[r0 + r] : 0);
    }
  return y;
}

function expectClose(got: Float32Array, want: Float64Array) {
  let maxErr = 0;
  let maxRef = 0;
  for (let i = 0; i < want.length; i++) {
    maxErr = Math.max(maxErr, Math.abs(got[i] - want[i]));
    maxRef = Math.max(maxRef, Math.abs(want[i]));
  }
  expect(maxRef).toBeGreaterThan(0.1);
  expect(maxErr / maxRef).toBeLessThan(2e-6); // f32 accumulation (wasm) over 512 terms stays well inside this
}

const FORMATS: WeightFormat[] = ['F32', 'F16', 'Q8_0', 'Q4_0', 'Q5_0', 'Q4_K', 'Q2_K', 'Q3_K', 'Q6_K'];

describe('runtime matmul kernels', () => {
  it('WebAssembly SIMD is available here (else the F32/Q8_0 wasm cases below test nothing new)', () => {
    expect(wasmSimdAvailable()).toBe(true);
  });

  // In wasm, quantized weights take llama.cpp's integer activations (test/runtime-qdot.test.ts checks them
  // against ggml's vec_dot).
  const cases = [...FORMATS.map((f) => [f, false] as const), ...(['F32', 'F16'] as const).map((f) => [f, true] as const)];
  for (const [format, wasm] of cases) {
    it(`${format}${wasm ? ' (wasm SIMD)' : ''}: matvec and prefill matmul equal dequantize() + f64 matmul (full, row range, column prefix)`, () => {
      const rng = new Rng(7);
      const rows = 24;
      const cols = 512;
      const { w, ref } = makeWeight(format, rows, cols, rng, wasm);
      const bias = randn(rows, rng);
      for (const T of [1, 3, 7, 20, 70]) {
        const x = randn(T * cols, rng);
        // Column prefixes: whole blocks, and one that cuts a block (elastic widths need not align).
        for (const [r0, nRows, nCols] of [
          [0, rows, cols],
          [5, 11, cols],
          [0, rows, 256],
          [3, 7, 300],
        ]) {
          const y = new Float32Array(T * nRows);
          matmul(w, x, T, cols, y, nRows, { rowStart: r0, nRows, nCols, bias });
          expectClose(y, refMatmul(ref, cols, x, T, r0, nRows, nCols, bias));
        }
      }
    });
  }

  it('F16 in wasm widens every finite half exactly (zeros, subnormals, normals, ±65504)', () => {
    // All 63488 finite halves (both signs, exponent < 31) as one row each of a [N/8, 8] matrix; x = 1 at one column.
    const halves: number[] = [];
    for (let h = 0; h < 0x10000; h++) if ((h & 0x7c00) !== 0x7c00) halves.push(h);
    const n = halves.length;
    const arena = WasmArena.create(n * 2 + 64, n)!;
    const mem = arena.weights(n * 2 + 64);
    new Uint16Array(mem.buffer, mem.byteOffset, n).set(halves);
    const w = new Weight('h', 'F16', n / 8, 8, mem.subarray(0, n * 2), arena);
    expect(w.arena).not.toBeNull();
    const y = new Float32Array(n / 8);
    for (let col = 0; col < 8; col++) {
      const x = new Float32Array(8);
      x[col] = 1;
      matmul(w, x, 1, 8, y, n / 8);
      for (let r = 0; r < n / 8; r++) if (y[r] !== f16ToF32(halves[r * 8 + col])) throw new Error(`half 0x${halves[r * 8 + col].toString(16)}: ${y[r]}`);
    }
  });

  it('dequantRow decodes exactly what dequantize() does', () => {
    const rng = new Rng(3);
    for (const format of FORMATS) {
      const { w, ref } = makeWeight(format, 4, 512, rng);
      const out = new Float32Array(512);
      dequantRow(w, 2, out);
      expect(Array.from(out)).toEqual(Array.from(ref.subarray(2 * 512, 3 * 512)));
    }
  });

  it('Q4_K decoding matches a hand-built super-block (6-bit scales/mins packing, nibble order)', () => {
    // One super-block: d = 1, dmin = 0.5 (f16), per-sub-block 6-bit scales and mins packed as ggml does.
    const b = new Uint8Array(144);
    b[0] = 0x00; b[1] = 0x3c; // f16 1.0
    b[2] = 0x00; b[3] = 0x38; // f16 0.5
    const sc = [1, 2, 3, 4, 21, 38, 55, 63]; // >= 16 for j >= 4: exercises the split high bits
    const mn = [0, 2, 4, 6, 17, 33, 50, 63];
    for (let j = 0; j < 4; j++) {
      b[4 + j] = sc[j] | ((sc[j + 4] >> 4) << 6);
      b[8 + j] = mn[j] | ((mn[j + 4] >> 4) << 6);
      b[12 + j] = (sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4);
    }
    for (let i = 0; i < 128; i++) b[16 + i] = (i % 16) | (((i + 5) % 16) << 4);
    const out = new Float32Array(256);
    dequantRow(new Weight('k', 'Q4_K', 1, 256, b), 0, out);
    for (let e = 0; e < 256; e++) {
      const chunk = e >> 6; // 64 elements share 32 bytes: low nibbles first, then high nibbles
      const within = e & 63;
      const sub = 2 * chunk + (within >= 32 ? 1 : 0);
      const byte = b[16 + 32 * chunk + (within & 31)];
      const q = within >= 32 ? byte >> 4 : byte & 15;
      expect(out[e]).toBe(1 * sc[sub] * q - 0.5 * mn[sub]);
    }
  });
});
