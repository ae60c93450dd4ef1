/**
 * A scalar reference of llama.cpp's CPU dot products for quantized weights, written from ggml's C
 * (ggml-quants.c quantize_row_q8_0_ref / quantize_row_q8_K_ref; ggml-cpu/quants.c
 * ggml_vec_dot_{q8_0,q4_0,q5_0}_q8_0_generic and ggml_vec_dot_{q2_K,q3_K,q4_K,q6_K}_q8_K_generic): x quantized
 * as ggml does, integer block sums, scales in float64. Independent of src/exec/runtime.
 */
import { f16ToF32, f32ToF16 } from '../src/core/util/half.js';

const fr = Math.fround;
const roundf = (v: number) => (v < 0 ? -Math.round(-v) : Math.round(v));
const f16 = (b: Uint8Array, o: number) => f16ToF32(b[o] | (b[o + 1] << 8));

/** quantize_row_q8_0_ref: per 32 values, the f16 scale (as f32) and int8 values. */
export function refQ8_0(x: Float32Array): { d: number[]; q: Int8Array } {
  const d: number[] = [];
  const q = new Int8Array(x.length);
  for (let b = 0; b * 32 < x.length; b++) {
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[b * 32 + j]));
    const dd = fr(amax / 127);
    const id = dd ? fr(1 / dd) : 0;
    d.push(f16ToF32(f32ToF16(dd)));
    for (let j = 0; j < 32; j++) q[b * 32 + j] = roundf(fr(x[b * 32 + j] * id));
  }
  return { d, q };
}

/** quantize_row_q8_K_ref: per 256 values, the f32 scale, int8 values and the sums of 16 (bsums). */
export function refQ8_K(x: Float32Array): { d: number[]; q: Int8Array; bsums: number[] } {
  const d: number[] = [];
  const q = new Int8Array(x.length);
  const bsums: number[] = [];
  for (let b = 0; b * 256 < x.length; b++) {
    let amax = 0;
    let max = 0;
    for (let j = 0; j < 256; j++) {
      const ax = Math.abs(x[b * 256 + j]);
      if (ax > amax) [amax, max] = [ax, x[b * 256 + j]];
    }
    if (!amax) {
      d.push(0);
      for (let j = 0; j < 16; j++) bsums.push(0);
      continue;
    }
    const iscale = fr(-127 / max);
    for (let j = 0; j < 256; j++) {
      const v = fr(iscale * x[b * 256 + j]);
      // nearest_int: the float trick rounds halves to even
      const r = Math.round(v);
      const even = Math.abs(v - Math.trunc(v)) === 0.5 ? 2 * Math.round(v / 2) : r;
      q[b * 256 + j] = Math.min(127, even);
    }
    for (let s = 0; s < 16; s++) {
      let sum = 0;
      for (let j = 0; j < 16; j++) sum += q[b * 256 + 16 * s + j];
      bsums.push(sum);
    }
    d.push(fr(1 / iscale));
  }
  return { d, q, bsums };
}

/** The integer weights and scales of one block, as ggml's vec_dot reads them. */
function blocks32(format: 'Q8_0' | 'Q4_0' | 'Q5_0', row: Uint8Array, b: number): { d: number; q: number[] } {
  const bytes = { Q8_0: 34, Q4_0: 18, Q5_0: 22 }[format];
  const o = b * bytes;
  const q: number[] = new Array(32);
  if (format === 'Q8_0') for (let j = 0; j < 32; j++) q[j] = (row[o + 2 + j] << 24) >> 24;
  else if (format === 'Q4_0') for (let j = 0; j < 16; j++) [q[j], q[j + 16]] = [(row[o + 2 + j] & 15) - 8, (row[o + 2 + j] >> 4) - 8];
  else {
    const qh = (row[o + 2] | (row[o + 3] << 8) | (row[o + 4] << 16) | (row[o + 5] << 24)) >>> 0;
    for (let j = 0; j < 16; j++) {
      q[j] = ((row[o + 6 + j] & 15) | (((qh >>> j) & 1) << 4)) - 16;
      q[j + 16] = ((row[o + 6 + j] >> 4) | (((qh >>> (j + 16)) & 1) << 4)) - 16;
    }
  }
  return { d: f16(row, o), q };
}

/**
 * llama.cpp's dot product of one weight row (ggml bytes, `n` values) with x[0, n): the value, and
 * Σ of |its terms| (one per block, per sub-block for K-quants: the scale a tolerance for f32 rounding
 * is relative to).
 */
export function ggmlVecDot(format: 'Q8_0' | 'Q4_0' | 'Q5_0' | 'Q2_K' | 'Q3_K' | 'Q4_K' | 'Q6_K', row: Uint8Array, x: Float32Array, n: number): { value: number; scale: number } {
  let value = 0;
  let scale = 0;
  /** Adds d · Σ parts to the value and d · Σ |part| to the scale. */
  const add = (d: number, ...parts: number[]) => {
    for (const p of parts) {
      value += d * p;
      scale += Math.abs(d * p);
    }
  };
  if (format === 'Q8_0' || format === 'Q4_0' || format === 'Q5_0') {
    const xq = refQ8_0(x.subarray(0, n));
    for (let b = 0; b < n / 32; b++) {
      const { d, q } = blocks32(format, row, b);
      let sumi = 0;
      for (let j = 0; j < 32; j++) sumi += q[j] * xq.q[b * 32 + j];
      add(d * xq.d[b], sumi);
    }
    return { value, scale };
  }
  const xq = refQ8_K(x.subarray(0, n));
  for (let b = 0; b < n / 256; b++) {
    const qx = (i: number) => xq.q[b * 256 + i];
    if (format === 'Q2_K') {
      // ggml_vec_dot_q2_K_q8_K_generic
      const o = b * 84;
      const sc = (j: number) => row[o + j];
      const summ: number[] = [];
      for (let j = 0; j < 16; j++) summ.push(xq.bsums[b * 16 + j] * (sc(j) >> 4));
      const sumi: number[] = [];
      let is = 0;
      for (let k = 0; k < 2; k++)
        for (let j = 0; j < 4; j++)
          for (let half = 0; half < 2; half++) {
            let isuml = 0;
            for (let l = 16 * half; l < 16 * half + 16; l++) isuml += qx(128 * k + 32 * j + l) * ((row[o + 16 + 32 * k + l] >> (2 * j)) & 3);
            sumi.push((sc(is++) & 15) * isuml);
          }
      add(f16(row, o + 80) * xq.d[b], ...sumi);
      add(-f16(row, o + 82) * xq.d[b], ...summ);
    } else if (format === 'Q3_K') {
      // ggml_vec_dot_q3_K_q8_K_generic: values, then the 6-bit scales unpacked from 12 bytes
      const o = b * 110;
      const a = new Array(256);
      let m = 1;
      for (let h = 0; h < 2; h++)
        for (let j = 0; j < 4; j++, m <<= 1)
          for (let l = 0; l < 32; l++) a[128 * h + 32 * j + l] = ((row[o + 32 + 32 * h + l] >> (2 * j)) & 3) - (row[o + l] & m ? 0 : 4);
      const u = (i: number) => (row[o + 96 + 4 * i] | (row[o + 97 + 4 * i] << 8) | (row[o + 98 + 4 * i] << 16) | (row[o + 99 + 4 * i] << 24)) >>> 0;
      const [a0, a1, tmp] = [u(0), u(1), u(2)];
      const [k1, k2] = [0x03030303, 0x0f0f0f0f];
      const aux = [
        (a0 & k2) | (((tmp >>> 0) & k1) << 4),
        (a1 & k2) | (((tmp >>> 2) & k1) << 4),
        ((a0 >>> 4) & k2) | (((tmp >>> 4) & k1) << 4),
        ((a1 >>> 4) & k2) | (((tmp >>> 6) & k1) << 4),
      ];
      const scale = (j: number) => ((aux[j >> 2] >>> (8 * (j & 3))) & 255) - 32;
      const sumi: number[] = [];
      for (let j = 0; j < 16; j++) {
        let dot = 0;
        for (let l = 0; l < 16; l++) dot += a[16 * j + l] * qx(16 * j + l);
        sumi.push(scale(j) * dot);
      }
      add(f16(row, o + 108) * xq.d[b], ...sumi);
    } else if (format === 'Q4_K') {
      const o = b * 144;
      const s = (j: number) => row[o + 4 + j];
      const sc = (j: number) => (j < 4 ? s(j) & 63 : (s(j + 4) & 15) | ((s(j - 4) >> 6) << 4));
      const mn = (j: number) => (j < 4 ? s(j + 4) & 63 : (s(j + 4) >> 4) | ((s(j) >> 6) << 4));
      const sumi: number[] = [];
      for (let j = 0; j < 8; j++) {
        let dot = 0;
        for (let l = 0; l < 32; l++) {
          const byte = row[o + 16 + 32 * (j >> 1) + l];
          dot += (j & 1 ? byte >> 4 : byte & 15) * qx(32 * j + l);
        }
        sumi.push(sc(j) * dot);
      }
      const summ: number[] = [];
      for (let j = 0; j < 16; j++) summ.push(xq.bsums[b * 16 + j] * mn(j >> 1));
      add(f16(row, o) * xq.d[b], ...sumi);
      add(-f16(row, o + 2) * xq.d[b], ...summ);
    } else {
      const o = b * 210;
      const sumi = new Array(16).fill(0);
      for (let i = 0; i < 256; i++) {
        const h = i >> 7;
        const l = i & 127;
        const k = l >> 5; // which of the four 32-value groups of the half
        const ll = l & 31;
        const ql = row[o + 64 * h + ll + (k & 1 ? 32 : 0)];
        const qh = row[o + 128 + 32 * h + ll];
        const q = ((k < 2 ? ql & 15 : ql >> 4) | (((qh >> (2 * k)) & 3) << 4)) - 32;
        const sc = (row[o + 192 + (i >> 4)] << 24) >> 24;
        sumi[i >> 4] += sc * q * qx(i);
      }
      add(f16(row, o + 208) * xq.d[b], ...sumi);
    }
  }
  return { value, scale };
}
