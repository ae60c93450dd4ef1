/**
 * What sharing the static chunk graphs saves (targetInfo.chunks[].memory.rows of the cuda and qnn
 * targets, read by the report): for N = 1..n chunks, one full graph set per chunk against the static
 * part once, each beside the dynamic part of every chunk index i < N.
 */
export interface ChunkMemoryRow {
  N: number;
  /** Bytes with one set per chunk, N·W + Σ_{i<N} D_i, against the static part once, W + Σ_{i<N} D_i. */
  naive: number;
  shared: number;
  saved: number;
}

/** Rows for N = 1..n from the static bytes W and the dynamic bytes D_i of each chunk index. */
export function chunkMemoryRows(staticBytes: number, dynamicBytes: readonly number[], n: number): ChunkMemoryRow[] {
  const rows: ChunkMemoryRow[] = [];
  let dyn = 0;
  for (let N = 1; N <= n; N++) {
    dyn += dynamicBytes[N - 1];
    const naive = N * staticBytes + dyn;
    const shared = staticBytes + dyn;
    rows.push({ N, naive, shared, saved: 1 - shared / naive });
  }
  return rows;
}
