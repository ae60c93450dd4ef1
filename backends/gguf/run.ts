/**
 * `llmc run` on a gguf artifact: the file runs in llama.cpp itself, through node-llama-cpp (an
 * optional dependency: its prebuilt binaries, CPU only, never built here). Greedy decoding matches
 * llama.cpp's own; sampling is llama.cpp's sampler, seeded.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { escapeControls, LlmcError } from '../../src/core/errors.js';
import type { Artifact, ArtifactRunner, RunOptions, TextCodec } from '../../src/core/pipeline/target.js';
import { checkGgufFile, checkGgufModel } from './read.js';
import { MANIFEST_FILE } from '../../src/core/records/manifest.js';
import { GGUF_INFO } from './info.js';

/** The GGUF file of an artifact: the single file itself, or `file` in its directory. */
export function ggufFileOf(a: Artifact, file = GGUF_INFO.read(a.manifest.targetInfo, path.join(a.dir, MANIFEST_FILE)).file): string {
  return a.path.toLowerCase().endsWith('.gguf') ? a.path : path.join(a.dir, file);
}

/** The part of node-llama-cpp's API used here (typed locally: it is optional, and the build must not need it). */
interface LlamaCpp {
  LlamaLogLevel: { error: unknown };
  getLlama(o: { gpu: false; build: 'never'; logLevel: unknown; logger: (level: unknown, message: string) => void }): Promise<{
    loadModel(o: { modelPath: string; useMmap?: boolean }): Promise<{
      /** llama.cpp's common_tokenize(vocab, text, add_special = false, parse_special = specialTokens). */
      tokenize(text: string, specialTokens?: boolean): number[];
      /** llama_detokenize(vocab, tokens, remove_special = false, unparse_special = specialTokens). */
      detokenize(tokens: readonly number[], specialTokens?: boolean): string;
      /** llama_vocab_get_add_bos / _add_eos (tokenizer.ggml.add_bos_token, or the vocabulary type's default). */
      tokens: { bos: number | null; eos: number | null; shouldPrependBosToken: boolean; shouldAppendEosToken: boolean };
      createContext(o: { contextSize: number; threads: number; experimentalKvCacheKeyType?: string; experimentalKvCacheValueType?: string }): Promise<{
        getSequence(): {
          evaluate(tokens: number[], o: { temperature?: number; topP?: number; seed?: number }): AsyncIterable<number>;
          /** Per input position, with `generateNext.logits`: the raw logits of every vocabulary token. */
          controlledEvaluate(input: [number, { generateNext: { logits: true } }][]): Promise<({ next: { logits?: Map<number, number> } } | undefined)[]>;
        };
        dispose(): Promise<void>;
      }>;
      dispose(): Promise<void>;
    }>;
  }>;
}

const NODE_LLAMA_CPP = 'node-llama-cpp';

/**
 * llama.cpp's own log lines never reach the terminal as they are: kept (the last few) to say why a
 * load failed in llmc's one line, and printed (escaped, prefixed) only with --debug.
 */
function llamaLog(): { logger: (level: unknown, message: string) => void; last(): string | undefined } {
  const lines: string[] = [];
  const debug = process.argv.includes('--debug');
  return {
    logger: (_level, message) => {
      const line = escapeControls(String(message).trim()).slice(0, 300);
      if (!line) return;
      lines.push(line);
      if (lines.length > 20) lines.shift();
      if (debug) process.stderr.write(`llama.cpp: ${line}\n`);
    },
    last: () => lines.at(-1)?.replace(/^\[node-llama-cpp\]\s*/, ''),
  };
}
/** Below this file size llama.cpp runs on one thread unless --threads says otherwise. */
const SMALL_MODEL_BYTES = 64e6;
/** Positions whose logits one llama.cpp evaluation returns (their Maps are what the evaluation holds). */
const LOGIT_ROWS = 64;

/** Options llama.cpp cannot honour (--level, --chunk, --speculative, --expert-cache, --engine) were refused by checkRunOptions. */
export async function openGgufFile(file: string, a: Artifact, opts: RunOptions): Promise<ArtifactRunner> {
  let llamaCpp: LlamaCpp;
  try {
    llamaCpp = (await import(NODE_LLAMA_CPP)) as LlamaCpp;
  } catch {
    throw new LlmcError('running a GGUF needs node-llama-cpp (llama.cpp for Node): npm install node-llama-cpp — or run the file with llama.cpp\'s own llama-cli -m FILE', file);
  }
  // Checked here, because llama.cpp aborts the process on some damaged files instead of failing.
  const header = await checkGgufFile(file);
  checkGgufModel(header, a.manifest.arch, file);
  const template = header.metadata.get('tokenizer.chat_template');
  // llmc's placeholder vocabulary (a checkpoint without a tokenizer): ids round-trip, text does not, so llmc run prints ids.
  const vocab = header.metadata.get('tokenizer.ggml.tokens');
  const placeholder = Array.isArray(vocab) && vocab.some((t) => typeof t === 'string' && t.startsWith('<placeholder_'));
  const log = llamaLog();
  const llama = await llamaCpp.getLlama({ gpu: false, build: 'never', logLevel: llamaCpp.LlamaLogLevel.error, logger: log.logger });
  // Read, not mapped: llama.cpp repacks most quantized tensors into its own CPU buffers, and the mapped
  // pages it read them from stay resident beside the copy (1.1B Q4_K_M: 1.21 GB resident mapped, 0.76 GB read).
  const model = await llama.loadModel({ modelPath: file, useMmap: false }).catch((err: unknown) => {
    throw new LlmcError(`llama.cpp cannot load it: ${log.last() ?? String((err as Error)?.message ?? err).split('\n')[0].slice(0, 200)}`, file);
  });
  const spec = a.manifest.arch;
  const notes = [`running ${path.basename(file)} in llama.cpp (node-llama-cpp)`];
  // --prompt is tokenized by llama.cpp with the GGUF's own vocabulary, as llama-cli does
  // (common_tokenize with add_special and parse_special: BOS / EOS as the vocabulary says).
  const textCodec: TextCodec = {
    encode(text, o) {
      const t = model.tokens;
      // addBos false: a rendered chat template already wrote the special tokens (as transformers' apply_chat_template).
      const special = o?.addBos ?? true;
      const bos = special && t.shouldPrependBosToken && t.bos !== null ? [t.bos] : [];
      const eos = special && t.shouldAppendEosToken && t.eos !== null ? [t.eos] : [];
      return [...bos, ...Array.from(model.tokenize(text, true), Number), ...eos];
    },
    decode: (ids, o) => model.detokenize(ids, !(o?.skipSpecial ?? false)),
  };
  // llama.cpp's threads meet at spin-wait barriers after every op: for a small model they cost more
  // than they save (on a busy 2-core machine 60 ms of logits became 3.5 s), so one thread there.
  const threads = opts.threads ?? ((await fsp.stat(file)).size < SMALL_MODEL_BYTES ? 1 : 0);
  // --kv-type: llama.cpp's type_k / type_v (ggml type names), its default F16 when not given.
  const kv = opts.kvType === undefined ? {} : { experimentalKvCacheKeyType: opts.kvType.toUpperCase(), experimentalKvCacheValueType: opts.kvType.toUpperCase() };
  const context = (tokens: number) => model.createContext({ contextSize: Math.min(spec.maxPositions, Math.max(64, tokens)), threads, ...kv });
  return {
    spec,
    notes,
    ...(placeholder ? {} : { textCodec }),
    ...(typeof template === 'string' ? { chatTemplate: template } : {}),
    engine: 'llama.cpp',
    async logits(ids) {
      const ctx = await context(ids.length);
      try {
        const V = spec.vocabSize;
        const out = new Float32Array(ids.length * V).fill(-Infinity);
        // node-llama-cpp hands each position's logits over as a Map (≈40 bytes per entry): a few
        // positions at a time, so a 512-token window of a 32k vocabulary does not hold 650 MB of them
        const seq = ctx.getSequence();
        for (let from = 0; from < ids.length; from += LOGIT_ROWS) {
          const rows = await seq.controlledEvaluate(ids.slice(from, from + LOGIT_ROWS).map((id) => [id, { generateNext: { logits: true } }]));
          rows.forEach((row, i) => {
            const t = from + i;
            if (!row?.next.logits) throw new LlmcError(`llama.cpp returned no logits at position ${t}`, file);
            for (const [token, logit] of row.next.logits) if (token < V) out[t * V + token] = logit;
          });
        }
        return out;
      } finally {
        await ctx.dispose();
      }
    },
    async generate(promptIds, o) {
      const ctx = await context(promptIds.length + o.maxTokens);
      try {
        const stop = new Set(o.stopIds ?? spec.eosTokenIds);
        const out: number[] = [];
        const sampling = (o.temperature ?? 0) > 0 ? { temperature: o.temperature, topP: o.topP, seed: o.seed } : { temperature: 0 };
        for await (const t of ctx.getSequence().evaluate(promptIds, sampling)) {
          out.push(t);
          o.onToken?.(t);
          if (out.length >= o.maxTokens || stop.has(t)) break;
        }
        return out;
      } finally {
        await ctx.dispose();
      }
    },
    close: async () => {
      await model.dispose();
    },
  };
}

export async function openGguf(a: Artifact, opts: RunOptions): Promise<ArtifactRunner> {
  return openGgufFile(ggufFileOf(a), a, opts);
}
