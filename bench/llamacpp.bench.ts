/**
 * Warm decode against llama.cpp (issue 16): the TS runtime (one thread) and llama.cpp through
 * node-llama-cpp (one thread, CPU) greedy-decoding the llama-30M and llama-100M fixtures from the same
 * 16-token prompt, for F32, Q8_0 and Q4_K: the ts artifact of a type against the gguf target's file of
 * that type, both compiled here from the same checkpoint. Each round prefills the prompt (not timed)
 * and times `steps` decode steps (forward + argmax for the TS runtime; node-llama-cpp's evaluate
 * loop with temperature 0 for llama.cpp); rounds alternate the two after a warm-up of each, and the
 * ratio is the median over rounds of each round's ts / llama.cpp tokens/s.
 *
 * Standalone: `npx tsc -p tsconfig.bench.json && node dist/bench/llamacpp.bench.js [--quick]`.
 */
import { promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Token } from 'node-llama-cpp';
import { loadDir } from '../src/exec/runtime/node.js';
import { MANIFEST_FILE } from '../src/exec/runtime/format.js';
import type { Model } from '../src/exec/runtime/model.js';
import { argmax } from '../src/core/sampling.js';
import { cachedFixture, round, runIfMain, type BenchSuite } from './harness.js';
import { compilePlain } from './compile-plain.js';
import { reusedState } from './decode-round.js';

const WORK = path.join(os.tmpdir(), 'llmc-bench-llamacpp');
const TYPES = ['F32', 'Q8_0', 'Q4_K'] as const;
const FIXTURES = ['llama-30M', 'llama-100M'] as const;

/**
 * Decode `steps` tokens after the prompt; tokens/s of the steps and the ids. Like llama.cpp's side
 * (one context, its history cleared per round), every round reuses the model's KV cache and logits
 * buffer (decode-round.ts's reusedState): a new cache page-faults as it fills (~20 µs a fault on
 * this VM; ~0.1 ms of a llama-100M token over a 96-token round), a cost per generation, not per
 * token, and a new 64 KB logits array per token cost another ~0.1 ms.
 */
function tsDecode(model: Model, prompt: number[], steps: number): { tokPerSec: number; ids: number[] } {
  const state = reusedState(model);
  const { cache } = state;
  const into = (state.into = model.forward(prompt, cache, { lastOnly: true, into: state.into }));
  let next = argmax(into);
  const ids = [next];
  const t0 = performance.now();
  for (let i = 0; i < steps; i++) {
    next = argmax(model.forward([next], cache, { lastOnly: true, into }));
    ids.push(next);
  }
  return { tokPerSec: steps / ((performance.now() - t0) / 1000), ids };
}

type Sequence = import('node-llama-cpp').LlamaContextSequence;

/** The same for llama.cpp: the first token (after the prompt) starts the clock. */
async function llamaDecode(seq: Sequence, prompt: number[], steps: number): Promise<{ tokPerSec: number; ids: number[] }> {
  await seq.clearHistory();
  const ids: number[] = [];
  let t0 = 0;
  for await (const token of seq.evaluate(prompt as Token[], { temperature: 0 })) {
    if (ids.length === 0) t0 = performance.now();
    ids.push(token as number);
    if (ids.length > steps) break;
  }
  return { tokPerSec: steps / ((performance.now() - t0) / 1000), ids };
}

/** The ts artifact's weight bytes per format (a plain --quant still mixes formats: fallbacks, F32 norms). */
function tensorBytesByFormat(dir: string): Record<string, number> {
  const m = JSON.parse(readFileSync(path.join(dir, MANIFEST_FILE), 'utf8')) as { targetInfo: { tensors: { format: string; bytes: number }[] } };
  const out: Record<string, number> = {};
  for (const t of m.targetInfo.tensors) out[t.format] = (out[t.format] ?? 0) + t.bytes;
  return out;
}

const median = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

export const suite: BenchSuite = {
  name: 'llamacpp',
  description: 'TS runtime warm decode vs llama.cpp (node-llama-cpp), one thread, llama-30M and llama-100M, F32 / Q8_0 / Q4_K',
  async run(opts) {
    const quick = Boolean(opts.quick);
    const rounds = quick ? 3 : 7;
    const steps = quick ? 32 : 96;
    const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
    await fsp.mkdir(WORK, { recursive: true });
    const results: Record<string, Record<string, unknown>> = {};
    const ratios: Record<string, number> = {};
    for (const fixture of FIXTURES) {
      const { dir } = await cachedFixture(fixture, { arch: 'llama', seed: 1, tokenizer: 'none', planted: false });
      const prompt = Array.from({ length: 16 }, (_, i) => ((i * 37 + 1) % 8000) + 3);
      results[fixture] = {};
      for (const type of TYPES) {
        const tsDir = path.join(WORK, `${fixture}-${type}-ts`);
        const ggufDir = path.join(WORK, `${fixture}-${type}-gguf`);
        await compilePlain(dir, tsDir, type);
        await compilePlain(dir, ggufDir, type, 'gguf');
        const model = await loadDir(tsDir);
        const tsFormats = tensorBytesByFormat(tsDir);
        const lm = await llama.loadModel({ modelPath: path.join(ggufDir, 'model.gguf') });
        const ctx = await lm.createContext({ contextSize: 256, threads: 1 });
        try {
          const seq = ctx.getSequence();
          tsDecode(model, prompt, steps); // warm-up
          await llamaDecode(seq, prompt, steps);
          const ts: number[] = [];
          const cpp: number[] = [];
          let sameIds = true;
          for (let r = 0; r < rounds; r++) {
            const a = tsDecode(model, prompt, steps);
            const b = await llamaDecode(seq, prompt, steps);
            ts.push(a.tokPerSec);
            cpp.push(b.tokPerSec);
            sameIds &&= a.ids.slice(0, 8).join() === b.ids.slice(0, 8).join();
          }
          const ratio = round(median(ts.map((t, i) => t / cpp[i])));
          ratios[`${fixture} ${type}: ts / llama.cpp`] = ratio;
          results[fixture][type] = {
            'ts tokens/s (best, median)': [round(Math.max(...ts), 1), round(median(ts), 1)],
            'llama.cpp tokens/s (best, median)': [round(Math.max(...cpp), 1), round(median(cpp), 1)],
            ratio,
            firstEightIdsAgree: sameIds,
            'ts weight bytes by format': tsFormats,
          };
        } finally {
          await ctx.dispose();
          await lm.dispose();
          await model.close();
        }
      }
    }
    return {
      setup: `one thread each, warm, greedy, 16-token prompt then ${steps} decode steps, ${rounds} interleaved rounds; each side reuses its KV memory (ts: one cache emptied per round; llama.cpp: one context, history cleared)`,
      results,
      ratios,
      targets: { 'decode ts >= 1.0x llama.cpp (every fixture and type)': Object.values(ratios).every((r) => r >= 1) },
    };
  },
};

runIfMain(import.meta.url, suite);
