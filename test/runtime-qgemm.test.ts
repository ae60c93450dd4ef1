/**
 * The tiled integer-activation kernels (src/exec/runtime/qgemm.ts): every output bit for bit the
 * one-token kernel's (src/exec/runtime/qdot.ts) at several tile shapes, on shapes that leave rows and
 * tokens outside whole tiles; within f32 rounding of a float64 reference of the dequantized weights ×
 * the quantized x (ggml's quantize_row_q8_0_ref, transcribed in test/ggml-vecdot.ts); row ranges and
 * matmulGroup equal to the whole call; stories260K Q8_0 logits equal with the tiles on and off.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { dequantize, quantize } from '../src/core/quant/quantize.js';
import { f16Table } from '../src/core/util/half.js';
import { Rng } from '../src/core/util/rng.js';
import { kernelModuleBytes } from '../src/exec/runtime/kernel-module.js';
import { matmul, matmulGroup, Weight } from '../src/exec/runtime/kernels.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { QACT_KERNELS } from '../src/exec/runtime/qact.js';
import { QDOT_KERNELS } from '../src/exec/runtime/qdot.js';
import { QGEMM_KERNELS, QGEMM_TILE, QGEMM_WIDEN, QX16_BYTES, qgemmBody, type QgemmFormat } from '../src/exec/runtime/qgemm.js';
import { useQuantizedTiles, WasmArena } from '../src/exec/runtime/wasm.js';
import { refQ8_0 } from './ggml-vecdot.js';
import { STORIES } from './gguf-helpers.js';
import { compileTs } from './ts-artifact.js';

const randn = (n: number, rng: Rng, s = 1) => Float32Array.from({ length: n }, () => rng.normal() * s);
const FORMATS = Object.keys(QGEMM_KERNELS) as QgemmFormat[];
const W_BYTES: Record<QgemmFormat, number> = { Q8_0: 34, Q4_0: 18 };

describe('tiled integer-activation kernels', () => {
  for (const format of FORMATS) {
    it(`${format}: the tile kernel at shapes 1×1, 2×3, 3×2 and the default equals the one-token kernel bit for bit`, () => {
      const shapes: [number, number][] = [[1, 1], [2, 3], [3, 2], [QGEMM_TILE.rows, QGEMM_TILE.tokens]];
      const I = new Array(10).fill(0x7f);
      const mod = new WebAssembly.Module(kernelModuleBytes([
        { name: 'qdot', params: I, body: QDOT_KERNELS[format].body() },
        { name: 'quant', params: [0x7f, 0x7f, 0x7f], body: QACT_KERNELS.q8_0.body() },
        { name: 'widen', params: [0x7f, 0x7f, 0x7f], body: QGEMM_WIDEN.body() },
        ...shapes.map(([r, t]) => ({ name: `g${r}x${t}`, params: I, body: qgemmBody(format, r, t) })),
      ]));
      const rng = new Rng(3);
      const [rows, cols, T] = [11, 160, 7];
      const nb = cols / 32;
      const wBytes = quantize(format, randn(rows * cols, rng, 0.3), cols);
      const [TAB, XF, XQ, X16, Y, WB] = [0, 1 << 18, (1 << 18) + 8192, (1 << 18) + 16384, (1 << 18) + 32768, (1 << 18) + 40960];
      const memory = new WebAssembly.Memory({ initial: 6 + Math.ceil(wBytes.length / 65536) });
      const ex = new WebAssembly.Instance(mod, { env: { memory } }).exports as Record<string, (...a: number[]) => void>;
      const heap = new Float32Array(memory.buffer);
      heap.set(f16Table(), TAB);
      new Uint8Array(memory.buffer).set(wBytes, WB);
      heap.set(randn(T * cols, rng), XF >> 2);
      ex.quant(XF, XQ, nb * T);
      ex.widen(XQ, X16, nb * T);
      ex.qdot(WB, W_BYTES[format] * nb, XQ, 36 * nb, Y, 4 * rows, rows, nb, T, TAB);
      const want = heap.slice(Y >> 2, (Y >> 2) + rows * T);
      for (const [r, t] of shapes) {
        heap.fill(NaN, Y >> 2, (Y >> 2) + rows * T);
        ex[`g${r}x${t}`](WB, W_BYTES[format] * nb, X16, QX16_BYTES * nb, Y, 4 * rows, rows, nb, T, TAB);
        expect(heap.slice(Y >> 2, (Y >> 2) + rows * T), `${r}×${t}`).toEqual(want);
      }
    });

    it(`${format} through WasmArena: T = 4..70 within f32 rounding of float64, equal to one token at a time, row cuts and matmulGroup bit-identical`, () => {
      const rng = new Rng(7);
      const [rows, cols] = [13, 800];
      const bytes = quantize(format, randn(rows * cols, rng, 0.3), cols);
      const deq = dequantize(format, bytes, rows * cols);
      const arena = WasmArena.create(2 * bytes.length + 128, cols)!;
      const mem = arena.weights(2 * bytes.length + 128);
      mem.set(bytes, 64);
      mem.set(bytes, 64 + bytes.length);
      const w = new Weight('w', format, rows, cols, mem.subarray(64, 64 + bytes.length), arena);
      const w2 = new Weight('w2', format, rows, cols, mem.subarray(64 + bytes.length, 64 + 2 * bytes.length), arena);
      expect(w.arena).not.toBeNull();
      for (const T of [4, 5, 9, 70]) {
        const x = randn(T * cols, rng);
        const y = new Float32Array(T * rows);
        matmul(w, x, T, cols, y, rows);
        for (let t = 0; t < T; t++) {
          const one = new Float32Array(rows);
          matmul(w, x.subarray(t * cols, (t + 1) * cols), 1, cols, one, rows);
          expect(y.subarray(t * rows, (t + 1) * rows), `T=${T} t=${t}`).toEqual(one);
          const xq = refQ8_0(x.subarray(t * cols, (t + 1) * cols));
          for (let r = 0; r < rows; r++) {
            // float64: Σ over blocks of the dequantized weights × d_x · q_x
            let ref = 0;
            let mag = 0;
            for (let c = 0; c < cols; c++) {
              const v = deq[r * cols + c] * xq.d[c >> 5] * xq.q[c];
              ref += v;
              mag += Math.abs(v);
            }
            expect(Math.abs(y[t * rows + r] - ref)).toBeLessThanOrEqual(2e-6 * mag);
          }
        }
        // rows cut anywhere (the worker pool's chunks) give the whole call's bits
        for (const cut of [1, 6]) {
          const head = new Float32Array(T * cut);
          const tail = new Float32Array(T * (rows - cut));
          matmul(w, x, T, cols, head, cut, { rowStart: 0, nRows: cut });
          matmul(w, x, T, cols, tail, rows - cut, { rowStart: cut, nRows: rows - cut });
          for (let t = 0; t < T; t++) {
            expect(head.subarray(t * cut, (t + 1) * cut)).toEqual(y.subarray(t * rows, t * rows + cut));
            expect(tail.subarray(t * (rows - cut), (t + 1) * (rows - cut))).toEqual(y.subarray(t * rows + cut, (t + 1) * rows));
          }
        }
        const g1 = new Float32Array(T * rows);
        const g2 = new Float32Array(T * rows);
        matmulGroup([w, w2], x, T, cols, [{ y: g1, yStride: rows }, { y: g2, yStride: rows }], cols);
        expect(g1).toEqual(y);
        expect(g2).toEqual(y);
      }
    });
  }

  it('a 64-token K-quant call as wide as the arena keeps its quantized x inside its scratch (the weights stay intact)', () => {
    const rng = new Rng(9);
    const [rows, cols, T] = [5, 768, 64];
    const bytes = quantize('Q4_K', randn(rows * cols, rng, 0.3), cols);
    const arena = WasmArena.create(bytes.length + 64, cols)!;
    const mem = arena.weights(bytes.length + 64);
    mem.set(bytes, 64);
    const w = new Weight('w', 'Q4_K', rows, cols, mem.subarray(64, 64 + bytes.length), arena);
    const x = randn(T * cols, rng);
    const y = new Float32Array(T * rows);
    matmul(w, x, T, cols, y, rows);
    expect(mem.subarray(64, 64 + bytes.length)).toEqual(bytes);
    const one = new Float32Array(rows);
    matmul(w, x.subarray((T - 1) * cols), 1, cols, one, rows);
    expect(y.subarray((T - 1) * rows)).toEqual(one);
  });

  it('stories260K Q8_0: a 32-token prefill gives the same logits, bit for bit, with the tiles and without', async () => {
    const tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-qgemm-'));
    try {
      await compileTs(STORIES, tmp, 'Q8_0');
      const model = await loadDir(tmp);
      const seq = Array.from({ length: 32 }, (_, i) => (i * 37 + 1) % model.spec.vocabSize);
      const tiled = model.forward(seq);
      useQuantizedTiles(false);
      let plain: Float32Array;
      try {
        plain = model.forward(seq);
      } finally {
        useQuantizedTiles(true);
      }
      expect(tiled.length).toBe(seq.length * model.spec.vocabSize);
      expect(tiled).toEqual(plain);
    } finally {
      await fsp.rm(tmp, { recursive: true, force: true });
    }
  });
});
