/**
 * [rows, cols] row-major → [cols, rows], in 32 × 32 tiles so reads and writes both stay in cache
 * (a plain double loop writes one element per cache line: 3–5× slower on weight-sized matrices).
 */
export function transpose<T extends Float32Array | Uint16Array | Uint8Array>(a: T, rows: number, cols: number): T {
  const out = new (a.constructor as new (n: number) => T)(a.length);
  const B = 32;
  for (let r0 = 0; r0 < rows; r0 += B) {
    const r1 = Math.min(rows, r0 + B);
    for (let c0 = 0; c0 < cols; c0 += B) {
      const c1 = Math.min(cols, c0 + B);
      for (let r = r0; r < r1; r++) {
        const src = r * cols;
        for (let c = c0; c < c1; c++) out[c * rows + r] = a[src + c];
      }
    }
  }
  return out;
}
