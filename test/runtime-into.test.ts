/**
 * `forward`'s `into` (a decode loop that reuses one logits buffer allocates no ArrayBuffer per token)
 * and a KV cache emptied with `length = 0` (bench/decode-round.ts's 'reuse' loop): the same logits,
 * bit for bit, as a new array per call and a fresh cache; on stories260K, whose greedy ids must be
 * reference.json's.
 */
import { promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadDir } from '../src/exec/runtime/node.js';
import { argmax } from '../src/core/sampling.js';
import type { Model } from '../src/exec/runtime/model.js';
import { compileTs } from './ts-artifact.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
const ref = JSON.parse(readFileSync(path.join(STORIES, 'reference.json'), 'utf8')) as { prompt_ids: number[]; greedy_ids: number[] };

let tmp: string;
let model: Model;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-into-'));
  await compileTs(STORIES, tmp);
  model = await loadDir(tmp);
});
afterAll(async () => {
  await model?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

/** Greedy decode after the reference prompt; every step's logits (copied). */
function decode(cache: ReturnType<Model['newCache']>, into?: Float32Array): { ids: number[]; logits: Float32Array[] } {
  let logits = model.forward(ref.prompt_ids, cache, { lastOnly: true, into });
  const ids: number[] = [];
  const all = [logits.slice()];
  for (let s = 0; s < ref.greedy_ids.length; s++) {
    ids.push(argmax(logits));
    if (s + 1 === ref.greedy_ids.length) break;
    const next = model.forward([ids[s]], cache, { lastOnly: true, into });
    if (into) expect(next.buffer).toBe(into.buffer);
    logits = next;
    all.push(logits.slice());
  }
  return { ids, logits: all };
}

describe('forward into one buffer, cache emptied and reused', () => {
  it('gives the logits of new arrays and a fresh cache, bit for bit', () => {
    const plain = decode(model.newCache());
    expect(plain.ids).toEqual(ref.greedy_ids);
    const into = new Float32Array(plain.logits[0].length);
    const cache = model.newCache();
    decode(cache); // fills and grows the cache
    cache.length = 0;
    const reused = decode(cache, into);
    expect(reused.ids).toEqual(ref.greedy_ids);
    for (let s = 0; s < plain.logits.length; s++) expect(Buffer.from(reused.logits[s].buffer)).toEqual(Buffer.from(plain.logits[s].buffer));
    // A longer buffer returns the logits as its prefix; a shorter one is refused.
    const long = new Float32Array(into.length + 7);
    const out = model.forward([1], model.newCache(), { lastOnly: true, into: long });
    expect(out.length).toBe(into.length);
    expect(out.buffer).toBe(long.buffer);
    expect(() => model.forward([1], model.newCache(), { lastOnly: true, into: new Float32Array(into.length - 1) })).toThrow(/`into` holds/);
  });
});
