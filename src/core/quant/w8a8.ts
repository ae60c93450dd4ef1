/**
 * Static per-tensor W8A8 (and W8A16) arithmetic of the `outliers` pass and the `qnn` target, with the
 * exact shadow-outlier decomposition (SPEC-outliers §1.1–1.2). Browser-safe, no dependencies.
 *
 *   weights      s_w = max(max|W|, 1e-5) / 127,  W_q = round(W / s_w)         (round half to even)
 *   activations  s_x = T / 127 (8-bit) or T / 32767 (16-bit), T the calibrated threshold
 *                u = round(x / s_x) unclamped, q = clamp(u), r = u − q         (r ≠ 0 only at outliers)
 *   linear       acc = q · W_q  (integers: exact; |acc| ≤ K·128·127 < 2³¹ for K < 132 000 at 8 bits)
 *   shadow       u · W_q = q · W_q + r[:, C] · W_q[C, :],  C = {k : ∃t r_tk ≠ 0}   (exact)
 *   requantize   y_code = clamp(round(f32(acc) · M)),  M = f32(f32(s_x·s_w) / s_y)
 *
 * Not the paper's printed Eq. 1 (`min[max(x/s,−127),128] + ⌊(x/s)/128⌋·128`): its clamp range is wrong
 * and the sum is not x/s (x/s = 200 gives 256); SPEC §1.2 erratum.
 *
 * Float steps follow what onnxruntime computes on the emitted QDQ graphs: QuantizeLinear divides in
 * float32 and rounds half to even; a fused QLinearMatMul accumulates in int32 and requantizes with a
 * float32 multiplier. Integer sums are exact in doubles (kept in Float64Array).
 */

export type ActBits = 8 | 16;

/** Integer range of a signed code of `bits`. */
export function codeRange(bits: ActBits): { min: number; max: number } {
  return bits === 8 ? { min: -128, max: 127 } : { min: -32768, max: 32767 };
}

/** Round half to even (torch.round, numpy.rint, ONNX QuantizeLinear / Round). `Math.round` rounds half up: never used here. */
export function roundHalfEven(v: number): number {
  const f = Math.floor(v);
  const d = v - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/** Round half away from zero (C `roundf`, which the mllm CPU runtime uses). */
export function roundHalfAway(v: number): number {
  return v < 0 ? -Math.floor(-v + 0.5) : Math.floor(v + 0.5);
}

export type Rounding = 'half-even' | 'half-away';
export const roundWith = (mode: Rounding): ((v: number) => number) => (mode === 'half-even' ? roundHalfEven : roundHalfAway);

export const clampCode = (v: number, bits: ActBits): number => (bits === 8 ? (v < -128 ? -128 : v > 127 ? 127 : v) : v < -32768 ? -32768 : v > 32767 ? 32767 : v);

/** The activation scale of a threshold: T/127 or T/32767, as float32 (what the graph stores). */
export function activationScale(T: number, bits: ActBits): number {
  return Math.fround(Math.max(T, 1e-5) / (bits === 8 ? 127 : 32767));
}

export interface QuantizedWeight {
  /** int8 codes in [in, out] layout (SPEC: K × O, what QNN and mllm store): row k is input channel k. */
  q: Int8Array;
  /** s_w as float32. */
  scale: number;
  inFeatures: number;
  outFeatures: number;
}

/** Per-tensor symmetric int8 of a Hugging Face [out, in] weight, stored [in, out]. */
export function quantizeWeight(w: Float32Array, outFeatures: number, inFeatures: number): QuantizedWeight {
  let m = 0;
  for (let i = 0; i < w.length; i++) {
    const a = Math.abs(w[i]);
    if (a > m) m = a;
  }
  const scale = Math.fround(Math.max(m, 1e-5) / 127);
  const q = new Int8Array(w.length);
  for (let o = 0; o < outFeatures; o++) {
    for (let k = 0; k < inFeatures; k++) q[k * outFeatures + o] = clampCode(roundHalfEven(Math.fround(w[o * inFeatures + k] / scale)), 8);
  }
  return { q, scale, inFeatures, outFeatures };
}

/** u = round(x / s) without clamping (x / s in float32, as QuantizeLinear). */
export function quantizeUnclamped(x: Float32Array, scale: number, out = new Float64Array(x.length)): Float64Array {
  for (let i = 0; i < x.length; i++) out[i] = roundHalfEven(Math.fround(x[i] / scale));
  return out;
}

/** q = clamp(u) in place of a copy. */
export function clampCodes(u: Float64Array, bits: ActBits, out = new Float64Array(u.length)): Float64Array {
  for (let i = 0; i < u.length; i++) out[i] = clampCode(u[i], bits);
  return out;
}

/** The shadow split of unclamped codes u [T, K]: q = clamp(u) and r = u − q kept compact on its channels C. */
export interface Decomposition {
  T: number;
  K: number;
  /** clamp(u) [T, K]. */
  q: Float64Array;
  /** Sorted channels with an outlier in some token: C = {k : ∃t r_tk ≠ 0}. */
  channels: Int32Array;
  /** r[:, C] [T, |C|]. */
  residual: Float64Array;
}

export function decompose(u: Float64Array, T: number, K: number, bits: ActBits): Decomposition {
  const q = clampCodes(u, bits);
  const hit = new Uint8Array(K);
  for (let i = 0; i < u.length; i++) if (u[i] !== q[i]) hit[i % K] = 1;
  const channels = Int32Array.from([...hit.keys()].filter((k) => hit[k]));
  const residual = new Float64Array(T * channels.length);
  for (let t = 0; t < T; t++) for (let j = 0; j < channels.length; j++) residual[t * channels.length + j] = u[t * K + channels[j]] - q[t * K + channels[j]];
  return { T, K, q, channels, residual };
}

/** r [T, K] from its compact form (scatter ∘ compact = identity). */
export function scatterResidual(d: Decomposition): Float64Array {
  const r = new Float64Array(d.T * d.K);
  const n = d.channels.length;
  for (let t = 0; t < d.T; t++) for (let j = 0; j < n; j++) r[t * d.K + d.channels[j]] = d.residual[t * n + j];
  return r;
}

/** acc[t, o] = Σ_k a[t, k] · W[k, o] over integer codes: exact. `rows(k)` gives W[k, :] (a weight row, or a shadow row). */
export function intMatmulRows(a: Float64Array, T: number, K: number, rows: (k: number) => Int8Array, O: number, out: Float64Array<ArrayBufferLike> = new Float64Array(T * O)): Float64Array<ArrayBufferLike> {
  out.fill(0, 0, T * O);
  for (let k = 0; k < K; k++) {
    let row: Int8Array | null = null;
    for (let t = 0; t < T; t++) {
      const v = a[t * K + k];
      if (v === 0) continue;
      row ??= rows(k);
      const base = t * O;
      for (let o = 0; o < O; o++) out[base + o] += v * row[o];
    }
  }
  return out;
}

/** acc = a · W_q for W_q [K, O] stored row-major. */
export function intMatmul(a: Float64Array, T: number, w: QuantizedWeight, out?: Float64Array<ArrayBufferLike>): Float64Array {
  const { q, inFeatures: K, outFeatures: O } = w;
  return intMatmulRows(a, T, K, (k) => q.subarray(k * O, (k + 1) * O), O, out);
}

/** The CPU half of the decomposition: r[:, C] · W_q[C, :], reading only the rows of C. */
export function shadowCorrection(d: Decomposition, rows: (k: number) => Int8Array, O: number): Float64Array {
  const n = d.channels.length;
  const out = new Float64Array(d.T * O);
  for (let j = 0; j < n; j++) {
    const row = rows(d.channels[j]);
    for (let t = 0; t < d.T; t++) {
      const v = d.residual[t * n + j];
      if (v === 0) continue;
      for (let o = 0; o < O; o++) out[t * O + o] += v * row[o];
    }
  }
  return out;
}

/** The requantization multiplier f32(f32(s_x·s_w) / s_y). */
export function requantMultiplier(sx: number, sw: number, sy: number): number {
  return Math.fround(Math.fround(sx * sw) / sy);
}

/** round(f32(acc) · M) before clamping (out-of-range values are the output side's outliers). */
export const requantUnclamped = (acc: number, M: number): number => roundHalfEven(Math.fround(Math.fround(acc) * M));

/**
 * Output codes of one linear of the static graph, as onnxruntime computes its QDQ pattern:
 * 8-bit activations run the fused integer path (int32 accumulation, float32 multiplier); 16-bit ones
 * the float path (DequantizeLinear → MatMul → QuantizeLinear), whose value is the product in float32.
 */
export function requantize(acc: Float64Array, sx: number, sw: number, sy: number, inBits: ActBits, outBits: ActBits, out = new Float64Array(acc.length)): Float64Array {
  if (inBits === 8) {
    const M = requantMultiplier(sx, sw, sy);
    for (let i = 0; i < acc.length; i++) out[i] = clampCode(requantUnclamped(acc[i], M), outBits);
  } else {
    const sxw = Math.fround(sx * sw);
    for (let i = 0; i < acc.length; i++) out[i] = clampCode(roundHalfEven(Math.fround(Math.fround(Math.fround(acc[i]) * sxw) / sy)), outBits);
  }
  return out;
}

/** Dequantized values: f32(code · s). */
export function dequantize(codes: Float64Array, scale: number, out = new Float32Array(codes.length)): Float32Array {
  for (let i = 0; i < codes.length; i++) out[i] = codes[i] * scale;
  return out;
}
