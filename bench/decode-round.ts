/**
 * The decode timing loop of the browser comparison (bench/browser-runtime.ts): Node runs it from
 * here, and the page runs this same file bundled by esbuild, so both sides time the same code.
 */
import { argmax } from '../src/core/sampling.js';

/**
 * How a timed round runs. 'fresh': a new KV cache per round and a new logits array per token (the
 * loop before branch `chromium`). 'reuse': one cache, emptied per round, and one logits buffer
 * (`forward`'s `into`), so a round allocates nothing: on this VM a page fault costs ~20 µs of CPU and
 * Chromium's ArrayBuffer allocations page-fault, so 'fresh' mostly times the VM there
 * (docs/lab/speed-history.md, "Chromium vs Node").
 */
export type DecodeLoop = 'fresh' | 'reuse';

export interface DecodeModel {
  newCache(): { length: number };
  forward(ids: number[], cache: never, o: { lastOnly: boolean; into?: Float32Array }): Float32Array;
}

/** What a decode loop reuses from round to round: the model's KV cache and its logits buffer (set by the first forward). */
export interface ReusedState<C> {
  cache: C;
  into?: Float32Array;
}

const reused = new WeakMap<object, ReusedState<{ length: number }>>();

/**
 * The model's one KV cache, emptied, and its logits buffer (pass `into`, then keep the returned
 * logits as `into`): a round that reuses them allocates and page-faults nothing, as llama.cpp's
 * context and Model.generate's buffer are reused.
 */
export function reusedState<C extends { length: number }>(model: { newCache(): C }): ReusedState<C> {
  let state = reused.get(model) as ReusedState<C> | undefined;
  if (!state) reused.set(model, (state = { cache: model.newCache() }));
  state.cache.length = 0;
  return state;
}

/** One timed round: greedy decode of `steps` tokens from BOS (id 1); tokens/s. */
export function decodeRound(model: DecodeModel, steps: number, loop: DecodeLoop = 'reuse'): number {
  const state: ReusedState<{ length: number }> = loop === 'reuse' ? reusedState(model) : { cache: model.newCache() };
  let token = 1;
  const t0 = performance.now();
  for (let s = 0; s < steps; s++) {
    const logits = model.forward([token], state.cache as never, { lastOnly: true, into: state.into });
    if (loop === 'reuse') state.into = logits;
    token = argmax(logits);
  }
  return (steps * 1000) / (performance.now() - t0);
}
