/**
 * ggml's per-group scale searches used by the K-quants (ggml-quants.c: make_qx_quants,
 * make_q3_quants, make_qkx2_quants), float32-exact. Groups are read from x[xo .. xo+n) and codes
 * written to L[lo .. lo+n). Only the variants the reference quantizers use are transcribed.
 */
import { fr, GROUP_MAX_EPS, nearestInt, signedAbsMax } from './common.js';

/** 0.1f */
const TENTH = fr(0.1);

/** Scratch for makeQxQuants: per-element weights, the last candidate's codes and its running sums. */
const QW = new Float64Array(32);
const QWX = new Float64Array(32);
const LC = new Int8Array(32);
const PSX = new Float64Array(32);
const PS2 = new Float64Array(32);
const QSX = new Float64Array(32);
const QS2 = new Float64Array(32);
const QT = new Float64Array(32);

/** A signed code clamped to [-nmax, nmax-1] (ggml's MAX(-nmax, MIN(nmax-1, l))). */
const clampCode = (l: number, nmax: number): number => (l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l);

/** The |iscale| up to which code l (signed, clamped to [-nmax, nmax-1]) of element x cannot move; Infinity if never. */
function qxThreshold(l: number, nmax: number, x: number): number {
  const ax = Math.abs(x);
  return l === nmax - 1 || l === -nmax || !(ax > 0) ? Infinity : ((Math.abs(l) + 0.5) / ax) * (1 - 2 ** -20);
}

/**
 * make_qx_quants with rmse_type = 1 and no quant weights (w = x*x), as quantize_row_q6_K_ref calls it.
 * Returns the scale; L gets codes in [0, 2*nmax).
 * Bit-identical shortcuts: w and w*x are computed once; a candidate with the previous candidate's codes is
 * skipped (same sums: it either re-takes the same state or loses again); sums restart at the first changed code;
 * codes are only recomputed once |iscale| passes the point where they can change.
 */
export function makeQxQuants(n: number, nmax: number, x: Float32Array, xo: number, L: Uint8Array | Int8Array, lo: number): number {
  const max = signedAbsMax(n, x, xo);
  if (Math.abs(max) < GROUP_MAX_EPS) {
    L.fill(0, lo, lo + n);
    return 0;
  }
  let iscale = fr(-nmax / max);
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const xi = x[xo + i];
    const l = clampCode(nearestInt(fr(iscale * xi)), nmax);
    L[lo + i] = l + nmax;
    LC[i] = l;
    const w = fr(xi * xi);
    QW[i] = w;
    QWX[i] = fr(w * xi);
    QSX[i] = fr(QWX[i] * l);
    QS2[i] = fr(fr(w * l) * l);
    PSX[i] = sumlx = fr(sumlx + QSX[i]);
    PS2[i] = suml2 = fr(suml2 + QS2[i]);
  }
  let scale = suml2 !== 0 ? fr(sumlx / suml2) : 0;
  let best = fr(scale * sumlx);
  // |iscale| grows from is = -9 on, so codes only move away from 0: QT[i] is an |iscale| below which code i
  // provably stays (as in makeQkx2Quants). The first candidate has a smaller |iscale| than the codes above.
  QT.fill(-Infinity, 0, n);
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    iscale = fr(-fr(nmax + fr(TENTH * is)) / max);
    const ai = Math.abs(iscale);
    let i = 0;
    for (; i < n; i++) {
      if (ai < QT[i]) continue;
      const l = clampCode(nearestInt(fr(iscale * x[xo + i])), nmax);
      if (l !== LC[i]) break;
      QT[i] = qxThreshold(l, nmax, x[xo + i]);
    }
    if (i === n) continue;
    sumlx = i > 0 ? PSX[i - 1] : 0;
    suml2 = i > 0 ? PS2[i - 1] : 0;
    for (; i < n; i++) {
      if (!(ai < QT[i])) {
        const l = clampCode(nearestInt(fr(iscale * x[xo + i])), nmax);
        QT[i] = qxThreshold(l, nmax, x[xo + i]);
        if (l !== LC[i]) {
          LC[i] = l;
          QSX[i] = fr(QWX[i] * l); // the terms only change with the code
          QS2[i] = fr(fr(QW[i] * l) * l);
        }
      }
      PSX[i] = sumlx = fr(sumlx + QSX[i]);
      PS2[i] = suml2 = fr(suml2 + QS2[i]);
    }
    if (suml2 > 0 && fr(sumlx * sumlx) > fr(best * suml2)) {
      for (let k = 0; k < n; k++) L[lo + k] = LC[k] + nmax;
      scale = fr(sumlx / suml2);
      best = fr(scale * sumlx);
    }
  }
  return scale;
}

/**
 * make_q3_quants with do_rmse = true (quantize_row_q3_K_ref): start from the max-based scale, then up to
 * five passes of per-element code changes that improve the weighted (w = x*x) fit.
 * L is signed scratch here; codes end up in [0, 2*nmax).
 */
export function makeQ3Quants(n: number, nmax: number, x: Float32Array, xo: number, L: Int8Array, lo: number): number {
  const max = signedAbsMax(n, x, xo);
  if (Math.abs(max) < GROUP_MAX_EPS) {
    L.fill(0, lo, lo + n);
    return 0;
  }
  const iscale = fr(-nmax / max);
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const xi = x[xo + i];
    const l = clampCode(nearestInt(fr(iscale * xi)), nmax);
    L[lo + i] = l;
    const w = fr(xi * xi);
    sumlx = fr(sumlx + fr(fr(w * xi) * l));
    suml2 = fr(suml2 + fr(fr(w * l) * l));
  }
  for (let itry = 0; itry < 5; itry++) {
    let nChanged = 0;
    for (let i = 0; i < n; i++) {
      const xi = x[xo + i];
      const li = L[lo + i];
      const w = fr(xi * xi);
      let slx = fr(sumlx - fr(fr(w * xi) * li));
      if (slx > 0) {
        let sl2 = fr(suml2 - fr(fr(w * li) * li));
        const newL = clampCode(nearestInt(fr(fr(xi * sl2) / slx)), nmax);
        if (newL !== li) {
          slx = fr(slx + fr(fr(w * xi) * newL));
          sl2 = fr(sl2 + fr(fr(w * newL) * newL));
          if (sl2 > 0 && fr(fr(slx * slx) * suml2) > fr(fr(sumlx * sumlx) * sl2)) {
            L[lo + i] = newL;
            sumlx = slx;
            suml2 = sl2;
            nChanged++;
          }
        }
      }
    }
    if (!nChanged) break;
  }
  for (let i = 0; i < n; i++) L[lo + i] += nmax;
  return suml2 > 0 ? fr(sumlx / suml2) : 0;
}

/** Scratch for makeQkx2Quants: x - min per element (float32 values), valid for the current min. */
const XM = new Float64Array(32);
const PL = new Float64Array(32);
const PL2 = new Float64Array(32);
const PXL = new Float64Array(32);
const TL = new Float64Array(32);
const TL2 = new Float64Array(32);
const TXL = new Float64Array(32);
const G = new Float64Array(32);
const T = new Float64Array(32);
/** 1 - (32 + 6) * 2^-24, less a hair for the double arithmetic of the bound itself. */
const LOWER_BOUND_FACTOR = 1 - 39 * 2 ** -24;

/** The iscale up to which code l of an element at xm (>= 0 above min) cannot grow; Infinity if it never can. */
function codeThreshold(l: number, nmax: number, xm: number): number {
  return l >= nmax || !(xm > 0) ? Infinity : ((l + 0.5) / xm) * (1 - 2 ** -20);
}

/**
 * make_qkx2_quants (quantize_row_q2_K/q4_K/q5_K_ref): asymmetric codes in [0, nmax] with a
 * non-positive min, choosing among nstep+1 candidate scales the one with the least weighted error
 * (|diff| when useMad, diff^2 otherwise). Returns the scale; writes -min to theMin[mi].
 *
 * Two shortcuts keep the result bit-identical while skipping most of the work:
 * - a candidate whose codes equal the previous candidate's has the same sums, so the same error, and
 *   cannot beat the best (it either set the best or already lost to it): it is skipped; otherwise the
 *   sums restart from the first changed code (running sums of the previous candidate are kept);
 * - the error is a float sum of non-negative terms, so its partial sums never decrease: once one reaches
 *   the best error the candidate has lost, and the rest of the sum is skipped; before that, a lower bound
 *   on it computed in double (no float rounding) rejects most losing candidates outright.
 */
export function makeQkx2Quants(
  n: number, nmax: number, x: Float32Array, xo: number, weights: Float32Array,
  L: Uint8Array, lo: number, theMin: Float32Array, mi: number, Laux: Uint8Array,
  rmin: number, rdelta: number, nstep: number, useMad: boolean,
): number {
  let min = x[xo];
  let max = x[xo];
  let sumW = weights[0];
  let sumX = fr(sumW * x[xo]);
  for (let i = 1; i < n; i++) {
    const xi = x[xo + i];
    if (xi < min) min = xi;
    if (xi > max) max = xi;
    const w = weights[i];
    sumW = fr(sumW + w);
    sumX = fr(sumX + fr(w * xi));
  }
  if (min > 0) min = 0;
  if (max === min) {
    for (let i = 0; i < n; i++) L[lo + i] = 0;
    theMin[mi] = -min;
    return 0;
  }
  let iscale = fr(nmax / fr(max - min));
  let scale = fr(1 / iscale);
  let bestError = 0;
  for (let i = 0; i < n; i++) {
    const xi = x[xo + i];
    const xm = fr(xi - min);
    XM[i] = xm;
    let l = nearestInt(fr(iscale * xm));
    l = l < 0 ? 0 : l > nmax ? nmax : l;
    L[lo + i] = l;
    let diff = fr(fr(fr(scale * l) + min) - xi);
    diff = useMad ? Math.abs(diff) : fr(diff * diff);
    bestError = fr(bestError + fr(weights[i] * diff));
  }
  if (nstep < 1) {
    theMin[mi] = -min;
    return scale;
  }
  // Candidate codes go to Laux; PL/PL2/PXL keep the running sums after each element, so a candidate
  // only re-sums from its first changed code on (the sums do not depend on min, only on the codes).
  // While min stays put, iscale only grows, so codes only grow: T[i] is an iscale below which code i
  // provably stays where it is (iscale*xm < (l + 0.5)(1 - 2^-20) rounds to a float < l + 0.5), and the
  // code is only recomputed past it. -Infinity forces a recomputation.
  T.fill(-Infinity, 0, n);
  let haveCodes = false;
  for (let is = 0; is <= nstep; is++) {
    // min moves to the best candidate's min as the search goes, so (max - min) is re-evaluated each step
    iscale = fr(fr(fr(rmin + fr(rdelta * is)) + nmax) / fr(max - min));
    let i = 0;
    if (haveCodes) {
      for (; i < n; i++) {
        if (iscale < T[i]) continue;
        let l = nearestInt(fr(iscale * XM[i]));
        l = l < 0 ? 0 : l > nmax ? nmax : l;
        if (l !== Laux[i]) break;
        T[i] = codeThreshold(l, nmax, XM[i]);
      }
      if (i === n) continue; // same codes as the previous candidate: same error, cannot win
    }
    const fresh = !haveCodes;
    haveCodes = true;
    let sumL = i > 0 ? PL[i - 1] : 0;
    let sumL2 = i > 0 ? PL2[i - 1] : 0;
    let sumXL = i > 0 ? PXL[i - 1] : 0;
    for (; i < n; i++) {
      if (!(iscale < T[i])) {
        let l = nearestInt(fr(iscale * XM[i]));
        l = l < 0 ? 0 : l > nmax ? nmax : l;
        T[i] = codeThreshold(l, nmax, XM[i]);
        if (fresh || l !== Laux[i]) {
          // the terms w*l, w*l*l, w*l*x only change with the code
          Laux[i] = l;
          const wl = fr(weights[i] * l);
          TL[i] = wl;
          TL2[i] = fr(wl * l);
          TXL[i] = fr(wl * x[xo + i]);
        }
      }
      PL[i] = sumL = fr(sumL + TL[i]);
      PL2[i] = sumL2 = fr(sumL2 + TL2[i]);
      PXL[i] = sumXL = fr(sumXL + TXL[i]);
    }
    const D = fr(fr(sumW * sumL2) - fr(sumL * sumL));
    if (D > 0) {
      let thisScale = fr(fr(fr(sumW * sumXL) - fr(sumX * sumL)) / D);
      let thisMin = fr(fr(fr(sumL2 * sumX) - fr(sumL * sumXL)) / D);
      if (thisMin > 0) {
        thisMin = 0;
        thisScale = fr(sumXL / sumL2);
      }
      // scale*l + min (float32, as ggml rounds it) for every code
      for (let l = 0; l <= nmax; l++) G[l] = fr(fr(thisScale * l) + thisMin);
      // Cheap rigorous test first: ggml's float error is >= (1 - (n+6) 2^-24) * the same sum in double, minus
      // what underflow can lose (< 2^-149 per operation, times w for the square): each float op is within a
      // factor 1 +- 2^-24 of its exact value otherwise, rounding is monotone, all terms are >= 0.
      // A candidate whose bound already reaches the best error cannot win.
      const reject = (bestError + (sumW + 2 * n) * 2 ** -148) / LOWER_BOUND_FACTOR;
      let bound = 0;
      for (let i = 0; i < n && bound < reject; i++) {
        const d = G[Laux[i]] - x[xo + i];
        bound += weights[i] * (useMad ? Math.abs(d) : d * d);
      }
      if (bound >= reject) continue;
      let curError = 0;
      for (let i = 0; i < n && curError < bestError; i++) {
        let diff = fr(G[Laux[i]] - x[xo + i]);
        diff = useMad ? Math.abs(diff) : fr(diff * diff);
        curError = fr(curError + fr(weights[i] * diff));
      }
      if (curError < bestError) {
        for (let i = 0; i < n; i++) L[lo + i] = Laux[i];
        bestError = curError;
        scale = thisScale;
        if (thisMin !== min) {
          min = thisMin;
          for (let i = 0; i < n; i++) XM[i] = fr(x[xo + i] - min);
          T.fill(-Infinity, 0, n); // codes for the new min must be recomputed
        }
      }
    }
  }
  theMin[mi] = -min;
  return scale;
}
