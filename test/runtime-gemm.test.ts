/**
 * The register-tiled T > 1 kernels (src/exec/runtime/gemm.ts): against a float64 reference on small
 * random cases whose shapes leave rows and tokens outside whole tiles, row ranges cut on tile
 * boundaries equal to the bit (the worker pool splits rows so), and stories260K's reference ids
 * through one batched prefill.
 */
import { readFileSync } from 'node:fs';
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { dequantize, quantize } from '../src/core/quant/quantize.js';
import { Rng } from '../src/core/util/rng.js';
import { GEMM_TILE, gemmUsesFma, relaxedSimd } from '../src/exec/runtime/gemm.js';
import { matmul, Weight } from '../src/exec/runtime/kernels.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { compileTs } from './ts-artifact.js';
import { WasmArena } from '../src/exec/runtime/wasm.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');

function arenaWeight(format: 'F32' | 'Q8_0', rows: number, cols: number, rng: Rng) {
  const f = Float32Array.from({ length: rows * cols }, () => rng.normal() * 0.2);
  const bytes = format === 'F32' ? new Uint8Array(f.buffer) : quantize(format, f, cols);
  const ref = format === 'F32' ? f : dequantize(format, bytes, rows * cols);
  const arena = WasmArena.create(bytes.length + 64, Math.max(rows, cols))!;
  const mem = arena.weights(bytes.length + 64);
  mem.set(bytes, 64);
  const w = new Weight('w', format, rows, cols, mem.subarray(64, 64 + bytes.length), arena);
  expect(w.arena).not.toBeNull();
  return { w, ref };
}

describe('tiled T > 1 matmul kernels (WebAssembly SIMD)', () => {
  // Quantized weights take integer activations, prefill included (test/runtime-qdot.test.ts), not the tiles.
  for (const format of ['F32'] as const) {
    it(`${format}: every output within 1e-6 of a float64 reference (relative to Σ|w·x|), leftover rows and tokens included`, () => {
      const rng = new Rng(11);
      const rows = 3 * 2 * 2 + 1; // whole tiles of both shapes and a leftover row
      const cols = format === 'F32' ? 68 : 96;
      const { w, ref } = arenaWeight(format, rows, cols, rng);
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
            if (!(err < 1e-6)) throw new Error(`${format} T=${T} t=${t} r=${r}: relative error ${err}`);
          }
        }
      }
    });

    it(`${format}: row ranges cut at multiples of the tile's rows give the full call's bits`, () => {
      const rng = new Rng(5);
      const rows = 24;
      const cols = 128;
      const T = 9;
      const { w } = arenaWeight(format, rows, cols, rng);
      const x = Float32Array.from({ length: T * cols }, () => rng.normal());
      const full = new Float32Array(T * rows);
      matmul(w, x, T, cols, full, rows);
      const step = GEMM_TILE[format].rows;
      const parts = new Float32Array(T * rows);
      for (const [r0, r1] of [[0, 2 * step], [2 * step, 5 * step], [5 * step, rows]]) {
        matmul(w, x, T, cols, parts.subarray(r0), rows, { rowStart: r0, nRows: r1 - r0 });
      }
      expect(Array.from(parts)).toEqual(Array.from(full));
    });
  }
});

describe('stories260K through a batched prefill', () => {
  it("one forward over the reference sequence predicts reference.json's greedy ids at every position", async () => {
    const ref = JSON.parse(readFileSync(path.join(STORIES, 'reference.json'), 'utf8')) as { prompt_ids: number[]; greedy_ids: number[] };
    const tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-gemm-'));
    try {
      await compileTs(STORIES, tmp);
      const model = await loadDir(tmp);
      const seq = [...ref.prompt_ids, ...ref.greedy_ids.slice(0, -1)];
      const logits = model.forward(seq);
      const V = model.spec.vocabSize;
      const ids = seq.map((_, t) => {
        let best = 0;
        for (let i = 1; i < V; i++) if (logits[t * V + i] > logits[t * V + best]) best = i;
        return best;
      });
      expect(ids).toEqual(ref.greedy_ids);
    } finally {
      await fsp.rm(tmp, { recursive: true, force: true });
    }
  });
});
