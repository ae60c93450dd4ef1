/** Error measures the tests compare logits with. */

/** max |a − b| / max |b| over the whole array. */
export function relErr(a: Float32Array, b: Float32Array): number {
  let e = 0;
  let m = 0;
  for (let i = 0; i < b.length; i++) {
    e = Math.max(e, Math.abs(a[i] - b[i]));
    m = Math.max(m, Math.abs(b[i]));
  }
  return e / m;
}

/** max |a − b| over a row, relative to the row's largest |b|; the worst row. `a` is [T, V] flat. */
export function maxRelError(a: Float32Array, rows: Float64Array[]): number {
  const V = rows[0].length;
  let worst = 0;
  rows.forEach((b, t) => {
    let scale = 0;
    let err = 0;
    for (let i = 0; i < V; i++) {
      scale = Math.max(scale, Math.abs(b[i]));
      err = Math.max(err, Math.abs(a[t * V + i] - b[i]));
    }
    worst = Math.max(worst, err / scale);
  });
  return worst;
}
