/**
 * One timed round for each runtime bench/peers.bench.ts compares, written once and run both in Node
 * and (bundled by esbuild) on the Chromium page: prefill a prompt of token ids, then greedy-decode
 * `steps` tokens. The peers' modules are passed in (they live in bench/peers/node_modules, which
 * may be absent), so this file imports nothing of theirs.
 */
import { argmax } from '../src/core/sampling.js';

/** Marks a child's answers (bench/peers-child.ts) among whatever else the libraries print. */
export const RESULT_MARK = '@@peer ';

/** A prompt as ids (BOS first) and as the text they decode to (wllama takes text only; llama.cpp adds the BOS). */
export interface Prompt {
  ids: number[];
  text: string;
  /**
   * The vocabulary's ids whose piece alone is not valid UTF-8 (a byte-level vocabulary's lone bytes
   * 0x80-0xFF). wllama cannot return them: its reply is JSON of the generated text, and llama.cpp's
   * JSON writer throws on invalid UTF-8 (type_error.316), so the worker answers nothing. An untrained
   * model's greedy decode emits them; wllama's rounds bias them out (decode costs the same per token).
   */
  notText: number[];
}
/** One round: the prompt's prefill tokens/s, then decode tokens/s over the `steps` tokens after it. */
export interface Round {
  prefillTokS: number;
  /** Prompt tokens the runtime prefilled (wllama: its own tokenization of the text). */
  promptTokens: number;
  decodeTokS: number;
  /** The greedy ids made (the first from the prefill); empty where the runtime does not report them. */
  ids: number[];
}
export interface Runner {
  round(prompt: Prompt, steps: number): Promise<Round>;
  close(): Promise<void>;
}

/** What the llmc runtime's Model offers a round (src/exec/runtime/model.ts). */
export interface LlmcModel {
  newCache(): { length: number };
  forward(ids: number[], cache: never, o: { lastOnly: boolean; into?: Float32Array }): Float32Array;
  close(): Promise<void>;
}

/**
 * The llmc runtime: one KV cache and one logits buffer reused from round to round (as llama.cpp's
 * context and Model.generate's buffer are), so a round times the forward passes, not page faults.
 */
export function llmcRunner(model: LlmcModel): Runner {
  const cache = model.newCache();
  let into: Float32Array | undefined;
  return {
    async round({ ids: prompt }, steps) {
      cache.length = 0;
      const t0 = performance.now();
      into = model.forward(prompt, cache as never, { lastOnly: true, into });
      const t1 = performance.now();
      let next = argmax(into);
      const ids = [next];
      for (let s = 0; s < steps; s++) {
        next = argmax(model.forward([next], cache as never, { lastOnly: true, into }));
        ids.push(next);
      }
      const t2 = performance.now();
      return { prefillTokS: (prompt.length * 1000) / (t1 - t0), promptTokens: prompt.length, decodeTokS: (steps * 1000) / (t2 - t1), ids };
    },
    close: () => model.close(),
  };
}

/* eslint-disable @typescript-eslint/no-explicit-any -- the peers' modules are loaded at run time, untyped here */
/**
 * transformers.js: `AutoModelForCausalLM.from_pretrained(id)` of the cuda target's directory, on
 * onnxruntime-web's WebAssembly backend (its threads set by the caller before the first session),
 * timed through `generate` as a user runs it: greedy, `min_new_tokens` so that EOS does not stop it,
 * and a streamer whose put() marks each token (the first put is the prompt).
 */
export async function transformersRunner(tjs: any, modelId: string): Promise<Runner> {
  const model = await tjs.AutoModelForCausalLM.from_pretrained(modelId, { dtype: 'fp32', local_files_only: true });
  return {
    async round({ ids: prompt }, steps) {
      const marks: number[] = [];
      const streamer = { put: () => void marks.push(performance.now()), end: () => {} };
      const n = prompt.length;
      const t0 = performance.now();
      const out = await model.generate({
        input_ids: new tjs.Tensor('int64', BigInt64Array.from(prompt, (x) => BigInt(x)), [1, n]),
        attention_mask: new tjs.Tensor('int64', new BigInt64Array(n).fill(1n), [1, n]),
        max_new_tokens: steps + 1,
        min_new_tokens: steps + 1,
        do_sample: false,
        streamer,
      });
      if (marks.length < steps + 2) throw new Error(`transformers.js streamed ${marks.length - 1} tokens, not ${steps + 1}`);
      const ids = Array.from(out.data as BigInt64Array, Number).slice(n);
      return { prefillTokS: (n * 1000) / (marks[1] - t0), promptTokens: n, decodeTokS: (steps * 1000) / (marks[steps + 1] - marks[1]), ids };
    },
    close: () => model.dispose(),
  };
}

/**
 * wllama (llama.cpp's server context in WebAssembly): the GGUF loaded from a Blob with `threads`,
 * a completion of the prompt's text (its API takes no ids; no prompt cache, EOS ignored,
 * temperature 0), timed by llama.cpp's own `timings` (prompt_per_second; predicted_per_second).
 */
export async function wllamaRunner(mod: any, wasmUrl: string, gguf: Blob, threads: number, nCtx: number): Promise<Runner> {
  // llama.cpp's own error lines (its worker's reply to a failed action is empty): kept for the error.
  const errors: string[] = [];
  const error = (...a: unknown[]) => void errors.push(a.map(String).join(' ').split('\n')[0]);
  const w = new mod.Wllama({ default: wasmUrl }, { suppressNativeLog: false, logger: { debug() {}, log() {}, warn() {}, error } });
  const failed = (e: unknown) => new Error(`wllama: ${[...new Set([...errors, e instanceof Error ? e.message : String(e)])].join('; ')}`);
  await w
    .loadModel([gguf], { n_threads: threads, n_ctx: nCtx, n_batch: 512, n_ubatch: 512, n_gpu_layers: 0, warmup: false, cache_type_k: 'f32', cache_type_v: 'f32' })
    .catch((e: unknown) => {
      throw failed(e);
    });
  if (w.getNumThreads() !== threads) throw new Error(`wllama runs ${w.getNumThreads()} threads (multi-thread build: ${w.isMultithread()}), not ${threads}`);
  return {
    async round(prompt, steps) {
      errors.length = 0;
      const logitBias = Object.fromEntries(prompt.notText.map((id) => [String(id), false]));
      const r = await w.createCompletion({ prompt: prompt.text, max_tokens: steps + 1, temperature: 0, ignore_eos: true, cache_prompt: false, logit_bias: logitBias }).catch((e: unknown) => {
        throw failed(e);
      });
      const t = r.timings;
      if (!t || t.predicted_n !== steps + 1) throw new Error(`wllama's timings count ${t?.predicted_n} tokens, not ${steps + 1}`);
      return { prefillTokS: t.prompt_per_second, promptTokens: t.prompt_n, decodeTokS: t.predicted_per_second, ids: [] };
    },
    close: () => w.exit(),
  };
}
