/** Data-free calibration: sequences sampled from the model itself, seeded. */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, test } from 'vitest';
import { heldOutSequences, selfGeneratedSequences, textSequences } from '../src/measure/sequences.js';
import { Llama64 } from './reference/llama64.js';
import { STORIES, storiesEngine } from './stories-engine.js';

const reference = JSON.parse(readFileSync(path.join(STORIES, 'reference.json'), 'utf8')) as { greedy_ids: number[] };

describe('self-generated calibration on stories260K', () => {
  const stories = storiesEngine();

  test('default size is 10 × 64, every sequence starts at BOS, same seed → same ids, held-out differs', async () => {
    const a = await selfGeneratedSequences(stories.engine, { seed: 5 });
    const b = await selfGeneratedSequences(stories.engine, { seed: 5 });
    const h = await heldOutSequences(stories.engine, { seed: 5 });
    expect(a.length).toBe(10);
    for (const s of [...a, ...h]) {
      expect(s.length).toBe(64);
      expect(s[0]).toBe(1);
      for (const id of s) expect(id >= 0 && id < 512).toBe(true);
    }
    expect(b).toEqual(a);
    expect(h).not.toEqual(a);
    // Distinct sequences within one draw (seeded per sequence).
    expect(new Set(a.map((s) => s.join(','))).size).toBe(10);
  });

  test('temperature 0 gives the greedy continuation from reference.json', async () => {
    const [s] = await selfGeneratedSequences(stories.engine, { count: 1, length: 21, temperature: 0 });
    expect(s).toEqual([1, ...reference.greedy_ids.slice(0, 20)]);
  });

  test('first sampled tokens follow the model distribution (float64 reference probabilities)', async () => {
    const ref = await Llama64.load(stories.ck);
    const logits = ref.forward([1])[0];
    const mx = Math.max(...logits);
    const z = logits.reduce((acc, v) => acc + Math.exp(v - mx), 0);
    const p = logits.map((v) => Math.exp(v - mx) / z);
    const n = 400;
    const seqs = await selfGeneratedSequences(stories.engine, { count: n, length: 2, seed: 11 });
    const counts = new Map<number, number>();
    for (const s of seqs) counts.set(s[1], (counts.get(s[1]) ?? 0) + 1);
    // The most likely tokens: observed frequency within 4 standard deviations of the binomial.
    const top = [...p.keys()].sort((x, y) => p[y] - p[x]).slice(0, 3);
    for (const t of top) {
      const sd = Math.sqrt(n * p[t] * (1 - p[t]));
      expect(Math.abs((counts.get(t) ?? 0) - n * p[t])).toBeLessThan(4 * sd + 1);
    }
  });
});

test('textSequences: BOS + ids cut into windows, tails shorter than 2 dropped', () => {
  const chars = { encode: (t: string) => [...t].map((c) => c.charCodeAt(0)) };
  expect(textSequences(chars, ['abcde', 'xy'], { length: 3, bosTokenId: 1 })).toEqual([
    [1, 97, 98],
    [99, 100, 101],
    [1, 120, 121],
  ]);
  expect(textSequences(chars, ['abcd'], { length: 3 })).toEqual([[97, 98, 99]]);
  // A tokenizer that already adds BOS does not get a second one.
  expect(textSequences({ encode: (t: string) => [1, ...chars.encode(t)] }, ['ab'], { length: 8, bosTokenId: 1 })).toEqual([[1, 97, 98]]);
});
