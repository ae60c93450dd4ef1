import type { Command } from 'commander';
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { LlmcError, UsageError } from '../../../core/errors.js';
import { KV_TYPES, RUN_ENGINES, type ArtifactRunner, type KvType, type RunEngine, type RunOptions } from '../../../core/pipeline/target.js';
import { ELASTIC_LEVELS, findRecord, levelJson, type ElasticLevels } from '../../../core/records/index.js';
import { artifactOffer, CHECKPOINT_OFFER, checkRunOptions } from '../../../core/pipeline/run-usage.js';
import { locate, RUN_CATALOG, verifyFiles } from '../../artifact.js';
import { noteLine, printJson } from '../output.js';
import { OutputClosed, TokenSink } from '../token-sink.js';
import { parseFloatOption, parseIdList, parseIntOption } from '../options.js';
import { parseJson } from '../../../core/util/json.js';
import { holdYoungGeneration } from '../../../exec/runtime/node.js';

/** The runner for a checkpoint, or for an artifact through its target's descriptor (after checking its files). */
async function openRunner(modelPath: string, o: RunOptions & { allowNonFinite?: boolean }): Promise<{ runner: ArtifactRunner; levels?: ElasticLevels; dir: string; hashes?: Promise<void> }> {
  const where = await locate(modelPath);
  if (where.kind === 'checkpoint') {
    checkRunOptions(CHECKPOINT_OFFER, o, RUN_CATALOG);
    const { openCheckpointRunner } = await import('../../../exec/engine/generator.js');
    return { runner: await openCheckpointRunner(where.dir, { threads: o.threads, allowNonFinite: o.allowNonFinite }), dir: where.dir };
  }
  if (!where.target.open) throw new UsageError(`llmc cannot run ${where.target.name} artifacts itself (${where.path}); see llmc list targets`);
  checkRunOptions(artifactOffer(where, where.target, where.manifestPath ?? where.path), o, RUN_CATALOG);
  if (where.manifestPath === null && o.verify) throw new UsageError("--verify: a GGUF without llmc's manifest beside it has no recorded sha256 to check against");
  await verifyFiles(where, { hash: Boolean(o.verify) });
  // Without --verify every file's sha256 is checked in the background while the model loads and
  // runs; nothing is printed before it passes (a flipped byte in the weights is one line, not output).
  // (A GGUF without llmc's manifest has no recorded hashes to check against.)
  const hashes = o.verify || where.manifestPath === null ? undefined : verifyFiles(where, { hash: true });
  hashes?.catch(() => {});
  const runner = await where.target.open(where, o).catch(async (err: unknown) => {
    await hashes; // a damaged file says so, before whatever it made the loader say
    throw err;
  });
  return { runner, levels: findRecord(where.manifest.passes, ELASTIC_LEVELS, where.dir) ?? undefined, dir: where.dir, hashes };
}

/** `--prompt-file FILE` (`-`: stdin) as text; one trailing newline is dropped, as llama.cpp's -f does. */
async function readPromptFile(file: string): Promise<string> {
  let text: string;
  if (file === '-') {
    const chunks: Buffer[] = [];
    for await (const c of process.stdin) chunks.push(c as Buffer);
    text = Buffer.concat(chunks).toString('utf8');
  } else {
    try {
      text = await fsp.readFile(file, 'utf8');
    } catch (err) {
      throw new LlmcError(`cannot read the prompt: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message}`, file);
    }
  }
  return text.replace(/\r?\n$/, '');
}

/**
 * The ids that end generation: config.json's eos_token_id (the spec's), generation_config.json's
 * (an id or a list, as transformers' generate stops on) and the tokenizer's eos_token.
 */
function eosIds(runner: ArtifactRunner, tokenizerEos: number | null | undefined, generationConfigFile: string): number[] {
  const ids = new Set(runner.spec.eosTokenIds);
  if (runner.generationConfigJson !== undefined) {
    const g = parseJson(runner.generationConfigJson, generationConfigFile) as { eos_token_id?: unknown } | null;
    const e = g?.eos_token_id;
    const list = e === undefined || e === null ? [] : Array.isArray(e) ? e : [e];
    for (const id of list) {
      if (!Number.isInteger(id) || (id as number) < 0) throw new LlmcError(`eos_token_id must be a token id or a list of them, got ${JSON.stringify(e)}`, generationConfigFile);
      ids.add(id as number);
    }
  }
  if (tokenizerEos != null) ids.add(tokenizerEos);
  return [...ids];
}

/** Generation's timings, load and set-up excluded: prefill ends with the first token, decode makes the rest. */
function timings(sink: TokenSink, promptTokens: number, generated: number) {
  const ms = (a: bigint, b: bigint) => Number(b - a) / 1e6;
  const first = sink.first ?? sink.started;
  const last = sink.last ?? first;
  const prefillMs = ms(sink.started, first);
  const decodeMs = ms(first, last);
  return {
    prefill_ms: prefillMs,
    decode_ms: decodeMs,
    prefill_tokens_per_second: prefillMs > 0 ? (1000 * promptTokens) / prefillMs : null,
    decode_tokens_per_second: generated > 1 && decodeMs > 0 ? (1000 * (generated - 1)) / decodeMs : null,
    /** Every generated token over prefill and decode together. */
    tokens_per_second: generated / (ms(sink.started, last) / 1000),
  };
}

/** `--chunk`: a chunk length of at least one token, or auto. */
function parseChunkOption(v: string): number | 'auto' {
  if (v.trim() === 'auto') return 'auto';
  if (!/^-?\d+$/.test(v.trim()) || Number(v) < 1) throw new UsageError(`--chunk must be a chunk length of at least 1 token, or auto; got "${v}"`);
  return Number(v);
}

function parseEngineOption(v: string): RunEngine {
  const engine = RUN_ENGINES.find((e) => e === v);
  if (!engine) throw new UsageError(`--engine must be ${RUN_ENGINES.join(' or ')}; got "${v}"`);
  return engine;
}

function parseKvType(v: string): KvType {
  const t = KV_TYPES.find((e) => e === v);
  if (!t) throw new UsageError(`--kv-type must be ${KV_TYPES.join(', ')}; got "${v}"`);
  return t;
}

export function registerRun(program: Command): void {
  program
    .command('run')
    .description('Generate tokens, streamed as made (text with a tokenizer, else ids), from a checkpoint or an artifact on its own engine (llmc list targets)')
    .argument('<model>', 'checkpoint or artifact directory, or a GGUF file')
    .option('--prompt-ids <ids>', 'prompt as comma-separated token ids, e.g. 1,2,3', parseIdList('--prompt-ids'))
    .option('--prompt <text>', 'prompt text (the model\'s tokenizer.json, or a GGUF\'s own vocabulary)')
    .option('--prompt-file <file>', 'prompt text from a file, - for stdin (one trailing newline dropped)')
    .option('--chat', "render the prompt as a user message with the model's chat template")
    .option('--system <text>', '--chat: a system message before it')
    .requiredOption('-n, --max-tokens <n>', 'tokens to generate at most (stops earlier at EOS)', parseIntOption('--max-tokens', 1))
    .option('--ignore-eos', 'generate all --max-tokens tokens, past EOS (benchmarks)')
    .option('--ids', 'print token ids even when the model has a tokenizer')
    .option('--temperature <t>', 'sampling temperature; 0 = greedy', parseFloatOption('--temperature', 0), 0)
    .option('--top-p <p>', 'nucleus sampling mass in (0, 1]', parseFloatOption('--top-p', 0, 1), 1)
    .option('--seed <s>', 'sampling seed', parseIntOption('--seed', 0), 0)
    .option('--threads <n>', 'CPU threads (default: all cores; one for the TS runtime and a GGUF under 64 MB)', parseIntOption('--threads', 1))
    .option('--level <level>', 'elastic level of an artifact compiled with --passes reorder (ts, cuda, gguf-levels): an id (L3) or a size fraction (0.5)')
    .option('--verify', "check every file's sha256 before loading (default: in the background, before any output)")
    .option('--allow-overflow', "generate past the model's context length")
    .option('--allow-nonfinite', 'run a checkpoint whose weights hold Inf or NaN (refused by default)')
    .option('--expert-cache <n>', 'MoE ts artifact: at most N routed experts in memory, the rest read from the file on demand', parseIntOption('--expert-cache', 1))
    .option('--expert-policy <policy>', 'expert cache eviction: edgemoe | lru | lfu (default: edgemoe with --passes expert-bits, else lru)')
    .option('--expert-preload <m>', "experts preloaded per MoE layer (default: expert-bits' choice; 0 = none)", parseIntOption('--expert-preload', 0))
    .option('--speculative', 'greedy speculative decoding with the verification tree of --passes tree-search (same tokens as greedy)')
    .option('--draft <dir>', "--speculative with a draft checkpoint: that checkpoint's ts artifact")
    .option('--chunk <c>', 'prefill in chunks of c tokens (--passes chunk-partition), or auto', parseChunkOption)
    .option('--engine <engine>', 'qnn artifact: sim (default; its NPU integer pipeline simulated in TS) or onnxruntime (its QDQ graphs)', parseEngineOption)
    .option('--kv-type <type>', 'KV cache: f32, f16 or q8_0 (default: f32 on ts, f16 on gguf)', parseKvType)
    .option('--json', 'print one JSON object at the end instead of streaming (ids, text, stop_reason, timings)')
    .addHelpText(
      'after',
      '\nExamples (from a clone):\n  llmc run fixtures/models/stories260K --prompt-ids 1 --max-tokens 32\n' +
        '  llmc compile fixtures/models/stories260K --target ts --passes reorder --levels 0.5,0.75,1 -o out/elastic && llmc run out/elastic --prompt-ids 1 -n 32 --level 0.5\n' +
        '  llmc run ./model --prompt "Once upon a time" -n 20 --temperature 0.8 --seed 7 --json\n' +
        '  llmc run ./model --chat --system "Be brief." --prompt "What is a compiler?" -n 64\n' +
        '  llmc run ./artifact --prompt-ids 1 -n 64 --speculative --json\n\n' +
        'Environment (ts artifacts, the TS runtime):\n' +
        '  LLMC_KERNEL_CACHE  where the assembled WebAssembly kernels are kept between runs (default\n' +
        '                     $XDG_CACHE_HOME/llmc/kernels, else ~/.cache/llmc/kernels); off: assemble them every run\n' +
        '  LLMC_RELAXED_SIMD  default: quantized kernels use relaxed SIMD\'s exact integer dots where available\n' +
        '                     (same bits as without); on: also fused multiply-adds in F32 prefill (logits may\n' +
        '                     then differ in the last bits between machines); off: no relaxed SIMD\n' +
        '  LLMC_RUN_BUNDLE    off: start from dist/ instead of the one-file bundle of the run path\n',
    )
    .action(async (modelPath: string, o) => {
      // Peak memory while decoding: V8's young generation kept at its initial size (see holdYoungGeneration).
      holdYoungGeneration();
      const given = [o.promptIds, o.prompt, o.promptFile].filter((x) => x !== undefined).length;
      if (given !== 1) throw new UsageError('give exactly one of --prompt, --prompt-file or --prompt-ids');
      if (o.chat && o.promptIds !== undefined) throw new UsageError('--chat renders a text prompt: give --prompt or --prompt-file, not --prompt-ids');
      if (o.system !== undefined && !o.chat) throw new UsageError('--system is for --chat');
      if (o.topP <= 0) throw new UsageError(`--top-p must be in (0, 1], got ${o.topP}`);
      if (o.expertCache === undefined && (o.expertPolicy !== undefined || o.expertPreload !== undefined)) throw new UsageError('--expert-policy and --expert-preload need --expert-cache N');
      if (o.expertPolicy !== undefined && !['edgemoe', 'lru', 'lfu'].includes(o.expertPolicy)) throw new UsageError(`--expert-policy must be edgemoe, lru or lfu, got "${o.expertPolicy}"`);
      const experts = o.expertCache === undefined ? undefined : { capacity: o.expertCache as number, policy: o.expertPolicy as 'edgemoe' | 'lru' | 'lfu' | undefined, preload: o.expertPreload as number | undefined };
      if (o.speculative && o.temperature > 0) throw new UsageError('--speculative decodes greedily: leave --temperature at 0');
      if (o.draft !== undefined && !o.speculative) throw new UsageError('--draft is for --speculative');
      if (o.speculative && o.chunk !== undefined) throw new UsageError('--speculative and --chunk do not combine (speculative decoding prefills the prompt whole)');
      if (o.speculative && o.topP !== 1) throw new UsageError('--speculative decodes greedily: leave --top-p at 1');
      const speculative = o.speculative ? { draft: o.draft as string | undefined } : undefined;
      const promptText: string | undefined = o.promptFile !== undefined ? await readPromptFile(o.promptFile) : o.prompt;
      const { runner, levels, dir, hashes } = await openRunner(modelPath, { threads: o.threads, level: o.level, verify: o.verify, allowNonFinite: o.allowNonfinite, experts, speculative, chunk: o.chunk, engine: o.engine, kvType: o.kvType });
      const tokenizerFile = path.join(dir, 'tokenizer.json');
      try {
        // The tokenizer (and its schema library) loads only for models that have one.
        const codec = runner.textCodec ?? (runner.tokenizerJson ? (await import('../../../core/tokenizer/index.js')).loadTokenizer(runner.tokenizerJson, runner.tokenizerConfigJson, tokenizerFile) : null);
        let promptIds: number[];
        if (promptText !== undefined) {
          if (!codec) throw new LlmcError(`${o.promptFile !== undefined ? '--prompt-file' : '--prompt'} needs a tokenizer.json; this model has none (use --prompt-ids)`, modelPath);
          if (o.chat) {
            // As transformers' apply_chat_template: the template writes the special tokens (BOS too), so none are added.
            const chat = await import('../../../core/tokenizer/chat.js');
            const configFile = tokenizerFile.replace(/tokenizer\.json$/, 'tokenizer_config.json');
            const template = runner.chatTemplate ?? chat.chatTemplateOf(runner.tokenizerConfigJson, configFile);
            if (template === null) throw new LlmcError('--chat: this model has no chat template (no chat_template.jinja, no chat_template in tokenizer_config.json); run without --chat', modelPath, 2);
            const messages = [...(o.system !== undefined ? [{ role: 'system' as const, content: o.system as string }] : []), { role: 'user' as const, content: promptText }];
            promptIds = codec.encode(chat.renderChat(template, messages, runner.tokenizerConfigJson, configFile), { addBos: false });
          } else {
            // BOS as the tokenizer's post-processor / tokenizer_config.json add it.
            promptIds = codec.encode(promptText);
          }
        } else promptIds = o.promptIds;
        if (promptIds.length === 0) throw new UsageError('the prompt is empty');
        const V = runner.spec.vocabSize;
        const bad = promptIds.find((id) => id >= V);
        if (bad !== undefined) throw new UsageError(`--prompt-ids: token id ${bad} is outside the vocabulary (0..${V - 1})`);
        const ctx = runner.spec.maxPositions;
        if (promptIds.length + o.maxTokens > ctx && !o.allowOverflow) {
          throw new UsageError(
            `${promptIds.length} prompt tokens + ${o.maxTokens} to generate exceed the model's context of ${ctx}; lower --max-tokens to ${Math.max(0, ctx - promptIds.length)} (or --allow-overflow)`,
          );
        }
        if (!o.json) for (const n of new Set(runner.notes)) process.stderr.write(`${noteLine(n)}\n`);
        const eos = o.ignoreEos ? [] : eosIds(runner, codec?.eosId, path.join(dir, 'generation_config.json'));
        const stop = new Set(eos);
        const decodeText = codec && ((ids: readonly number[]) => codec.decode(ids, { skipSpecial: true }));
        const sink = new TokenSink(o.json ? { kind: 'quiet' } : decodeText && !o.ids ? { kind: 'text', decode: decodeText } : { kind: 'ids' }, stop);
        // The files' hashes, running since the load began, pass before the first token is shown.
        await hashes;
        let generated: number[];
        try {
          generated = await runner.generate(promptIds, { maxTokens: o.maxTokens, temperature: o.temperature, topP: o.topP, seed: o.seed, stopIds: eos, onToken: sink.onToken });
        } catch (err) {
          if (err instanceof OutputClosed) return; // the reader of stdout has gone: nothing more to say
          throw err;
        }
        sink.end();
        const stopReason = generated.length > 0 && stop.has(generated[generated.length - 1]) ? 'eos' : 'length';
        const shown = stopReason === 'eos' ? generated.slice(0, -1) : generated;
        const t = timings(sink, promptIds.length, generated.length);
        const speculative = runner.speculativeStats?.() ?? undefined;
        // Speculative decoding reports its own rate: decoding after the first token, set-up excluded (plain's beside it).
        const specRate = speculative?.tokens_per_second;
        const tokensPerSecond = typeof specRate === 'number' ? specRate : t.tokens_per_second;
        const cache = runner.expertStats?.() ?? null;
        if (o.json) {
          const text = decodeText ? decodeText(shown) : undefined;
          // The level it ran and its quality (the runner's notes say the same in words).
          const level = runner.level !== undefined && levels ? levelJson(levels.levels.find((l) => l.id === runner.level)!, levels, runner.spec.vocabSize) : undefined;
          const warning = runner.notes.find((n) => n.startsWith('warning: '));
          printJson({ prompt_ids: promptIds, generated_ids: generated, ...(text !== undefined ? { text } : {}), stop_reason: stopReason, tokens_per_second: tokensPerSecond, timings: t, notes: runner.notes, ...(level ? { level } : {}), ...(warning ? { warning } : {}), ...(cache ? { expert_cache: { ...cache, hit_rate: cache.accesses ? cache.hits / cache.accesses : 0 } } : {}), ...(speculative ? { speculative } : {}) });
        } else {
          const perStep = speculative?.mean_accepted_per_step as number | null | undefined;
          const plainRate = speculative?.plain_tokens_per_second as number | null | undefined;
          const decodeRate = t.decode_tokens_per_second === null ? '' : `, decode ${t.decode_tokens_per_second.toFixed(1)} tokens/s`;
          process.stderr.write(
            `${generated.length} tokens (${stopReason === 'eos' ? 'stopped at EOS' : 'length limit'}): prefill ${promptIds.length} tokens in ${t.prefill_ms.toFixed(1)} ms${decodeRate}` +
              `${perStep ? `, ${perStep.toFixed(2)} tokens per target step` : ''}${plainRate ? ` (plain decoding here: ${plainRate.toFixed(1)} tokens/s; both after the first token)` : ''}\n`,
          );
          if (cache) {
            const rate = cache.accesses ? (100 * cache.hits) / cache.accesses : 0;
            process.stderr.write(`expert cache: ${cache.capacity} experts, ${cache.policy}, preload ${cache.preload}: hit rate ${rate.toFixed(1)}% (${cache.hits}/${cache.accesses}), ${cache.loads} reads (${cache.preloads} preloads, ${cache.usefulPreloads} used), ${(cache.bytesRead / 1e6).toFixed(2)} MB read, ${cache.stallMs.toFixed(1)} ms waiting on reads\n`);
          }
        }
      } finally {
        await runner.close();
      }
    });
}
