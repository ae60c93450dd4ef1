/**
 * One job of pooled attention (./attention.ts's KvMemory on a worker pool, ./pool.ts): the KV groups
 * [g0, g0 + count) of one layer's staged query rows, each group widened (compact caches) into its own
 * scratch and its query heads attended in the order one thread takes them, so every head's bits are
 * the same. The job's layout is a parameter block of i32 at `params` in the cache's memory (KvMemory
 * writes it; it lies in the memory's first page, so a view of the first buffer always covers it).
 * Embedded in the pool's workers by its source text: it references nothing outside itself.
 *
 * Block (i32 slots): 0 K base, 1 V base, 2 row bytes, 3 head bytes, 4 widen scratch base (0: f32, no
 * widening), 5 capacity, 6 lo, 7 hi, 8 rows, 9 q base, 10 out base, 11 scores base, 12 scores bytes
 * per group, 13 qDim, 14 nrep, 15 heads per group, 16 hd, 17 scale (float32 bits); then per row r
 * its slot list's address (18 + 2r) and length (19 + 2r).
 */
export function attendGroups(exp: WebAssembly.Exports, memory: WebAssembly.Memory): (...a: number[]) => void {
  const attend = exp.attend as (...a: number[]) => void;
  const widen = exp.widen as ((...a: number[]) => void) | undefined;
  const i32 = new Int32Array(memory.buffer, 0, 16384);
  const f32 = new Float32Array(memory.buffer, 0, 16384);
  return (g0: number, _s: number, params: number, _x: number, _y: number, _ys: number, count: number) => {
    const P = params >> 2;
    const kBase = i32[P], vBase = i32[P + 1], rowBytes = i32[P + 2], hb = i32[P + 3], wide = i32[P + 4], cap = i32[P + 5];
    const lo = i32[P + 6], hi = i32[P + 7], rows = i32[P + 8], qOff = i32[P + 9], outOff = i32[P + 10];
    const scores = i32[P + 11], scoresBytes = i32[P + 12], qDim = i32[P + 13], nrep = i32[P + 14], qpg = i32[P + 15], hd = i32[P + 16];
    const scale = f32[P + 17];
    for (let g = g0; g < g0 + count; g++) {
      let k = kBase + g * hb;
      let v = vBase + g * hb;
      let stride = rowBytes;
      if (wide && widen) {
        const wk = wide + g * 2 * cap * hd * 4;
        const wv = wk + cap * hd * 4;
        if (hi > lo) {
          widen(k + lo * rowBytes, rowBytes, hi - lo, wk + lo * hd * 4);
          widen(v + lo * rowBytes, rowBytes, hi - lo, wv + lo * hd * 4);
        }
        k = wk;
        v = wv;
        stride = 4 * hd;
      }
      const sc = scores + g * scoresBytes;
      for (let r = 0; r < rows; r++) {
        const list = i32[P + 18 + 2 * r];
        const n = i32[P + 19 + 2 * r];
        for (let hh = 0; hh < qpg; hh++) {
          const o = 4 * (r * qDim + (g * nrep + hh) * hd);
          attend(qOff + o, k, v, stride, list, n, sc, outOff + o, scale);
        }
      }
    }
  };
}
