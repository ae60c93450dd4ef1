/**
 * The ONNX weight encodings' quantizers (src/exec/onnx/quant.ts) against their closed forms: every
 * dequantized value within half a step of the original (a full step where symmetric int4 clamps at
 * +7), each symmetric block's largest magnitude exact, zero points inside [0, 15], and nibbles
 * packed first-in-low as ONNX INT4 and MatMulNBits store them.
 */
import { describe, expect, it } from 'vitest';
import { Rng } from '../src/core/util/rng.js';
import { dequantizeInt4, packMatMulNBitsZeroPoints, packNibbles, paddedInt4Codes, quantizeInt4Rows, quantizeInt8Rows } from '../src/exec/onnx/quant.js';

function weights(rows: number, cols: number, seed: number): Float32Array {
  const r = new Rng(seed);
  // Heavy-ish tails and an all-zero row: the edge cases of scale choice.
  return Float32Array.from({ length: rows * cols }, (_, i) => (Math.floor(i / cols) === 1 ? 0 : (r.next() - 0.5) * (r.next() < 0.05 ? 8 : 1)));
}

describe('onnx weight quantizers', () => {
  it('int8 per row: |w − q·s| ≤ s/2, the row maximum exact', () => {
    const [R, C] = [6, 96];
    const w = weights(R, C, 1);
    const { q, scales } = quantizeInt8Rows(w, R, C, 'fp32');
    for (let r = 0; r < R; r++) {
      let max = 0;
      for (let c = 0; c < C; c++) {
        const i = r * C + c;
        expect(Math.abs(w[i] - q[i] * scales[r])).toBeLessThanOrEqual(scales[r] / 2 + 1e-7);
        max = Math.max(max, Math.abs(w[i]));
      }
      expect(Math.abs(q.subarray(r * C, (r + 1) * C).reduce((a, x) => Math.max(a, Math.abs(x)), 0))).toBe(max === 0 ? 0 : 127);
    }
  });

  for (const zeroPoints of [false, true]) {
    for (const scaleDtype of ['fp32', 'fp16'] as const) {
      it(`int4 blockwise (${zeroPoints ? 'zero points' : 'symmetric'}, ${scaleDtype} scales): within half a step`, () => {
        const [R, C, B] = [5, 128, 32];
        const w = weights(R, C, 2);
        const q = quantizeInt4Rows(w, R, C, B, zeroPoints, scaleDtype);
        const d = dequantizeInt4(q);
        for (let r = 0; r < R; r++) {
          for (let j = 0; j < C / B; j++) {
            const s = Math.abs(q.scales[r * (C / B) + j]);
            let peak = 0;
            for (let c = j * B; c < (j + 1) * B; c++) if (Math.abs(w[r * C + c]) > Math.abs(peak)) peak = w[r * C + c];
            for (let c = j * B; c < (j + 1) * B; c++) {
              const i = r * C + c;
              expect(q.codes[i]).toBeLessThanOrEqual(15);
              // Symmetric codes reach −8 but only +7: values beyond 7.5 steps clamp, a full step away at most.
              const bound = !zeroPoints && w[i] * Math.sign(-peak) > 7.5 * s ? s : s / 2;
              expect(Math.abs(w[i] - d[i])).toBeLessThanOrEqual(bound * (1 + 1e-6) + 1e-7);
            }
            if (!zeroPoints && scaleDtype === 'fp32') expect(d[r * C + j * B + [...Array(B).keys()].find((k) => w[r * C + j * B + k] === peak)!] + 0).toBe(peak + 0);
          }
        }
        if (zeroPoints) expect(q.zeroPoints!.every((z) => z >= 0 && z <= 15)).toBe(true);
      });
    }
  }

  for (const zeroPoints of [false, true]) {
    it(`int4 on rows the block does not divide (${zeroPoints ? 'zero points' : 'symmetric'}): onnxruntime's zero padding, brute force`, () => {
      // 172 = 5 × 32 + 12 (stories260K's FFN): the reference pads each row with zeros to 192, as
      // onnxruntime's matmul_4bits_quantizer.py does, and quantizes whole blocks.
      const [R, C, B, P] = [4, 172, 32, 192];
      const w = weights(R, C, 3);
      const padded = new Float32Array(R * P);
      for (let r = 0; r < R; r++) padded.set(w.subarray(r * C, (r + 1) * C), r * P);
      const want = quantizeInt4Rows(padded, R, P, B, zeroPoints, 'fp16');
      const got = quantizeInt4Rows(w, R, C, B, zeroPoints, 'fp16');
      expect(got.scales).toEqual(want.scales);
      expect(got.zeroPoints).toEqual(want.zeroPoints);
      expect(paddedInt4Codes(got)).toEqual(want.codes);
      const d = dequantizeInt4(got);
      const dp = dequantizeInt4(want);
      for (let r = 0; r < R; r++) for (let c = 0; c < C; c++) expect(d[r * C + c]).toBe(dp[r * P + c]);
    });
  }

  it('nibbles pack first-in-low, and MatMulNBits zero points two blocks per byte per row', () => {
    expect([...packNibbles(Uint8Array.from([1, 2, 3, 4, 5]))]).toEqual([0x21, 0x43, 0x05]);
    // 2 rows × 3 blocks: each row takes ceil(3/2) = 2 bytes, the last high nibble empty.
    expect([...packMatMulNBitsZeroPoints(Uint8Array.from([1, 2, 3, 4, 5, 6]), 2, 3)]).toEqual([0x21, 0x03, 0x54, 0x06]);
  });
});
