/**
 * The decode timing loop of the browser comparison (bench/browser-runtime.ts): Node runs it from
 * here, and the page runs this same file bundled by esbuild, so both sides time the same code.
 */
import { argmax } from '../src/exec/runtime/sampling.js';

/**
 * How a timed round runs. 'fresh': a new KV cache per round and a new logits array per token (the
 * loop before branch `chromium`). 'reuse': one cache, emptied per round, and one logits buffer
 * (`forward`'s `into`), so a round allocates nothing: on this VM a page fault costs ~20 µs of CPU and
 * Chromium's ArrayBuffer allocations page-fault, so 'fresh' mostly times the VM there
 * (docs/speed.md, "Chromium vs Node").
 */
export type DecodeLoop = 'fresh' | 'reuse';

export interface DecodeModel {
  newCache(): { length: number };
  forward(ids: number[], cache: never, o: { lastOnly: boolean; into?: Float32Array }): Float32Array;
}

/** A model's cache and logits buffer for 'reuse' rounds. */
const reused = new WeakMap<object, { cache: { length: number }; into?: Float32Array }>();

/** One timed round: greedy decode of `steps` tokens from BOS (id 1); tokens/s. */
export function decodeRound(model: DecodeModel, steps: number, loop: DecodeLoop = 'reuse'): number {
  let state = reused.get(model);
  if (loop === 'reuse' && !state) reused.set(model, (state = { cache: model.newCache() }));
  const cache = loop === 'reuse' && state ? state.cache : model.newCache();
  cache.length = 0;
  let token = 1;
  const t0 = performance.now();
  for (let s = 0; s < steps; s++) {
    const logits = model.forward([token], cache as never, { lastOnly: true, into: loop === 'reuse' ? state?.into : undefined });
    if (loop === 'reuse' && state) state.into = logits;
    token = argmax(logits);
  }
  return (steps * 1000) / (performance.now() - t0);
}
