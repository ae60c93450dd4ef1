/**
 * The 256-element super-block types Q2_K .. Q6_K: transcriptions of ggml-quants.c's
 * quantize_row_q*_K_ref (what quantize_q*_K runs without an imatrix) and dequantize_row_q*_K.
 * Each function handles `nb` consecutive super-blocks: floats from x[xo], block bytes at y[yo].
 * The per-group scale searches and the final code pass run in the wasm kernels of kwasm.ts where
 * available (same bytes, ~10x faster); the JS transcriptions (kmake.ts) remain for blocks the kernels
 * decline and for hosts without WebAssembly SIMD.
 * Scratch buffers are module-level (one isolate runs one quantizer at a time).
 */
import { f16Table } from '../util/half.js';
import { fr, getF16, GROUP_MAX_EPS, i8, nearestInt, putF16 } from './common.js';
import { makeQ3Quants, makeQkx2Quants, makeQxQuants } from './kmake.js';
import { K_LB, K_OD, K_ODM, K_OM, K_OS, K_Q3OUT, K_RAW, K_RES, kquantKernels, type KQuantKernels } from './kwasm.js';

const QK_K = 256;
const L = new Uint8Array(QK_K);
const L8 = new Int8Array(QK_K);
const Laux = new Uint8Array(32);
const weights = new Float32Array(32);
const scales = new Float32Array(16);
const mins = new Float32Array(16);
const sc12 = new Uint8Array(12);

const HALF = -0.5;
const TENTH = fr(0.1);
/** Built on first use (toWasm): assembling the module cost every command ~0.1 s of start-up. */
let KW: KQuantKernels | null | undefined;

/**
 * Switch the wasm kernels on (the default where WebAssembly SIMD exists) or off (the JS transcriptions,
 * which give the same bytes); returns whether they are now in use. For tests and benchmarks.
 */
export function useWasmKernels(on: boolean): boolean {
  KW = on ? kquantKernels() : null;
  return KW !== null;
}

/** Copy the search kernel's codes for group j (n elements, layout of kwasm.ts; floats from qkx2, int32 from qx/q3) into dst[n*j ..). */
function codesFromWasm(j: number, n: number, dst: Uint8Array | Int8Array | Int32Array, floatCodes: boolean): void {
  const codes = floatCodes ? KW!.f32 : KW!.i32;
  const base = K_LB / 4 + (j >> 2) * n * 4 + (j & 3);
  for (let i = 0; i < n; i++) dst[n * j + i] = codes[base + 4 * i];
}

/**
 * Hand the super-block at x[xo] to the kernels (RAW, then XT/WT as groups of n with weights `mode`, see
 * prep); false if there are no kernels or the block is too wild for them (non-finite or huge values).
 */
function toWasm(x: Float32Array, xo: number, n: number, mode: number): boolean {
  if (KW === undefined) KW = kquantKernels();
  if (!KW) return false;
  KW.f32.set(x.subarray(xo, xo + QK_K), K_RAW / 4);
  return KW.prep(QK_K / n / 4, n, mode) === 1;
}

/** After requant: group j's codes into dst from RES, or the search's codes where d_j was 0 (ggml keeps them). */
function codesAfterRequant(nGroups: number, n: number, dst: Uint8Array | Int8Array, floatCodes: boolean): void {
  const f = KW!.f32;
  const i32 = KW!.i32;
  for (let j = 0; j < nGroups; j++) {
    if (f[K_OD / 4 + j] === 0) codesFromWasm(j, n, dst, floatCodes);
    else for (let i = n * j, r = K_RES / 4 + n * j; i < n * (j + 1); i++, r++) dst[i] = i32[r];
  }
}

/** get_scale_min_k4 for the 12-byte packed 6-bit scales/mins of Q4_K/Q5_K; returns sc | m << 8. */
function scaleMinK4(j: number, q: Uint8Array, o: number): number {
  if (j < 4) return (q[o + j] & 63) | ((q[o + j + 4] & 63) << 8);
  const d = (q[o + j + 4] & 0xf) | ((q[o + j - 4] >> 6) << 4);
  const m = (q[o + j + 4] >> 4) | ((q[o + j] >> 6) << 4);
  return d | (m << 8);
}

/** Pack four 2-bit codes per byte the way q2_K/q3_K do: byte l of each 32-byte run holds L[l], L[l+32], L[l+64], L[l+96]. */
function pack2bit(y: Uint8Array, qo: number): void {
  for (let j = 0; j < QK_K; j += 128) {
    for (let l = 0; l < 32; l++) {
      y[qo + j / 4 + l] = L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6);
    }
  }
}

export function quantizeQ2_K(x: Float32Array, xo: number, nb: number, y: Uint8Array, yo: number): void {
  for (let i = 0; i < nb; i++, xo += QK_K, yo += 84) {
    let maxScale = 0;
    let maxMin = 0;
    const wasm = toWasm(x, xo, 16, 1);
    if (wasm) KW!.runMad(4, 16, 3, HALF, TENTH, 15);
    for (let j = 0; j < 16; j++) {
      if (wasm) {
        scales[j] = KW!.f32[K_OS / 4 + j];
        mins[j] = KW!.f32[K_OM / 4 + j];
      } else {
        for (let l = 0; l < 16; l++) weights[l] = Math.abs(x[xo + 16 * j + l]);
        scales[j] = makeQkx2Quants(16, 3, x, xo + 16 * j, weights, L, 16 * j, mins, j, Laux, HALF, TENTH, 15, true);
      }
      if (scales[j] > maxScale) maxScale = scales[j];
      if (mins[j] > maxMin) maxMin = mins[j];
    }
    // layout: scales[16] @0, qs[64] @16, d @80, dmin @82
    if (maxScale > 0) {
      const iscale = fr(15 / maxScale);
      for (let j = 0; j < 16; j++) y[yo + j] = nearestInt(fr(iscale * scales[j])) & 0xff;
      putF16(y, yo + 80, fr(maxScale / 15));
    } else {
      for (let j = 0; j < 16; j++) y[yo + j] = 0;
      putF16(y, yo + 80, 0);
    }
    if (maxMin > 0) {
      const iscale = fr(15 / maxMin);
      for (let j = 0; j < 16; j++) y[yo + j] = (y[yo + j] | (nearestInt(fr(iscale * mins[j])) << 4)) & 0xff;
      putF16(y, yo + 82, fr(maxMin / 15));
    } else {
      putF16(y, yo + 82, 0);
    }
    const t = f16Table();
    const dAll = getF16(t, y, yo + 80);
    const dminAll = getF16(t, y, yo + 82);
    for (let j = 0; j < 16; j++) {
      const s = y[yo + j];
      const d = fr(dAll * (s & 0xf));
      if (wasm) {
        KW!.f32[K_OD / 4 + j] = d;
        KW!.f32[K_ODM / 4 + j] = fr(dminAll * (s >> 4));
        continue;
      }
      if (d === 0) continue;
      const dm = fr(dminAll * (s >> 4));
      for (let ii = 0; ii < 16; ii++) {
        const l = nearestInt(fr(fr(x[xo + 16 * j + ii] + dm) / d));
        L[16 * j + ii] = Math.max(0, Math.min(3, l));
      }
    }
    if (wasm) {
      KW!.requant(16, 16, 0, 3, 0);
      codesAfterRequant(16, 16, L, true);
    }
    pack2bit(y, yo + 16);
  }
}

export function quantizeQ3_K(x: Float32Array, xo: number, nb: number, y: Uint8Array, yo: number): void {
  for (let i = 0; i < nb; i++, xo += QK_K, yo += 110) {
    let maxScale = 0;
    let amax = 0;
    const wasm = toWasm(x, xo, 16, 0);
    if (wasm) KW!.q3(4, 16, 4);
    for (let j = 0; j < 16; j++) {
      scales[j] = wasm ? KW!.f32[K_OS / 4 + j] : makeQ3Quants(16, 4, x, xo + 16 * j, L8, 16 * j);
      const scale = Math.abs(scales[j]);
      if (scale > amax) { amax = scale; maxScale = scales[j]; }
    }
    // layout: hmask[32] @0, qs[64] @32, scales[12] @96, d @108
    sc12.fill(0);
    if (maxScale !== 0) {
      const iscale = fr(-32 / maxScale);
      for (let j = 0; j < 16; j++) {
        let l = i8(nearestInt(fr(iscale * scales[j])));
        l = Math.max(-32, Math.min(31, l)) + 32;
        if (j < 8) sc12[j] = l & 0xf;
        else sc12[j - 8] |= (l & 0xf) << 4;
        l >>= 4;
        sc12[(j % 4) + 8] |= l << (2 * (j >> 2));
      }
      putF16(y, yo + 108, fr(1 / iscale));
    } else {
      putF16(y, yo + 108, 0);
    }
    for (let j = 0; j < 12; j++) y[yo + 96 + j] = sc12[j];
    const dAll = getF16(f16Table(), y, yo + 108);
    for (let j = 0; j < 16; j++) {
      let sc = j < 8 ? sc12[j] & 0xf : sc12[j - 8] >> 4;
      sc = (sc | (((sc12[8 + (j % 4)] >> (2 * (j >> 2))) & 3) << 4)) - 32;
      const d = fr(dAll * sc);
      if (wasm) {
        KW!.f32[K_OD / 4 + j] = d;
        KW!.f32[K_ODM / 4 + j] = 0; // x + 0 = x, up to the sign of a zero, which gives code 4 either way
        continue;
      }
      if (d === 0) continue;
      for (let ii = 0; ii < 16; ii++) {
        const l = nearestInt(fr(x[xo + 16 * j + ii] / d));
        L8[16 * j + ii] = Math.max(-4, Math.min(3, l)) + 4;
      }
    }
    if (wasm) {
      KW!.requant(16, 16, -4, 3, 4);
      // where d_j was 0 the search's codes stay (ggml keeps them): into RES, which pack3 reads
      for (let j = 0; j < 16; j++) if (KW!.f32[K_OD / 4 + j] === 0) codesFromWasm(j, 16, KW!.i32.subarray(K_RES / 4), false);
      KW!.pack3();
      y.set(KW!.u8.subarray(K_Q3OUT, K_Q3OUT + 96), yo);
      continue;
    }
    // high bit of code j goes to hmask[j % 32], bit j / 32
    for (let m = 0; m < 32; m++) y[yo + m] = 0;
    for (let j = 0; j < QK_K; j++) {
      let l = L8[j];
      if (l > 3) {
        y[yo + (j & 31)] |= 1 << (j >> 5);
        l -= 4;
      }
      L[j] = l;
    }
    pack2bit(y, yo + 32);
  }
}

/** Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per-32 scales/mins from make_qkx2_quants, then 6-bit packing. */
function kScalesMins(x: Float32Array, xo: number, y: Uint8Array, yo: number, nmax: number, rmin: number, nstep: number): void {
  let maxScale = 0;
  let maxMin = 0;
  const wasm = toWasm(x, xo, 32, 2);
  const f = KW?.f32;
  if (wasm) {
    KW!.run(2, 32, nmax, rmin, TENTH, nstep);
  } else {
    for (let j = 0; j < 8; j++) {
      const b = xo + 32 * j;
      let sumX2 = 0;
      for (let l = 0; l < 32; l++) sumX2 = fr(sumX2 + fr(x[b + l] * x[b + l]));
      const avX = fr(Math.sqrt(fr(sumX2 / 32)));
      for (let l = 0; l < 32; l++) weights[l] = avX + Math.abs(x[b + l]); // Float32Array store rounds
      scales[j] = makeQkx2Quants(32, nmax, x, b, weights, L, 32 * j, mins, j, Laux, rmin, TENTH, nstep, false);
    }
  }
  for (let j = 0; j < 8; j++) {
    if (wasm) {
      scales[j] = f![K_OS / 4 + j];
      mins[j] = f![K_OM / 4 + j];
    }
    if (scales[j] > maxScale) maxScale = scales[j];
    if (mins[j] > maxMin) maxMin = mins[j];
  }
  // layout (both types): d @0, dmin @2, scales[12] @4
  const invScale = maxScale > 0 ? fr(63 / maxScale) : 0;
  const invMin = maxMin > 0 ? fr(63 / maxMin) : 0;
  const s = yo + 4;
  for (let j = 0; j < 8; j++) {
    const ls = Math.min(63, nearestInt(fr(invScale * scales[j])) & 0xff);
    const lm = Math.min(63, nearestInt(fr(invMin * mins[j])) & 0xff);
    if (j < 4) {
      y[s + j] = ls;
      y[s + j + 4] = lm;
    } else {
      y[s + j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
      y[s + j - 4] |= (ls >> 4) << 6;
      y[s + j] |= (lm >> 4) << 6;
    }
  }
  putF16(y, yo, fr(maxScale / 63));
  putF16(y, yo + 2, fr(maxMin / 63));
  const t = f16Table();
  const dAll = getF16(t, y, yo);
  const dminAll = getF16(t, y, yo + 2);
  for (let j = 0; j < 8; j++) {
    const sm = scaleMinK4(j, y, s);
    const d = fr(dAll * (sm & 0xff));
    if (wasm) {
      f![K_OD / 4 + j] = d;
      f![K_ODM / 4 + j] = fr(dminAll * (sm >> 8));
      continue;
    }
    if (d === 0) continue;
    const dm = fr(dminAll * (sm >> 8));
    const b = xo + 32 * j;
    for (let ii = 0; ii < 32; ii++) {
      const l = nearestInt(fr(fr(x[b + ii] + dm) / d));
      L[32 * j + ii] = Math.max(0, Math.min(nmax, l));
    }
  }
  if (wasm) {
    KW!.requant(8, 32, 0, nmax, 0);
    codesAfterRequant(8, 32, L, true);
  }
}

export function quantizeQ4_K(x: Float32Array, xo: number, nb: number, y: Uint8Array, yo: number): void {
  for (let i = 0; i < nb; i++, xo += QK_K, yo += 144) {
    kScalesMins(x, xo, y, yo, 15, -1, 20);
    // qs[128] @16: byte l of each 32-byte run holds L[j+l] (low) and L[j+l+32] (high)
    let q = yo + 16;
    for (let j = 0; j < QK_K; j += 64, q += 32) {
      for (let l = 0; l < 32; l++) y[q + l] = L[j + l] | (L[j + l + 32] << 4);
    }
  }
}

export function quantizeQ5_K(x: Float32Array, xo: number, nb: number, y: Uint8Array, yo: number): void {
  for (let i = 0; i < nb; i++, xo += QK_K, yo += 176) {
    kScalesMins(x, xo, y, yo, 31, HALF, 15);
    // qh[32] @16, qs[128] @48
    const qh = yo + 16;
    let ql = yo + 48;
    for (let j = 0; j < 32; j++) y[qh + j] = 0;
    let m1 = 1;
    let m2 = 2;
    for (let n = 0; n < QK_K; n += 64, ql += 32) {
      for (let j = 0; j < 32; j++) {
        let l1 = L[n + j];
        if (l1 > 15) { l1 -= 16; y[qh + j] |= m1; }
        let l2 = L[n + j + 32];
        if (l2 > 15) { l2 -= 16; y[qh + j] |= m2; }
        y[ql + j] = l1 | (l2 << 4);
      }
      m1 <<= 2;
      m2 <<= 2;
    }
  }
}

export function quantizeQ6_K(x: Float32Array, xo: number, nb: number, y: Uint8Array, yo: number): void {
  for (let i = 0; i < nb; i++, xo += QK_K, yo += 210) {
    let maxScale = 0;
    let maxAbsScale = 0;
    const wasm = toWasm(x, xo, 16, 0);
    if (wasm) KW!.qx(4, 16, 32);
    for (let ib = 0; ib < 16; ib++) {
      const scale = wasm ? KW!.f32[K_OS / 4 + ib] : makeQxQuants(16, 32, x, xo + 16 * ib, L, 16 * ib);
      scales[ib] = scale;
      const a = Math.abs(scale);
      if (a > maxAbsScale) { maxAbsScale = a; maxScale = scale; }
    }
    // layout: ql[128] @0, qh[64] @128, scales[16] (int8) @192, d @208
    if (maxAbsScale < GROUP_MAX_EPS) {
      for (let j = 0; j < 210; j++) y[yo + j] = 0;
      continue;
    }
    const iscale = fr(-128 / maxScale);
    putF16(y, yo + 208, fr(1 / iscale));
    for (let ib = 0; ib < 16; ib++) y[yo + 192 + ib] = Math.min(127, nearestInt(fr(iscale * scales[ib]))) & 0xff;
    const dAll = getF16(f16Table(), y, yo + 208);
    for (let j = 0; j < 16; j++) {
      const d = fr(dAll * i8(y[yo + 192 + j]));
      if (wasm) {
        KW!.f32[K_OD / 4 + j] = d;
        KW!.f32[K_ODM / 4 + j] = 0; // x + 0 = x, up to the sign of a zero, which gives code 32 either way
        continue;
      }
      if (d === 0) continue;
      for (let ii = 0; ii < 16; ii++) {
        const l = nearestInt(fr(x[xo + 16 * j + ii] / d));
        L[16 * j + ii] = Math.max(-32, Math.min(31, l)) + 32;
      }
    }
    if (wasm) {
      KW!.requant(16, 16, -32, 31, 32);
      codesAfterRequant(16, 16, L, false);
    }
    let ql = yo;
    let qh = yo + 128;
    for (let j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
      for (let l = 0; l < 32; l++) {
        const a = L[j + l], b = L[j + l + 32], c = L[j + l + 64], e = L[j + l + 96];
        y[ql + l] = (a & 0xf) | ((c & 0xf) << 4);
        y[ql + l + 32] = (b & 0xf) | ((e & 0xf) << 4);
        y[qh + l] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6);
      }
    }
  }
}

// ---- dequantizers (dequantize_row_q*_K), float32-exact

export function dequantizeQ2_K(y: Uint8Array, yo: number, nb: number, out: Float32Array, oo: number): void {
  const t = f16Table();
  for (let i = 0; i < nb; i++, yo += 84) {
    const d = getF16(t, y, yo + 80);
    const min = getF16(t, y, yo + 82);
    let q = yo + 16;
    let is = 0;
    for (let n = 0; n < QK_K; n += 128, q += 32) {
      for (let shift = 0; shift < 8; shift += 2) {
        for (let half = 0; half < 32; half += 16) {
          const sc = y[yo + is++];
          const dl = fr(d * (sc & 0xf));
          const ml = fr(min * (sc >> 4));
          for (let l = 0; l < 16; l++) out[oo++] = fr(dl * ((y[q + half + l] >> shift) & 3)) - ml;
        }
      }
    }
  }
}

export function dequantizeQ3_K(y: Uint8Array, yo: number, nb: number, out: Float32Array, oo: number): void {
  const t = f16Table();
  const s = new Int8Array(16);
  for (let i = 0; i < nb; i++, yo += 110) {
    const dAll = getF16(t, y, yo + 108);
    for (let j = 0; j < 16; j++) {
      const lo = j < 8 ? y[yo + 96 + j] & 0xf : y[yo + 96 + j - 8] >> 4;
      s[j] = (lo | (((y[yo + 96 + 8 + (j % 4)] >> (2 * (j >> 2))) & 3) << 4)) - 32;
    }
    let q = yo + 32;
    let m = 1;
    let is = 0;
    for (let n = 0; n < QK_K; n += 128, q += 32) {
      for (let shift = 0; shift < 8; shift += 2, m <<= 1) {
        for (let half = 0; half < 32; half += 16) {
          const dl = fr(dAll * s[is++]);
          for (let l = 0; l < 16; l++) {
            const code = ((y[q + half + l] >> shift) & 3) - (y[yo + half + l] & m ? 0 : 4);
            out[oo++] = dl * code;
          }
        }
      }
    }
  }
}

export function dequantizeQ4_K(y: Uint8Array, yo: number, nb: number, out: Float32Array, oo: number): void {
  const t = f16Table();
  for (let i = 0; i < nb; i++, yo += 144) {
    const d = getF16(t, y, yo);
    const min = getF16(t, y, yo + 2);
    let q = yo + 16;
    for (let is = 0; is < 8; is += 2, q += 32) {
      const a = scaleMinK4(is, y, yo + 4);
      const b = scaleMinK4(is + 1, y, yo + 4);
      const d1 = fr(d * (a & 0xff)), m1 = fr(min * (a >> 8));
      const d2 = fr(d * (b & 0xff)), m2 = fr(min * (b >> 8));
      for (let l = 0; l < 32; l++) out[oo++] = fr(d1 * (y[q + l] & 0xf)) - m1;
      for (let l = 0; l < 32; l++) out[oo++] = fr(d2 * (y[q + l] >> 4)) - m2;
    }
  }
}

export function dequantizeQ5_K(y: Uint8Array, yo: number, nb: number, out: Float32Array, oo: number): void {
  const t = f16Table();
  for (let i = 0; i < nb; i++, yo += 176) {
    const d = getF16(t, y, yo);
    const min = getF16(t, y, yo + 2);
    const qh = yo + 16;
    let ql = yo + 48;
    let u1 = 1;
    let u2 = 2;
    for (let is = 0; is < 8; is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
      const a = scaleMinK4(is, y, yo + 4);
      const b = scaleMinK4(is + 1, y, yo + 4);
      const d1 = fr(d * (a & 0xff)), m1 = fr(min * (a >> 8));
      const d2 = fr(d * (b & 0xff)), m2 = fr(min * (b >> 8));
      for (let l = 0; l < 32; l++) out[oo++] = fr(d1 * ((y[ql + l] & 0xf) + (y[qh + l] & u1 ? 16 : 0))) - m1;
      for (let l = 0; l < 32; l++) out[oo++] = fr(d2 * ((y[ql + l] >> 4) + (y[qh + l] & u2 ? 16 : 0))) - m2;
    }
  }
}

export function dequantizeQ6_K(y: Uint8Array, yo: number, nb: number, out: Float32Array, oo: number): void {
  const t = f16Table();
  for (let i = 0; i < nb; i++, yo += 210, oo += QK_K) {
    const d = getF16(t, y, yo + 208);
    let ql = yo;
    let qh = yo + 128;
    let sc = yo + 192;
    for (let n = 0; n < QK_K; n += 128, ql += 64, qh += 32, sc += 8) {
      for (let l = 0; l < 32; l++) {
        const is = l >> 4;
        const h = y[qh + l];
        const q1 = ((y[ql + l] & 0xf) | ((h & 3) << 4)) - 32;
        const q2 = ((y[ql + l + 32] & 0xf) | (((h >> 2) & 3) << 4)) - 32;
        const q3 = ((y[ql + l] >> 4) | (((h >> 4) & 3) << 4)) - 32;
        const q4 = ((y[ql + l + 32] >> 4) | (((h >> 6) & 3) << 4)) - 32;
        out[oo + n + l] = fr(d * i8(y[sc + is])) * q1;
        out[oo + n + l + 32] = fr(d * i8(y[sc + is + 2])) * q2;
        out[oo + n + l + 64] = fr(d * i8(y[sc + is + 4])) * q3;
        out[oo + n + l + 96] = fr(d * i8(y[sc + is + 6])) * q4;
      }
    }
  }
}
