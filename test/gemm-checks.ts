/**
 * The tiled F32 kernel's checks (src/exec/runtime/gemm.ts), run with plain and with relaxed-SIMD
 * multiply-adds (test/runtime-gemm.test.ts, test/runtime-gemm-fma.test.ts): every output against a
 * float64 reference on shapes that leave rows and tokens outside whole tiles, and row ranges cut at
 * the tile's rows equal to the full call's bits (the worker pool splits rows so).
 */
import { expect, it } from 'vitest';
import { Rng } from '../src/core/util/rng.js';
import { GEMM_TILE } from '../src/exec/runtime/gemm.js';
import { matmul, Weight } from '../src/exec/runtime/kernels.js';
import { WasmArena } from '../src/exec/runtime/wasm.js';

export function arenaWeight(rows: number, cols: number, rng: Rng) {
  const f = Float32Array.from({ length: rows * cols }, () => rng.normal() * 0.2);
  const bytes = new Uint8Array(f.buffer);
  const arena = WasmArena.create(bytes.length + 64, Math.max(rows, cols))!;
  const mem = arena.weights(bytes.length + 64);
  mem.set(bytes, 64);
  const w = new Weight('w', 'F32', rows, cols, mem.subarray(64, 64 + bytes.length), arena);
  expect(w.arena).not.toBeNull();
  return { w, ref: f };
}

export function tiledKernelChecks(): void {
  it('every output within 1e-6 of a float64 reference (relative to Σ|w·x|), leftover rows and tokens included', () => {
    const rng = new Rng(11);
    const rows = GEMM_TILE.rows * 4 + 1; // whole tiles and a leftover row
    const cols = 68;
    const { w, ref } = arenaWeight(rows, cols, rng);
    for (const T of [2, 3, 4, 5, 7, 12, 13]) {
      const x = Float32Array.from({ length: T * cols }, () => rng.normal());
      const y = new Float32Array(T * rows);
      matmul(w, x, T, cols, y, rows);
      for (let t = 0; t < T; t++) {
        for (let r = 0; r < rows; r++) {
          let s = 0;
          let mag = 0;
          for (let c = 0; c < cols; c++) {
            s += ref[r * cols + c] * x[t * cols + c];
            mag += Math.abs(ref[r * cols + c] * x[t * cols + c]);
          }
          const err = Math.abs(y[t * rows + r] - s) / mag;
          if (!(err < 1e-6)) throw new Error(`T=${T} t=${t} r=${r}: relative error ${err}`);
        }
      }
    }
  });

  it("row ranges cut at multiples of the tile's rows give the full call's bits", () => {
    const rng = new Rng(5);
    const rows = 24;
    const cols = 128;
    const T = 9;
    const { w } = arenaWeight(rows, cols, rng);
    const x = Float32Array.from({ length: T * cols }, () => rng.normal());
    const full = new Float32Array(T * rows);
    matmul(w, x, T, cols, full, rows);
    const step = GEMM_TILE.rows;
    const parts = new Float32Array(T * rows);
    for (const [r0, r1] of [[0, 2 * step], [2 * step, 5 * step], [5 * step, rows]]) {
      matmul(w, x, T, cols, parts.subarray(r0), rows, { rowStart: r0, nRows: r1 - r0 });
    }
    expect(Array.from(parts)).toEqual(Array.from(full));
  });
}
