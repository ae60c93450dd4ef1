/**
 * The one chunked-prefill driver (src/core/chunks/drive.ts) every executor runs on: chunk cuts and
 * pads, and the dispatch order's checks, against brute force over every order of small task sets.
 */
import { describe, expect, it } from 'vitest';
import { ChunkedPrompt, chunkTasks, runChunks, type ChunkEdge } from '../src/core/chunks/drive.js';

/** Every permutation of 0..n−1. */
function* permutations(n: number, prefix: number[] = []): Generator<number[]> {
  if (prefix.length === n) yield prefix;
  for (let k = 0; k < n; k++) if (!prefix.includes(k)) yield* permutations(n, [...prefix, k]);
}

describe('chunked-prefill driver', () => {
  it('cuts P tokens into ⌈P/c⌉ chunks, the last padded with 0 after the prompt; positions clamp to the table', () => {
    const p = new ChunkedPrompt([5, 6, 7, 8, 9], 2);
    expect(p.N).toBe(3);
    expect([0, 1, 2].map((i) => p.chunk(i))).toEqual([[5, 6], [7, 8], [9, 0]]);
    expect([0, 1, 2].map((i) => p.real(i))).toEqual([2, 2, 1]);
    expect(p.positions(2, 5)).toEqual([4, 4]);
    expect(() => new ChunkedPrompt([], 2)).toThrow(/no input ids/);
    expect(() => new ChunkedPrompt([1], 0)).toThrow(/positive integer/);
  });

  it('accepts exactly the orders that keep each chunk in sequence and every edge (brute force, N = 2, M = 3)', () => {
    const N = 2;
    const M = 3;
    // qkv(0) → attention(1) within a chunk and across earlier chunks; attention → mlp(2) within
    const edges: ChunkEdge[] = [{ from: 0, to: 1, cross: true }, { from: 1, to: 2, cross: false }];
    const ids = ['qkv', 'attention', 'mlp'];
    let accepted = 0;
    for (const order of permutations(N * M)) {
      const pos = new Map(order.map((t, n) => [t, n]));
      const before = (a: number, b: number) => pos.get(a)! < pos.get(b)!;
      let ok = true;
      for (let i = 0; i < N; i++) for (let j = 1; j < M; j++) ok &&= before(i * M + j - 1, i * M + j);
      for (const e of edges) for (let i = 0; i < N; i++) for (let k = e.cross ? 0 : i; k <= i; k++) ok &&= before(k * M + e.from, i * M + e.to);
      const ran: number[] = [];
      const run = () => runChunks({ task: (i, j) => void ran.push(i * M + j) }, order, N, M, { edges, ids });
      if (ok) {
        run();
        expect(ran).toEqual(order);
        accepted++;
      } else expect(run).toThrow(/the schedule runs|chunk order runs/);
    }
    expect(accepted).toBeGreaterThan(1);
  });

  it('refuses an order of the wrong length or naming a task twice', () => {
    expect(() => [...chunkTasks([0, 1, 2], 2, 2)]).toThrow(/3 tasks for 2 chunks of 2 subgraphs/);
    expect(() => [...chunkTasks([0, 0, 1, 2], 2, 2)]).toThrow(/chunk order runs G\(0,0\) before G\(0,1\)/);
  });
});
