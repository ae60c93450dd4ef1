/**
 * Quantizers: hand-worked blocks (expected bytes derived in the comments, not by running the code),
 * format geometry, llama.cpp's fallback rule, round-trip properties, determinism, and the worker pool.
 * Byte-for-byte agreement with real ggml on large inputs is in quant-ggml.test.ts.
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, test } from 'vitest';
import { LlmcError } from '../src/core/errors.js';
import {
  closeQuantWorkers, defaultQuantThreads, dequantize, fallbackType, isQuantType, quantize, quantizeParallel, QUANT_TYPES, quantTypeFromGgml,
  resolveWorkerScript, rowBytes, type QuantType,
} from '../src/core/quant/index.js';
import { Rng } from '../src/core/util/rng.js';

const TYPES = Object.keys(QUANT_TYPES) as QuantType[];
const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const f16le = (h: number) => [h & 0xff, h >> 8];
const block = (n: number, f: (j: number) => number) => Float32Array.from({ length: n }, (_, j) => f(j));
const fill = (n: number, v: number) => new Array<number>(n).fill(v);

afterAll(() => closeQuantWorkers());

describe('format geometry', () => {
  test('ggml enum values and block sizes (ggml.h, ggml-common.h)', () => {
    const expected: Record<QuantType, [number, number, number]> = {
      F32: [0, 1, 4], F16: [1, 1, 2], Q4_0: [2, 32, 18], Q4_1: [3, 32, 20], Q5_0: [6, 32, 22], Q5_1: [7, 32, 24],
      Q8_0: [8, 32, 34], Q2_K: [10, 256, 84], Q3_K: [11, 256, 110], Q4_K: [12, 256, 144], Q5_K: [13, 256, 176],
      Q6_K: [14, 256, 210], BF16: [30, 1, 2], IQ4_NL: [20, 32, 18], IQ4_XS: [23, 256, 136],
    };
    for (const t of TYPES) {
      const q = QUANT_TYPES[t];
      expect([q.ggmlType, q.blockSize, q.typeSize], t).toEqual(expected[t]);
      expect(quantTypeFromGgml(q.ggmlType)).toBe(t);
    }
    expect(TYPES.length).toBe(15);
  });

  test('rowBytes and output sizes', () => {
    expect(rowBytes('Q4_K', 4096)).toBe(16 * 144);
    expect(rowBytes('Q6_K', 256)).toBe(210);
    expect(rowBytes('Q8_0', 64)).toBe(68);
    expect(rowBytes('F16', 7)).toBe(14);
    expect(rowBytes('F32', 3)).toBe(12);
    expect(rowBytes('Q2_K', 512)).toBe(168);
    const x = new Float32Array(3 * 512);
    for (const t of TYPES) expect(quantize(t, x, 512).length, t).toBe(3 * rowBytes(t, 512));
  });

  test('isQuantType', () => {
    expect(isQuantType('Q4_K')).toBe(true);
    expect(isQuantType('Q4_K_M')).toBe(false);
    expect(isQuantType('q4_k')).toBe(false);
    expect(isQuantType('toString')).toBe(false);
  });

  test('bad shapes raise LlmcError', () => {
    expect(() => rowBytes('Q4_K', 100)).toThrow(LlmcError);
    expect(() => quantize('Q4_K', new Float32Array(100), 100)).toThrow(/multiple of the block size 256/);
    expect(() => quantize('Q8_0', new Float32Array(100), 64)).toThrow(LlmcError);
    expect(() => dequantize('Q8_0', new Uint8Array(33), 32)).toThrow(LlmcError);
    expect(() => rowBytes('Q9_9' as QuantType, 32)).toThrow(/unknown tensor type/);
  });
});

describe('fallbackType = llama.cpp tensor_type_fallback (llama-quant.cpp)', () => {
  test.each([
    ['Q4_K', 4096, 'Q4_K'], ['Q4_K', 4128, 'Q5_0'], ['Q5_K', 4128, 'Q5_1'], ['Q6_K', 4128, 'Q8_0'],
    ['Q2_K', 96, 'Q4_0'], ['Q3_K', 96, 'Q4_0'], ['Q4_K', 172, 'F16'], ['Q6_K', 64, 'Q8_0'],
    ['Q8_0', 96, 'Q8_0'], ['Q8_0', 100, 'F16'], ['Q4_0', 48, 'F16'], ['F16', 7, 'F16'], ['F32', 5, 'F32'], ['BF16', 3, 'BF16'],
  ] as [QuantType, number, QuantType][])('%s with rows of %i -> %s', (t, n, want) => {
    expect(fallbackType(t, n)).toBe(want);
  });
});

describe('hand-worked blocks', () => {
  test('Q8_0: amax 127 gives d = 1 and codes round-half-away(x)', () => {
    // d = 127/127 = 1 -> f16 0x3c00; id = 1; roundf: 0.5 -> 1, -0.5 -> -1, 2.5 -> 3, -2.5 -> -3, 3.49 -> 3
    const x = block(32, (j) => [127, -127, 0.5, -0.5, 1.5, 2.5, -2.5, 0, 3.49][j] ?? 0);
    const codes = [127, -127, 1, -1, 2, 3, -3, 0, 3, ...fill(23, 0)].map((c) => c & 0xff);
    expect(hex(quantize('Q8_0', x, 32))).toBe(hex(Uint8Array.from([...f16le(0x3c00), ...codes])));
  });

  test('Q8_0: x_j = j/8 has d = 3.875/127 and codes round(127 j / 31)', () => {
    // d = 3.875/127 = 0.0305118 = 1.952756 * 2^-6 -> exponent 9, mantissa round(0.952756*1024 = 975.6) = 976 -> 0x27d0.
    // x*id = (j/8)(127/3.875) = 127j/31, never within 1/62 of a half, so code = floor((254 j + 31) / 62).
    const x = block(32, (j) => j / 8);
    const codes = Array.from({ length: 32 }, (_, j) => Math.floor((254 * j + 31) / 62));
    expect(hex(quantize('Q8_0', x, 32))).toBe(hex(Uint8Array.from([...f16le(0x27d0), ...codes])));
  });

  test('Q4_0: the sign of the max-magnitude element picks the sign of d', () => {
    // x_j = (j-16)/2: max magnitude is x_0 = -8, d = -8/-8 = 1; code = min(15, trunc(x + 8.5)) = min(15, floor((j+1)/2)).
    // Negating the block makes the max +8, d = -1 (0xbc00), x*id the same, so the same codes.
    const code = (j: number) => Math.min(15, Math.floor((j + 1) / 2));
    const qs = Array.from({ length: 16 }, (_, j) => code(j) | (code(j + 16) << 4));
    expect(hex(quantize('Q4_0', block(32, (j) => (j - 16) / 2), 32))).toBe(hex(Uint8Array.from([...f16le(0x3c00), ...qs])));
    expect(hex(quantize('Q4_0', block(32, (j) => (16 - j) / 2), 32))).toBe(hex(Uint8Array.from([...f16le(0xbc00), ...qs])));
  });

  test('Q4_0: equal |max| of both signs: the first one wins', () => {
    // [8, -8, 0...]: max = +8, d = -1: codes 8*-1+8.5 = 0.5 -> 0; -8 -> 16.5 -> 16 -> clamped 15; 0 -> 8.
    // [-8, 8, 0...]: max = -8, d = +1: codes -8+8.5 -> 0; 8 -> 15 (clamped); 0 -> 8. Same nibbles, d differs.
    const qs = [0x80, 0x8f, ...fill(14, 0x88)];
    expect(hex(quantize('Q4_0', block(32, (j) => [8, -8][j] ?? 0), 32))).toBe(hex(Uint8Array.from([...f16le(0xbc00), ...qs])));
    expect(hex(quantize('Q4_0', block(32, (j) => [-8, 8][j] ?? 0), 32))).toBe(hex(Uint8Array.from([...f16le(0x3c00), ...qs])));
  });

  test('Q4_1: x_j = j/8 (and shifted by 1): d = 3.875/15, codes floor((30 j + 31)/62)', () => {
    // d = 0.2583333 = 1.0333333 * 2^-2 -> exponent 13 (0x3400), mantissa round(34.13) = 34 -> 0x3422; m = min.
    // (x - min) * id = 15j/31 (never near a half) -> code = trunc(15j/31 + 0.5).
    const code = (j: number) => Math.floor((30 * j + 31) / 62);
    const qs = Array.from({ length: 16 }, (_, j) => code(j) | (code(j + 16) << 4));
    expect(hex(quantize('Q4_1', block(32, (j) => j / 8), 32))).toBe(hex(Uint8Array.from([...f16le(0x3422), ...f16le(0), ...qs])));
    expect(hex(quantize('Q4_1', block(32, (j) => 1 + j / 8), 32))).toBe(hex(Uint8Array.from([...f16le(0x3422), ...f16le(0x3c00), ...qs])));
  });

  test('Q5_0: x_j = (j-16)/2 has d = 0.5 and code j', () => {
    // max = x_0 = -8, d = -8/-16 = 0.5 (0x3800), id = 2: x*id + 16.5 = j + 0.5 -> code j.
    // nibbles: (j & 15) | ((j+16) & 15) << 4 = 0x11 * j; 5th bits: set for j >= 16 -> qh = 0xffff0000 (LE 00 00 ff ff).
    const qs = Array.from({ length: 16 }, (_, j) => 0x11 * j);
    expect(hex(quantize('Q5_0', block(32, (j) => (j - 16) / 2), 32))).toBe(
      hex(Uint8Array.from([...f16le(0x3800), 0, 0, 0xff, 0xff, ...qs])));
  });

  test('Q5_1: x_j = j/8 has d = 3.875/31 = 0.125 and code j', () => {
    // d = 0.125 (0x3000), m = 0, (x - 0) * 8 + 0.5 -> code j; same nibbles and qh as Q5_0 above.
    const qs = Array.from({ length: 16 }, (_, j) => 0x11 * j);
    expect(hex(quantize('Q5_1', block(32, (j) => j / 8), 32))).toBe(
      hex(Uint8Array.from([...f16le(0x3000), ...f16le(0), 0, 0, 0xff, 0xff, ...qs])));
  });

  test('zero blocks: all-zero bytes, except Q4_0/Q5_0 whose d = 0/-8 is -0 (f16 0x8000) and IQ4_NL/IQ4_XS (code of the level nearest 0)', () => {
    for (const t of TYPES) {
      const b = quantize(t, new Float32Array(256), 256);
      if (t === 'Q4_0') {
        // id = 0, code trunc(0 + 8.5) = 8 -> nibbles 0x88
        for (let k = 0; k < 8; k++) expect(hex(b.subarray(18 * k, 18 * k + 18))).toBe(hex(Uint8Array.from([0x00, 0x80, ...fill(16, 0x88)])));
      } else if (t === 'Q5_0') {
        // code trunc(16.5) = 16: low nibbles 0, every 5th bit set
        for (let k = 0; k < 8; k++) {
          expect(hex(b.subarray(22 * k, 22 * k + 22))).toBe(hex(Uint8Array.from([0x00, 0x80, 0xff, 0xff, 0xff, 0xff, ...fill(16, 0)])));
        }
      } else if (t === 'IQ4_NL') {
        // d = 0; every code is 8 (kvalues_iq4nl[8] = 1 is nearest 0)
        for (let k = 0; k < 8; k++) expect(hex(b.subarray(18 * k, 18 * k + 18))).toBe(hex(Uint8Array.from([0, 0, ...fill(16, 0x88)])));
      } else if (t === 'IQ4_XS') {
        // d = -0/32 = -0 (0x8000); block scales l = 0 + 32: low nibbles 0, high bits 2 each (0xaaaa); codes 8
        expect(hex(b)).toBe(hex(Uint8Array.from([0x00, 0x80, 0xaa, 0xaa, 0, 0, 0, 0, ...fill(128, 0x88)])));
      } else {
        expect(b.every((v) => v === 0), t).toBe(true);
      }
      expect(dequantize(t, b, 256).every((v) => v === 0), t).toBe(true);
    }
  });

  // Constant blocks of 1.0: every search in the K-quants has a closed form here.
  test('Q2_K, constant 1', () => {
    // make_qkx2_quants(nmax 3): min clamps to 0, L = 3, scale = 1/3; its error is already 0, no candidate wins.
    // Sub-scales: 15/(1/3) = 45 -> code 15 (low nibbles), no mins (max_min = 0) -> scales bytes 0x0f, dmin 0.
    // d = (1/3)/15 = 0.0222222 = 1.4222 * 2^-6 -> 0x2400 | round(0.4222*1024 = 432.4) = 432 (0x1b0) -> 0x25b0.
    // Re-quantize: (1 + 0) / (d16 * 15 = 0.33325) = 3.0007 -> code 3 -> packed bytes 0xff.
    const want = [...fill(16, 0x0f), ...fill(64, 0xff), ...f16le(0x25b0), ...f16le(0)];
    expect(hex(quantize('Q2_K', block(256, () => 1), 256))).toBe(hex(Uint8Array.from(want)));
  });

  test('Q3_K, constant 1', () => {
    // make_q3_quants(nmax 4): iscale = -4, every L = -4, sumlx = -64, suml2 = 256; no change ever improves -> scale -0.25.
    // All 16 scales -0.25: iscale = -32/-0.25 = 128, codes nearest(-32) + 32 = 0 -> scale bytes all 0; d = 1/128 (0x2000).
    // Re-quantize with d = 2^-7 * (0 - 32) = -0.25: 1/-0.25 = -4 -> stored 0: hmask 0, qs 0.
    const want = [...fill(32 + 64 + 12, 0), ...f16le(0x2000)];
    expect(hex(quantize('Q3_K', block(256, () => 1), 256))).toBe(hex(Uint8Array.from(want)));
  });

  test('Q4_K, constant 1', () => {
    // weights = sqrt(mean x^2) + |x| = 2; make_qkx2_quants(nmax 15): min -> 0, L = 15, scale = 1/15; every candidate has a
    // constant L so D = sum_w*sum_l2 - sum_l^2 = 0 exactly and none is taken. mins are -0 -> max_min 0 -> dmin 0, mins codes 0.
    // Sub-scale codes nearest(63/(1/15) * (1/15)) = 63: bytes 0..3 = 63 | (63>>4)<<6 = 0xff (j<4 and j>=4 high bits),
    // bytes 4..7 = mins = 0, bytes 8..11 = 63 & 0xf = 0x0f.
    // d = (1/15)/63 = 1/945 = 1.08360 * 2^-10 -> 0x1400 | round(0.08360*1024 = 85.6) = 86 -> 0x1456.
    // Re-quantize: 1 / (d16*63 = 0.066690) = 14.995 -> 15 -> nibbles 0xff.
    const scales = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0x0f, 0x0f, 0x0f, 0x0f];
    const want = [...f16le(0x1456), ...f16le(0), ...scales, ...fill(128, 0xff)];
    expect(hex(quantize('Q4_K', block(256, () => 1), 256))).toBe(hex(Uint8Array.from(want)));
  });

  test('Q5_K, constant 1', () => {
    // As Q4_K with nmax 31: scale 1/31, sub-scale codes 63, d = (1/31)/63 = 1/1953 = 1.04864 * 2^-11
    // -> 0x1000 | round(0.04864*1024 = 49.8) = 50 -> 0x1032. Re-quantize: 1/(d16*63 = 0.032264) = 30.99 -> 31:
    // low nibbles 0xff and every high bit set (qh 0xff).
    const scales = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0x0f, 0x0f, 0x0f, 0x0f];
    const want = [...f16le(0x1032), ...f16le(0), ...scales, ...fill(32, 0xff), ...fill(128, 0xff)];
    expect(hex(quantize('Q5_K', block(256, () => 1), 256))).toBe(hex(Uint8Array.from(want)));
  });

  test('Q6_K, constant 1', () => {
    // make_qx_quants(nmax 32, w = x^2): iscale = -32, L = -32, scale = -512/16384 = -1/32, best = 16. The candidates give L = -31
    // (sumlx^2 = 246016 = best*suml2, not better) or -32 (equal again): none taken. All 16 scales -1/32:
    // iscale = -128/(-1/32) = 4096, d = 1/4096 (0x0c00), scale codes nearest(-128) = -128 (0x80);
    // re-quantize: 1 / (2^-12 * -128) = -32 -> stored 0: ql and qh all 0.
    const want = [...fill(128 + 64, 0), ...fill(16, 0x80), ...f16le(0x0c00)];
    const q = quantize('Q6_K', block(256, () => 1), 256);
    expect(hex(q)).toBe(hex(Uint8Array.from(want)));
    expect(dequantize('Q6_K', q, 256).every((v) => v === 1)).toBe(true); // 2^-12 * -128 * (0 - 32) = 1 exactly
  });

  test('one large outlier: Q8_0 keeps it exactly-ish, the small values round to 0', () => {
    // amax = 100 -> d = 100/127; the others (|x| < 0.01) are < d/2 -> code 0; the outlier -> 127.
    const x = block(32, (j) => (j === 5 ? 100 : 0.01 * Math.sin(j)));
    const q = quantize('Q8_0', x, 32);
    expect(q[2 + 5]).toBe(127);
    for (let j = 0; j < 32; j++) if (j !== 5) expect(q[2 + j], `code ${j}`).toBe(0);
  });
});

/** Gaussian rows with a different scale per 256-block. */
function gaussian(seed: number, n: number): Float32Array {
  const rng = new Rng(seed);
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = rng.normal() * 0.05 * (1 + ((i >> 8) % 7));
  return x;
}

describe('round trip', () => {
  const x = gaussian(11, 256 * 64);

  test('32-blocks: |x - dq(q(x))| within a fraction of the block step (clamped end codes: one step)', () => {
    const f = { Q8_0: [0.57, 127], Q4_0: [1.01, 8], Q5_0: [1.01, 16], Q4_1: [0.55, 15], Q5_1: [0.55, 31] } as const;
    for (const [t, [k, levels]] of Object.entries(f) as [QuantType, readonly [number, number]][]) {
      const dq = dequantize(t, quantize(t, x, 256), x.length);
      let worst = 0;
      for (let b = 0; b < x.length; b += 32) {
        let lo = Infinity, hi = -Infinity, amax = 0;
        for (let j = b; j < b + 32; j++) { lo = Math.min(lo, x[j]); hi = Math.max(hi, x[j]); amax = Math.max(amax, Math.abs(x[j])); }
        const step = t === 'Q4_1' || t === 'Q5_1' ? (hi - lo) / levels : amax / levels;
        for (let j = b; j < b + 32; j++) worst = Math.max(worst, Math.abs(x[j] - dq[j]) / step);
      }
      expect(worst, t).toBeLessThanOrEqual(k);
      console.log(`${t}: worst |x - dq| = ${worst.toFixed(3)} steps`);
    }
  });

  // For the K-quants each element must land on the nearest point of its sub-block's grid. The grid is read back from the
  // block itself by dequantizing copies whose codes are all 0 and all 1 (layouts from ggml-common.h).
  const CODE_FIELDS: Partial<Record<QuantType, { nmax: number; set: (b: Uint8Array, c: 0 | 1) => void }>> = {
    Q2_K: { nmax: 3, set: (b, c) => b.fill(c * 0x55, 16, 80) },
    Q3_K: { nmax: 7, set: (b, c) => { b.fill(0, 0, 32); b.fill(c * 0x55, 32, 96); } },
    Q4_K: { nmax: 15, set: (b, c) => b.fill(c * 0x11, 16, 144) },
    Q5_K: { nmax: 31, set: (b, c) => { b.fill(0, 16, 48); b.fill(c * 0x11, 48, 176); } },
    Q6_K: { nmax: 63, set: (b, c) => { b.fill(c * 0x11, 0, 128); b.fill(0, 128, 192); } },
  };

  test.each(Object.keys(CODE_FIELDS) as QuantType[])('%s: every element is on the nearest point of its sub-block grid', (t) => {
    const { nmax, set } = CODE_FIELDS[t]!;
    const q = quantize(t, x, 256);
    const dq = dequantize(t, q, x.length);
    const ts = QUANT_TYPES[t].typeSize;
    let sq = 0, sx = 0, worst = 0;
    for (let b = 0; b < x.length / 256; b++) {
      const blk = q.slice(b * ts, (b + 1) * ts);
      const c0 = blk.slice(); set(c0, 0);
      const c1 = blk.slice(); set(c1, 1);
      const g0 = dequantize(t, c0, 256), g1 = dequantize(t, c1, 256);
      for (let j = 0; j < 256; j++) {
        const i = b * 256 + j;
        const step = g1[j] - g0[j];
        sq += (x[i] - dq[i]) ** 2;
        sx += x[i] ** 2;
        if (step === 0) { expect(dq[i]).toBe(g0[j]); continue; }
        const k = Math.min(nmax, Math.max(0, Math.round((x[i] - g0[j]) / step)));
        const excess = (Math.abs(x[i] - dq[i]) - Math.abs(x[i] - (g0[j] + k * step))) / Math.abs(step);
        worst = Math.max(worst, excess);
      }
    }
    expect(worst, `${t}: excess error over the nearest grid point, in steps`).toBeLessThan(1e-4);
    const rel = Math.sqrt(sq / sx);
    console.log(`${t}: relative RMS error ${rel.toFixed(4)}`);
    // Uniform quantizer theory for a Gaussian sub-block, with ~30% slack.
    expect(rel).toBeLessThan({ Q2_K: 0.45, Q3_K: 0.2, Q4_K: 0.11, Q5_K: 0.055, Q6_K: 0.025 }[t as 'Q2_K']!);
  });

  test('F16 / BF16 / F32 round trips', () => {
    expect(dequantize('F32', quantize('F32', x, 256), x.length)).toEqual(x);
    const h = dequantize('F16', quantize('F16', x, 256), x.length);
    const b = dequantize('BF16', quantize('BF16', x, 256), x.length);
    for (let i = 0; i < x.length; i++) {
      expect(Math.abs(h[i] - x[i])).toBeLessThanOrEqual(Math.max(Math.abs(x[i]) * 2 ** -11, 2 ** -25));
      expect(Math.abs(b[i] - x[i])).toBeLessThanOrEqual(Math.abs(x[i]) * 2 ** -8);
    }
  });

  test('quantize(dequantize(q)) == q for the symmetric max-scaled types (Q8_0, Q4_0, Q5_0)', () => {
    // The dequantized block's max element is code +-127 (Q8_0) or code 0 (Q4_0/Q5_0), so the recomputed d is d16 exactly.
    for (const t of ['Q8_0', 'Q4_0', 'Q5_0'] as QuantType[]) {
      const q = quantize(t, x, 256);
      expect(hex(quantize(t, dequantize(t, q, x.length), 256)) === hex(q), t).toBe(true);
    }
  });
});

describe('determinism, row independence, parallel', () => {
  const x = gaussian(5, 1024 * 96);

  test('same input -> same bytes; a row quantizes the same alone as inside the tensor', () => {
    for (const t of TYPES) {
      const all = quantize(t, x, 1024);
      expect(hex(quantize(t, x, 1024)) === hex(all), t).toBe(true);
      const rb = rowBytes(t, 1024);
      const row7 = quantize(t, x.subarray(7 * 1024, 8 * 1024), 1024);
      expect(hex(row7) === hex(all.subarray(7 * rb, 8 * rb)), t).toBe(true);
    }
  });

  test('quantizeParallel == quantize for every type (2 and 3 threads, uneven row split)', async () => {
    const script = resolveWorkerScript();
    expect(script).not.toBeNull();
    expect(script!.endsWith(path.join('dist', 'src', 'core', 'quant', 'worker.js'))).toBe(true);
    const odd = x.subarray(0, 1024 * 67); // 67 rows: chunks of unequal size
    for (const t of TYPES) {
      const ref = quantize(t, odd, 1024);
      for (const threads of [2, 3]) {
        expect(hex(await quantizeParallel(t, odd, 1024, { threads })) === hex(ref), `${t} x${threads}`).toBe(true);
      }
      // many small chunks: every lane (workers and this thread) takes several
      expect(hex(await quantizeParallel(t, odd, 1024, { threads: 3, chunkElements: 3 * 1024 })) === hex(ref), `${t} chunked`).toBe(true);
    }
    // the input is not consumed (workers get copies)
    expect(odd[0]).toBe(x[0]);
  });

  test('quantizeParallel: concurrent calls, small inputs, bad shapes', async () => {
    const [a, b] = await Promise.all([quantizeParallel('Q4_K', x, 1024, { threads: 2 }), quantizeParallel('Q8_0', x, 1024, { threads: 2 })]);
    expect(hex(a) === hex(quantize('Q4_K', x, 1024))).toBe(true);
    expect(hex(b) === hex(quantize('Q8_0', x, 1024))).toBe(true);
    const small = x.subarray(0, 512);
    expect(hex(await quantizeParallel('Q6_K', small, 256))).toBe(hex(quantize('Q6_K', small, 256)));
    await expect(quantizeParallel('Q4_K', x, 1000)).rejects.toThrow(LlmcError);
  });

  test('default threads by the machine: one for the GB/s types and under four cores, else all cores but one', () => {
    expect([2, 3, 4, 16].map((cores) => defaultQuantThreads('Q4_K', cores))).toEqual([1, 1, 3, 15]);
    expect(defaultQuantThreads('Q8_0', 16)).toBe(1);
    expect(defaultQuantThreads('F16', 16)).toBe(1);
  });

  test('compiled dist: quantizeParallel works and idle workers do not keep the process alive', () => {
    const script = resolveWorkerScript()!; // also makes sure dist/src/core/quant is current
    const index = pathToFileURL(path.join(path.dirname(script), 'index.js')).href;
    const code = `import { quantizeParallel, quantize } from '${index}';
      const x = new Float32Array(1 << 18).map((_, i) => Math.sin(i));
      const a = await quantizeParallel('Q8_0', x, 4096, { threads: 2 });
      const b = quantize('Q8_0', x, 4096);
      console.log(Buffer.from(a).equals(Buffer.from(b)) ? 'same' : 'different');`;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', code], { timeout: 60_000, encoding: 'utf8' });
    expect(out.trim()).toBe('same'); // and it returned: no closeQuantWorkers() needed for the process to end
  });
});
