/**
 * ggml's quantizers with an importance matrix (ggml_quantize_chunk with `imatrix`, what
 * `llama-quantize --imatrix` runs): quantize_row_{q2_K,q3_K,q4_K,q5_K,q6_K,q4_0,q4_1,q5_0,q5_1}_impl
 * with quant_weights, and IQ4_NL / IQ4_XS (quantize_row_iq4_nl_impl, with or without weights), with
 * their search helpers make_qx_quants (given weights), make_qkx3_quants and make_qp_quants
 * (ggml-quants.c). A plain float32 transcription: every C float operation is one Math.fround of the
 * double result (common.ts), no shortcuts, so bytes equal ggml's. `qw` is one row's importance
 * (length rowLength, the mean of x² per input column); a type without a weighted path (Q8_0, floats)
 * and a K/legacy type without weights go to the reference quantizers.
 */
import { f16Table } from '../util/half.js';
import { fr, getF16, GROUP_MAX_EPS, i8, nearestInt, putF16, putU32LE } from './common.js';
import { QUANT_TYPES, type QuantType } from './types.js';

const QK = 256;
const TENTH = fr(0.1);
const M09 = fr(-0.9);
const D005 = fr(0.05);

/** kvalues_iq4nl (ggml-common.h): IQ4_NL / IQ4_XS's 16 non-linear levels. */
export const IQ4NL_VALUES: readonly number[] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

const clamp = (v: number, lo: number, hi: number) => (v < lo ? lo : v > hi ? hi : v);
const f16 = (y: Uint8Array, o: number) => getF16(f16Table(), y, o);

/** make_qx_quants(n, nmax, x, L, rmse_type = 1, qw) with qw given. L gets codes in [0, 2·nmax). */
function makeQxQuantsW(n: number, nmax: number, x: Float32Array, xo: number, L: Int8Array | Uint8Array, lo: number, qw: Float32Array, qo: number): number {
  let max = 0;
  let amax = 0;
  for (let i = 0; i < n; i++) {
    const ax = Math.abs(x[xo + i]);
    if (ax > amax) { amax = ax; max = x[xo + i]; }
  }
  if (amax < GROUP_MAX_EPS) {
    L.fill(0, lo, lo + n);
    return 0;
  }
  let iscale = fr(-nmax / max);
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const xi = x[xo + i];
    const l = clamp(nearestInt(fr(iscale * xi)), -nmax, nmax - 1);
    L[lo + i] = l + nmax;
    const w = qw[qo + i];
    sumlx = fr(sumlx + fr(fr(w * xi) * l));
    suml2 = fr(suml2 + fr(fr(w * l) * l));
  }
  let scale = suml2 !== 0 ? fr(sumlx / suml2) : 0; // C's truth test: NaN is true
  let best = fr(scale * sumlx);
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    iscale = fr(-fr(nmax + fr(TENTH * is)) / max);
    sumlx = 0;
    suml2 = 0;
    for (let i = 0; i < n; i++) {
      const xi = x[xo + i];
      const l = clamp(nearestInt(fr(iscale * xi)), -nmax, nmax - 1);
      const w = qw[qo + i];
      sumlx = fr(sumlx + fr(fr(w * xi) * l));
      suml2 = fr(suml2 + fr(fr(w * l) * l));
    }
    if (suml2 > 0 && fr(sumlx * sumlx) > fr(best * suml2)) {
      for (let i = 0; i < n; i++) L[lo + i] = nmax + clamp(nearestInt(fr(iscale * x[xo + i])), -nmax, nmax - 1);
      scale = fr(sumlx / suml2);
      best = fr(scale * sumlx);
    }
  }
  return scale;
}

const LAUX = new Uint8Array(32);
/** x - min of the current min (float32), recomputed when the best candidate moves min. */
const XM = new Float32Array(32);
/** make_qkx3_quants' *the_min of the last call. */
let theMin = 0;

/**
 * make_qkx3_quants(n, nmax, x, weights, L, &the_min, Laux, rmin, rdelta, nstep, use_mad = false) with
 * weights given: returns the scale, `theMin` gets -min.
 */
function makeQkx3Quants(n: number, nmax: number, x: Float32Array, xo: number, w: Float32Array, L: Uint8Array, lo: number, rmin: number, rdelta: number, nstep: number): number {
  let min = x[xo];
  let max = x[xo];
  let sumW = w[0];
  let sumX = fr(sumW * x[xo]);
  for (let i = 1; i < n; i++) {
    const xi = x[xo + i];
    if (xi < min) min = xi;
    if (xi > max) max = xi;
    sumW = fr(sumW + w[i]);
    sumX = fr(sumX + fr(w[i] * xi));
  }
  if (min > 0) min = 0;
  if (max <= min) {
    L.fill(0, lo, lo + n);
    theMin = -min;
    return 0;
  }
  for (let i = 0; i < n; i++) XM[i] = fr(x[xo + i] - min);
  // min moves with the best candidate, and the later candidates' range with it (as in C)
  let iscale = fr(nmax / fr(max - min));
  let scale = fr(1 / iscale);
  let bestMad = 0;
  for (let i = 0; i < n; i++) {
    const l = clamp(nearestInt(fr(iscale * XM[i])), 0, nmax);
    L[lo + i] = l;
    const diff = fr(fr(fr(scale * l) + min) - x[xo + i]);
    bestMad = fr(bestMad + fr(w[i] * fr(diff * diff)));
  }
  for (let is = 0; is <= nstep; is++) {
    iscale = fr(fr(fr(rmin + fr(rdelta * is)) + nmax) / fr(max - min));
    let sumL = 0;
    let sumL2 = 0;
    let sumXL = 0;
    for (let i = 0; i < n; i++) {
      const l = clamp(nearestInt(fr(iscale * XM[i])), 0, nmax);
      LAUX[i] = l;
      const wl = fr(w[i] * l);
      sumL = fr(sumL + wl);
      sumL2 = fr(sumL2 + fr(wl * l));
      sumXL = fr(sumXL + fr(wl * x[xo + i]));
    }
    const D = fr(fr(sumW * sumL2) - fr(sumL * sumL));
    if (D > 0) {
      let thisScale = fr(fr(fr(sumW * sumXL) - fr(sumX * sumL)) / D);
      let thisMin = fr(fr(fr(sumL2 * sumX) - fr(sumL * sumXL)) / D);
      if (thisMin > 0) {
        thisMin = 0;
        thisScale = fr(sumXL / sumL2);
      }
      let mad = 0;
      for (let i = 0; i < n; i++) {
        const diff = fr(fr(fr(thisScale * LAUX[i]) + thisMin) - x[xo + i]);
        mad = fr(mad + fr(w[i] * fr(diff * diff)));
      }
      if (mad < bestMad) {
        for (let i = 0; i < n; i++) L[lo + i] = LAUX[i];
        bestMad = mad;
        scale = thisScale;
        min = thisMin;
        for (let i = 0; i < n; i++) XM[i] = fr(x[xo + i] - min);
      }
    }
  }
  theMin = -min;
  return scale;
}

/** make_qp_quants(n, nmax, x, L, quant_weights): codes in [0, nmax] for non-negative x (a block's scales or mins). */
function makeQpQuants(n: number, nmax: number, x: Float32Array, L: Uint8Array, qw: Float32Array): number {
  let max = 0;
  for (let i = 0; i < n; i++) max = max > x[i] ? max : x[i];
  if (max < GROUP_MAX_EPS) {
    L.fill(0, 0, n);
    return 0;
  }
  let iscale = fr(nmax / max);
  for (let i = 0; i < n; i++) L[i] = nearestInt(fr(iscale * x[i]));
  const scale = fr(1 / iscale);
  let bestMse = 0;
  for (let i = 0; i < n; i++) {
    const diff = fr(x[i] - fr(scale * L[i]));
    bestMse = fr(bestMse + fr(fr(qw[i] * diff) * diff));
  }
  for (let is = -4; is <= 4; is++) {
    if (is === 0) continue;
    const iscaleIs = fr(fr(fr(TENTH * is) + nmax) / max);
    const scaleIs = fr(1 / iscaleIs);
    let mse = 0;
    for (let i = 0; i < n; i++) {
      const l = Math.min(nmax, nearestInt(fr(iscaleIs * x[i])));
      const diff = fr(x[i] - fr(scaleIs * l));
      mse = fr(mse + fr(fr(qw[i] * diff) * diff));
    }
    if (mse < bestMse) {
      bestMse = mse;
      iscale = iscaleIs;
    }
  }
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const l = Math.min(nmax, nearestInt(fr(iscale * x[i])));
    L[i] = l;
    const w = qw[i];
    sumlx = fr(sumlx + fr(fr(w * x[i]) * l));
    suml2 = fr(suml2 + fr(fr(w * l) * l));
  }
  for (let itry = 0; itry < 5; itry++) {
    let changed = 0;
    for (let i = 0; i < n; i++) {
      const w = qw[i];
      let slx = fr(sumlx - fr(fr(w * x[i]) * L[i]));
      let sl2 = fr(suml2 - fr(fr(w * L[i]) * L[i]));
      if (slx > 0 && sl2 > 0) {
        const nl = Math.min(nmax, nearestInt(fr(fr(x[i] * sl2) / slx)));
        if (nl !== L[i]) {
          slx = fr(slx + fr(fr(w * x[i]) * nl));
          sl2 = fr(sl2 + fr(fr(w * nl) * nl));
          if (fr(fr(slx * slx) * suml2) > fr(fr(sumlx * sumlx) * sl2)) {
            L[i] = nl;
            sumlx = slx;
            suml2 = sl2;
            changed++;
          }
        }
      }
    }
    if (!changed) break;
  }
  return suml2 > 0 ? fr(sumlx / suml2) : 0;
}

/** weight[l] = qw[l]·sqrtf(sigma2 + x²) over n elements. */
function importanceWeights(n: number, x: Float32Array, xo: number, qw: Float32Array, qo: number, sigma2: number, out: Float32Array): void {
  for (let l = 0; l < n; l++) {
    const xi = x[xo + l];
    out[l] = fr(qw[qo + l] * fr(Math.sqrt(fr(sigma2 + fr(xi * xi)))));
  }
}

function sumSquares(x: Float32Array, xo: number, n: number): number {
  let s = 0;
  for (let j = 0; j < n; j++) s = fr(s + fr(x[xo + j] * x[xo + j]));
  return s;
}

function sumOf(w: Float32Array, n: number): number {
  let s = 0;
  for (let l = 0; l < n; l++) s = fr(s + w[l]);
  return s;
}

const W32 = new Float32Array(32);
const SW = new Float32Array(16);
const SC = new Float32Array(16);
const MN = new Float32Array(16);
const LS = new Uint8Array(16);
const LM = new Uint8Array(16);
const L8 = new Int8Array(QK);
const LU = new Uint8Array(QK);

/** quantize_row_q2_K_impl: one 256-block from x[xo] into y[yo] (84 bytes: scales[16], qs[64], d, dmin). */
function q2K(x: Float32Array, xo: number, qw: Float32Array, qo: number, y: Uint8Array, yo: number): void {
  SW.fill(0);
  const sigma2 = fr(sumSquares(x, xo, QK) / QK);
  for (let j = 0; j < 16; j++) {
    importanceWeights(16, x, xo + 16 * j, qw, qo + 16 * j, sigma2, W32);
    for (let l = 0; l < 16; l++) SW[j] = fr(SW[j] + W32[l]);
    SC[j] = makeQkx3Quants(16, 3, x, xo + 16 * j, W32, LU, 16 * j, M09, D005, 36);
    MN[j] = theMin;
  }
  const dm0 = makeQpQuants(16, 15, SC, LS, SW);
  const mm0 = makeQpQuants(16, 15, MN, LM, SW);
  putF16(y, yo + 80, dm0);
  putF16(y, yo + 82, mm0);
  const dm = f16(y, yo + 80);
  const mm = f16(y, yo + 82);
  for (let j = 0; j < 16; j++) y[yo + j] = (LS[j] | (LM[j] << 4)) & 0xff;
  for (let j = 0; j < 16; j++) {
    const d = fr(dm * (y[yo + j] & 0xf));
    if (d === 0) continue;
    const m = fr(mm * (y[yo + j] >> 4));
    for (let ii = 0; ii < 16; ii++) LU[16 * j + ii] = clamp(nearestInt(fr(fr(x[xo + 16 * j + ii] + m) / d)), 0, 3);
  }
  for (let j = 0; j < QK; j += 128) {
    for (let l = 0; l < 32; l++) y[yo + 16 + j / 4 + l] = LU[j + l] | (LU[j + l + 32] << 2) | (LU[j + l + 64] << 4) | (LU[j + l + 96] << 6);
  }
}

/** quantize_row_q3_K_impl with quant_weights: 110 bytes (hmask[32], qs[64], scales[12], d). */
function q3K(x: Float32Array, xo: number, qw: Float32Array, qo: number, y: Uint8Array, yo: number): void {
  const sigma2 = fr(fr(2 * sumSquares(x, xo, QK)) / QK);
  for (let j = 0; j < 16; j++) {
    importanceWeights(16, x, xo + 16 * j, qw, qo + 16 * j, sigma2, W32);
    SW[j] = sumOf(W32, 16);
    SC[j] = makeQxQuantsW(16, 4, x, xo + 16 * j, L8, 16 * j, W32, 0);
  }
  const S = yo + 96;
  y.fill(0, S, S + 12);
  const LSs = new Int8Array(16);
  const dBlock = makeQxQuantsW(16, 32, SC, 0, LSs, 0, SW, 0);
  for (let j = 0; j < 16; j++) {
    let l = LSs[j];
    if (j < 8) y[S + j] = l & 0xf;
    else y[S + j - 8] |= (l & 0xf) << 4;
    l >>= 4;
    y[S + (j % 4) + 8] |= l << (2 * Math.floor(j / 4));
  }
  putF16(y, yo + 108, dBlock);
  const dAll = f16(y, yo + 108);
  for (let j = 0; j < 16; j++) {
    let sc = j < 8 ? y[S + j] & 0xf : y[S + j - 8] >> 4;
    sc = i8((sc | (((y[S + 8 + (j % 4)] >> (2 * Math.floor(j / 4))) & 3) << 4)) - 32);
    const d = fr(dAll * sc);
    if (d === 0) continue;
    for (let ii = 0; ii < 16; ii++) L8[16 * j + ii] = clamp(nearestInt(fr(x[xo + 16 * j + ii] / d)), -4, 3) + 4;
  }
  y.fill(0, yo, yo + 32);
  let m = 0;
  let hm = 1;
  for (let j = 0; j < QK; j++) {
    if (L8[j] > 3) {
      y[yo + m] |= hm;
      L8[j] -= 4;
    }
    if (++m === 32) { m = 0; hm <<= 1; }
  }
  for (let j = 0; j < QK; j += 128) {
    for (let l = 0; l < 32; l++) y[yo + 32 + j / 4 + l] = L8[j + l] | (L8[j + l + 32] << 2) | (L8[j + l + 64] << 4) | (L8[j + l + 96] << 6);
  }
}

/** get_scale_min_k4 */
function scaleMinK4(j: number, q: Uint8Array, o: number): [number, number] {
  if (j < 4) return [q[o + j] & 63, q[o + j + 4] & 63];
  return [(q[o + j + 4] & 0xf) | ((q[o + j - 4] >> 6) << 4), (q[o + j + 4] >> 4) | ((q[o + j] >> 6) << 4)];
}

/** The shared part of quantize_row_q4_K_impl / q5_K_impl: codes in LU (0..nmax) and the 12 scale bytes at y[S]. */
function q45KCodes(nmax: number, x: Float32Array, xo: number, qw: Float32Array, qo: number, y: Uint8Array, yo: number, S: number, clamp63: boolean): void {
  const sigma2 = fr(fr(2 * sumSquares(x, xo, QK)) / QK);
  for (let j = 0; j < 8; j++) {
    importanceWeights(32, x, xo + 32 * j, qw, qo + 32 * j, sigma2, W32);
    SW[j] = sumOf(W32, 32);
    SC[j] = makeQkx3Quants(32, nmax, x, xo + 32 * j, W32, LU, 32 * j, M09, D005, 36);
    MN[j] = theMin;
  }
  const dBlock = makeQpQuants(8, 63, SC, LS, SW);
  const mBlock = makeQpQuants(8, 63, MN, LM, SW);
  for (let j = 0; j < 8; j++) {
    const ls = clamp63 ? Math.min(63, LS[j]) : LS[j];
    const lm = clamp63 ? Math.min(63, LM[j]) : LM[j];
    if (j < 4) {
      y[S + j] = ls;
      y[S + j + 4] = lm;
    } else {
      y[S + j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
      y[S + j - 4] |= (ls >> 4) << 6;
      y[S + j] |= (lm >> 4) << 6;
    }
  }
  putF16(y, yo, dBlock);
  putF16(y, yo + 2, mBlock);
  const dAll = f16(y, yo);
  const mAll = f16(y, yo + 2);
  for (let j = 0; j < 8; j++) {
    const [sc, m] = scaleMinK4(j, y, S);
    const d = fr(dAll * sc);
    if (d === 0) continue;
    const dm = fr(mAll * m);
    for (let ii = 0; ii < 32; ii++) LU[32 * j + ii] = clamp(nearestInt(fr(fr(x[xo + 32 * j + ii] + dm) / d)), 0, nmax);
  }
}

/** quantize_row_q4_K_impl with quant_weights: 144 bytes (d, dmin, scales[12], qs[128]). */
function q4K(x: Float32Array, xo: number, qw: Float32Array, qo: number, y: Uint8Array, yo: number): void {
  q45KCodes(15, x, xo, qw, qo, y, yo, yo + 4, false);
  let q = yo + 16;
  for (let j = 0; j < QK; j += 64) {
    for (let l = 0; l < 32; l++) y[q + l] = LU[j + l] | (LU[j + l + 32] << 4);
    q += 32;
  }
}

/** quantize_row_q5_K_impl with quant_weights: 176 bytes (d, dmin, scales[12], qh[32], qs[128]). */
function q5K(x: Float32Array, xo: number, qw: Float32Array, qo: number, y: Uint8Array, yo: number): void {
  q45KCodes(31, x, xo, qw, qo, y, yo, yo + 4, true);
  const qh = yo + 16;
  let ql = yo + 48;
  y.fill(0, qh, qh + 32);
  let m1 = 1;
  let m2 = 2;
  for (let n = 0; n < QK; n += 64) {
    for (let j = 0; j < 32; j++) {
      let l1 = LU[n + j];
      if (l1 > 15) { l1 -= 16; y[qh + j] |= m1; }
      let l2 = LU[n + j + 32];
      if (l2 > 15) { l2 -= 16; y[qh + j] |= m2; }
      y[ql + j] = l1 | (l2 << 4);
    }
    m1 <<= 2;
    m2 <<= 2;
    ql += 32;
  }
}

/** quantize_row_q6_K_impl with quant_weights (used as the weights directly): 210 bytes (ql[128], qh[64], scales[16], d). */
function q6K(x: Float32Array, xo: number, qw: Float32Array, qo: number, y: Uint8Array, yo: number): void {
  let maxScale = 0;
  let maxAbsScale = 0;
  for (let ib = 0; ib < 16; ib++) {
    const scale = makeQxQuantsW(16, 32, x, xo + 16 * ib, L8, 16 * ib, qw, qo + 16 * ib);
    SC[ib] = scale;
    const a = Math.abs(scale);
    if (a > maxAbsScale) { maxAbsScale = a; maxScale = scale; }
  }
  if (maxAbsScale < GROUP_MAX_EPS) {
    y.fill(0, yo, yo + 210);
    putF16(y, yo + 208, 0);
    return;
  }
  const iscale = fr(-128 / maxScale);
  putF16(y, yo + 208, fr(1 / iscale));
  for (let ib = 0; ib < 16; ib++) y[yo + 192 + ib] = Math.min(127, nearestInt(fr(iscale * SC[ib]))) & 0xff;
  const dAll = f16(y, yo + 208);
  for (let j = 0; j < 16; j++) {
    const d = fr(dAll * i8(y[yo + 192 + j]));
    if (d === 0) continue;
    for (let ii = 0; ii < 16; ii++) L8[16 * j + ii] = clamp(nearestInt(fr(x[xo + 16 * j + ii] / d)), -32, 31) + 32;
  }
  let ql = yo;
  let qh = yo + 128;
  for (let j = 0; j < QK; j += 128) {
    for (let l = 0; l < 32; l++) {
      const q1 = L8[j + l] & 0xf;
      const q2 = L8[j + l + 32] & 0xf;
      const q3 = L8[j + l + 64] & 0xf;
      const q4 = L8[j + l + 96] & 0xf;
      y[ql + l] = q1 | (q3 << 4);
      y[ql + l + 32] = q2 | (q4 << 4);
      y[qh + l] = (L8[j + l] >> 4) | ((L8[j + l + 32] >> 4) << 2) | ((L8[j + l + 64] >> 4) << 4) | ((L8[j + l + 96] >> 4) << 6);
    }
    ql += 64;
    qh += 32;
  }
}

/** The 32-blocks (Q4_0, Q4_1, Q5_0, Q5_1) with quant_weights: sigma2 over the whole row. */
function legacyRow(type: 'Q4_0' | 'Q4_1' | 'Q5_0' | 'Q5_1', x: Float32Array, xo: number, n: number, qw: Float32Array, y: Uint8Array, yo: number): void {
  const sigma2 = fr(sumSquares(x, xo, n) / n);
  const ts = QUANT_TYPES[type].typeSize;
  for (let ib = 0; ib < n / 32; ib++, yo += ts) {
    const xb = xo + 32 * ib;
    importanceWeights(32, x, xb, qw, 32 * ib, sigma2, W32);
    if (type === 'Q4_0' || type === 'Q5_0') {
      const d = makeQxQuantsW(32, type === 'Q4_0' ? 8 : 16, x, xb, L8, 0, W32, 0);
      putF16(y, yo, d);
      const qh = packLowNibbles(L8, y, type === 'Q4_0' ? yo + 2 : yo + 6);
      if (type === 'Q5_0') putU32LE(y, yo + 2, qh);
    } else {
      putF16(y, yo, makeQkx3Quants(32, type === 'Q4_1' ? 15 : 31, x, xb, W32, LU, 0, M09, D005, 36));
      putF16(y, yo + 2, -theMin);
      const qh = packLowNibbles(LU, y, type === 'Q4_1' ? yo + 4 : yo + 8);
      if (type === 'Q5_1') putU32LE(y, yo + 4, qh);
    }
  }
}

/** best_index_int8(16, kvalues_iq4nl, x). */
function bestIndex(x: number): number {
  const v = IQ4NL_VALUES;
  if (x <= v[0]) return 0;
  if (x >= v[15]) return 15;
  let ml = 0;
  let mu = 15;
  while (mu - ml > 1) {
    const mav = (ml + mu) >> 1;
    if (x < v[mav]) mu = mav;
    else ml = mav;
  }
  return fr(x - v[mu - 1]) < fr(v[mu] - x) ? mu - 1 : mu;
}

const IQ_SCALES = new Float32Array(8);

/**
 * quantize_row_iq4_nl_impl(super, 32, x, ..., kvalues_iq4nl, qw, ntry = 7) as quantize_iq4_nl (super = 32,
 * 18 bytes: d, qs[16]) and quantize_iq4_xs (super = 256, 136 bytes: d, scales_h, scales_l[4], qs[128]) call it.
 */
function iq4(superSize: 32 | 256, x: Float32Array, xo: number, qw: Float32Array | null, qo: number, y: Uint8Array, yo: number): void {
  const ntry = 7;
  const v = IQ4NL_VALUES;
  const sigma2 = fr(sumSquares(x, xo, superSize) * fr(2 / superSize));
  const q4 = superSize === 32 ? yo + 2 : yo + 8;
  y.fill(0, q4, q4 + superSize / 2);
  putF16(y, yo, 0);
  let maxScale = 0;
  let amaxScale = 0;
  const nb = superSize / 32;
  for (let ib = 0; ib < nb; ib++) {
    const xb = xo + 32 * ib;
    if (qw) importanceWeights(32, x, xb, qw, qo + 32 * ib, sigma2, W32);
    else for (let j = 0; j < 32; j++) W32[j] = fr(x[xb + j] * x[xb + j]);
    let amax = 0;
    let max = 0;
    for (let j = 0; j < 32; j++) {
      const ax = Math.abs(x[xb + j]);
      if (ax > amax) { amax = ax; max = x[xb + j]; }
    }
    if (amax < GROUP_MAX_EPS) {
      IQ_SCALES[ib] = 0;
      continue;
    }
    let d = fr(-max / v[0]);
    let id = fr(1 / d);
    let sumqx = 0;
    let sumq2 = 0;
    for (let j = 0; j < 32; j++) {
      const xj = x[xb + j];
      const l = bestIndex(fr(id * xj));
      LU[32 * ib + j] = l;
      const q = v[l];
      const w = W32[j];
      sumqx = fr(sumqx + fr(fr(w * q) * xj));
      sumq2 = fr(sumq2 + fr(fr(w * q) * q));
    }
    d = sumq2 > 0 ? fr(sumqx / sumq2) : 0;
    let best = fr(d * sumqx);
    for (let itry = -ntry; itry <= ntry; itry++) {
      id = fr((itry + v[0]) / max);
      sumqx = 0;
      sumq2 = 0;
      for (let j = 0; j < 32; j++) {
        const xj = x[xb + j];
        const q = v[bestIndex(fr(id * xj))];
        const w = W32[j];
        sumqx = fr(sumqx + fr(fr(w * q) * xj));
        sumq2 = fr(sumq2 + fr(fr(w * q) * q));
      }
      if (sumq2 > 0 && fr(sumqx * sumqx) > fr(best * sumq2)) {
        d = fr(sumqx / sumq2);
        best = fr(d * sumqx);
      }
    }
    IQ_SCALES[ib] = d;
    const absD = Math.abs(d);
    if (absD > amaxScale) { amaxScale = absD; maxScale = d; }
  }
  if (nb > 1) {
    let scalesH = 0;
    const d = fr(-maxScale / 32);
    putF16(y, yo, d);
    const id = d !== 0 ? fr(1 / d) : 0;
    for (let ib = 0; ib < nb; ib++) {
      let l = clamp(nearestInt(fr(id * IQ_SCALES[ib])), -32, 31);
      const dl = fr(d * l);
      const idl = dl !== 0 ? fr(1 / dl) : 0;
      for (let j = 0; j < 32; j++) LU[32 * ib + j] = bestIndex(fr(idl * x[xo + 32 * ib + j]));
      l += 32;
      const lo = l & 0xf;
      const hi = l >> 4;
      if (ib % 2 === 0) y[yo + 4 + ib / 2] = lo;
      else y[yo + 4 + (ib >> 1)] |= lo << 4;
      scalesH |= hi << (2 * (ib % 8));
    }
    y[yo + 2] = scalesH & 0xff;
    y[yo + 3] = (scalesH >> 8) & 0xff;
  } else {
    putF16(y, yo, IQ_SCALES[0]);
    const id = IQ_SCALES[0] !== 0 ? fr(1 / IQ_SCALES[0]) : 0;
    for (let j = 0; j < superSize; j++) LU[j] = bestIndex(fr(id * x[xo + j]));
  }
  for (let i = 0; i < superSize / 32; i++) {
    for (let j = 0; j < 16; j++) y[q4 + 16 * i + j] = LU[32 * i + j] | (LU[32 * i + 16 + j] << 4);
  }
}

/** Types whose ggml quantizer reads an importance matrix (ggml_quantize_chunk passes `imatrix` on). */
export const WEIGHTED_TYPES: ReadonlySet<QuantType> = new Set(['Q2_K', 'Q3_K', 'Q4_K', 'Q5_K', 'Q6_K', 'Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'IQ4_NL', 'IQ4_XS']);

/** Whether quantizing `type` with importance `qw` differs from quantizing it without. */
export function usesImportance(type: QuantType): boolean {
  return WEIGHTED_TYPES.has(type);
}

/**
 * Rows of `rowLength` from x into y (the caller sized y: rows × rowBytes), as ggml_quantize_chunk(type,
 * ..., imatrix = qw): `qw` (length rowLength) weighs every row; null only for IQ4_NL / IQ4_XS, which
 * have no reference path (quantize_iq4_* with a null imatrix).
 */
export function quantizeRowsWeighted(type: QuantType, x: Float32Array, rowLength: number, qw: Float32Array | null, y: Uint8Array, yo = 0): void {
  const { blockSize, typeSize } = QUANT_TYPES[type];
  const rows = x.length / rowLength;
  const nb = rowLength / blockSize;
  if (!qw && type !== 'IQ4_NL' && type !== 'IQ4_XS') throw new Error(`${type}: the weighted quantizer needs an importance row`);
  for (let r = 0; r < rows; r++) {
    const xo = r * rowLength;
    if (type === 'Q4_0' || type === 'Q4_1' || type === 'Q5_0' || type === 'Q5_1') {
      legacyRow(type, x, xo, rowLength, qw!, y, yo);
      yo += nb * typeSize;
      continue;
    }
    for (let b = 0; b < nb; b++, yo += typeSize) {
      const bo = xo + b * blockSize;
      const qo = b * blockSize;
      switch (type) {
        case 'Q2_K': q2K(x, bo, qw!, qo, y, yo); break;
        case 'Q3_K': q3K(x, bo, qw!, qo, y, yo); break;
        case 'Q4_K': q4K(x, bo, qw!, qo, y, yo); break;
        case 'Q5_K': q5K(x, bo, qw!, qo, y, yo); break;
        case 'Q6_K': q6K(x, bo, qw!, qo, y, yo); break;
        case 'IQ4_NL': iq4(32, x, bo, qw, qo, y, yo); break;
        case 'IQ4_XS': iq4(256, x, bo, qw, qo, y, yo); break;
        default: throw new Error(`${type} has no weighted quantizer`);
      }
    }
  }
}

/** dequantize_row_iq4_nl: nb 32-blocks. */
export function dequantizeIQ4_NL(y: Uint8Array, yo: number, nb: number, out: Float32Array, oo: number): void {
  const v = IQ4NL_VALUES;
  for (let i = 0; i < nb; i++, yo += 18, oo += 32) {
    const d = f16(y, yo);
    for (let j = 0; j < 16; j++) {
      const q = y[yo + 2 + j];
      out[oo + j] = fr(d * v[q & 0xf]);
      out[oo + j + 16] = fr(d * v[q >> 4]);
    }
  }
}

/** dequantize_row_iq4_xs: nb 256-blocks. */
export function dequantizeIQ4_XS(y: Uint8Array, yo: number, nb: number, out: Float32Array, oo: number): void {
  const v = IQ4NL_VALUES;
  for (let i = 0; i < nb; i++, yo += 136) {
    const d = f16(y, yo);
    const sh = y[yo + 2] | (y[yo + 3] << 8);
    let qs = yo + 8;
    for (let ib = 0; ib < 8; ib++, qs += 16, oo += 32) {
      const ls = ((y[yo + 4 + (ib >> 1)] >> (4 * (ib % 2))) & 0xf) | (((sh >> (2 * ib)) & 3) << 4);
      const dl = fr(d * (ls - 32));
      for (let j = 0; j < 16; j++) {
        out[oo + j] = fr(dl * v[y[qs + j] & 0xf]);
        out[oo + j + 16] = fr(dl * v[y[qs + j] >> 4]);
      }
    }
  }
}

/**
 * A 32-code block's low nibbles packed as ggml's Q4_x/Q5_x do (code j and j + 16 share byte j at `qs`);
 * returns the fifth bits as Q5_x's qh word (unused for Q4_x).
 */
function packLowNibbles(L: Uint8Array | Int8Array, y: Uint8Array, qs: number): number {
  let qh = 0;
  for (let j = 0; j < 16; j++) {
    const a = L[j];
    const b = L[j + 16];
    y[qs + j] = (a & 0xf) | ((b & 0xf) << 4);
    qh |= ((a & 0x10) >> 4) << j;
    qh |= ((b & 0x10) >> 4) << (j + 16);
  }
  return qh >>> 0;
}
