import type { Command } from 'commander';
import path from 'node:path';
import { LlmcError, UsageError } from '../../../core/errors.js';
import { RUN_ENGINES, type ArtifactRunner, type RunEngine, type RunOptions } from '../../../core/pipeline/target.js';
import { ELASTIC_LEVELS, findRecord, levelJson, type ElasticLevels } from '../../../core/records/index.js';
import { locate, verifyFiles } from '../../artifact.js';
import { noteLine, printJson } from '../output.js';
import { parseFloatOption, parseIdList, parseIntOption } from '../options.js';

/** The runner for a checkpoint, or for an artifact through its target's descriptor (after checking its files). */
async function openRunner(modelPath: string, o: RunOptions & { allowNonFinite?: boolean }): Promise<{ runner: ArtifactRunner; levels?: ElasticLevels; hashes?: Promise<void> }> {
  const where = await locate(modelPath);
  if (where.kind === 'checkpoint') {
    if (o.experts) throw new UsageError('--expert-cache runs ts artifacts (llmc compile --target ts); this is a Hugging Face checkpoint');
    if (o.level !== undefined) throw new UsageError('--level needs an artifact compiled with --passes reorder (ts or gguf-levels); this is a checkpoint');
    if (o.engine !== undefined) throw new UsageError('--engine chooses how a qnn artifact runs (llmc compile --target qnn); this is a checkpoint');
    if (o.chunk !== undefined) throw new UsageError('--chunk needs an artifact compiled with --passes chunk-partition (ts or cuda); this is a checkpoint');
    const { openCheckpointRunner } = await import('../../../exec/engine/generator.js');
    return { runner: await openCheckpointRunner(where.dir, { threads: o.threads, allowNonFinite: o.allowNonFinite }) };
  }
  await verifyFiles(where, { hash: Boolean(o.verify) });
  // Without --verify every file's sha256 is checked in the background while the model loads and
  // runs; nothing is printed before it passes (a flipped byte in the weights is one line, not output).
  const hashes = o.verify ? undefined : verifyFiles(where, { hash: true });
  hashes?.catch(() => {});
  if (!where.target.open) throw new LlmcError(`llmc cannot run ${where.target.name} artifacts itself`, where.path);
  const engines = where.target.capabilities.engines;
  if (o.engine !== undefined && !engines?.includes(o.engine)) throw new UsageError(`--engine ${o.engine}: a ${where.target.name} artifact runs on ${engines ? engines.join(' or ') : 'one engine, with no choice'}`);
  if (o.chunk !== undefined && !where.target.capabilities.chunkGraphs) throw new UsageError(`--chunk runs artifacts with chunk graphs (ts, cuda, qnn); ${where.target.name} has none`);
  const runner = await where.target.open(where, o).catch(async (err: unknown) => {
    await hashes; // a damaged file says so, before whatever it made the loader say
    throw err;
  });
  return { runner, levels: findRecord(where.manifest.passes, ELASTIC_LEVELS, where.dir) ?? undefined, hashes };
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

export function registerRun(program: Command): void {
  program
    .command('run')
    .description('Generate tokens from a Hugging Face checkpoint (on onnxruntime) or an llmc artifact (ts: the TS runtime; hf and cuda: onnxruntime; qnn: a TS simulation of its NPU integer pipeline, or its graphs on onnxruntime with --engine onnxruntime, with the shadow outliers on the CPU; gguf and gguf-levels: llama.cpp)')
    .argument('<model>', 'checkpoint directory, artifact directory, or NAME.gguf compiled by llmc')
    .option('--prompt-ids <ids>', 'prompt as comma-separated token ids, e.g. 1,2,3', parseIdList('--prompt-ids'))
    .option('--prompt <text>', 'prompt text (needs a tokenizer.json in the model directory)')
    .requiredOption('-n, --max-tokens <n>', 'tokens to generate at most (stops earlier at EOS)', parseIntOption('--max-tokens', 1))
    .option('--temperature <t>', 'sampling temperature; 0 = greedy', parseFloatOption('--temperature', 0), 0)
    .option('--top-p <p>', 'nucleus sampling mass in (0, 1]', parseFloatOption('--top-p', 0, 1), 1)
    .option('--seed <s>', 'sampling seed', parseIntOption('--seed', 0), 0)
    .option('--threads <n>', 'CPU threads of onnxruntime / llama.cpp (default: all cores; llama.cpp uses one for a GGUF under 64 MB); the TS runtime uses one unless given (N > 1: a worker pool splits each matmul\'s rows, same outputs)', parseIntOption('--threads', 1))
    .option('--level <level>', 'elastic level of an artifact compiled with --passes reorder (ts, cuda, gguf-levels): an id (L3) or a size fraction (0.5)')
    .option('--verify', "check every file's sha256 before loading (default: checked in the background, before any output)")
    .option('--allow-overflow', "generate past the model's context length")
    .option('--allow-nonfinite', 'run a checkpoint whose weights hold Inf or NaN (refused by default)')
    .option('--expert-cache <n>', 'MoE ts artifact: keep routed experts in the file, at most N in memory (read on demand)', parseIntOption('--expert-cache', 1))
    .option('--expert-policy <policy>', 'expert cache eviction: edgemoe | lru | lfu (default: edgemoe with --passes expert-bits, else lru)')
    .option('--expert-preload <m>', "experts preloaded per MoE layer (default: the expert-bits record's; 0 = none)", parseIntOption('--expert-preload', 0))
    .option('--speculative', 'ts artifact compiled with --passes tree-search: greedy speculative decoding with its verification tree (same tokens as plain greedy decoding)')
    .option('--draft <dir>', "--speculative with a draft checkpoint: that checkpoint's ts artifact")
    .option('--chunk <c>', 'artifact compiled with --passes chunk-partition: prefill in chunks of c tokens through its chunk graphs in the scheduled order (ts: TS runtime, cuda: onnxruntime, qnn: its engine), or auto (the length predicted fastest for the prompt)', parseChunkOption)
    .option('--engine <engine>', 'qnn artifact: sim (default; the NPU integer pipeline simulated in TS from the artifact) or onnxruntime (its QDQ graphs)', parseEngineOption)
    .option('--json', 'print {"prompt_ids", "generated_ids", "text"?, "tokens_per_second", "notes", "level"?, "warning"?, "expert_cache"?, "speculative"?} as JSON')
    .addHelpText(
      'after',
      '\nExamples (from a clone):\n  llmc run fixtures/models/stories260K --prompt-ids 1 --max-tokens 32\n' +
        '  llmc compile fixtures/models/stories260K --target ts --passes reorder --levels 0.5,0.75,1 -o out/elastic && llmc run out/elastic --prompt-ids 1 -n 32 --level 0.5\n' +
        '  llmc run ./model --prompt "Once upon a time" -n 20 --temperature 0.8 --seed 7 --json\n' +
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
      if ((o.promptIds === undefined) === (o.prompt === undefined)) throw new UsageError('give exactly one of --prompt-ids or --prompt');
      if (o.topP <= 0) throw new UsageError(`--top-p must be in (0, 1], got ${o.topP}`);
      if (o.expertCache === undefined && (o.expertPolicy !== undefined || o.expertPreload !== undefined)) throw new UsageError('--expert-policy and --expert-preload need --expert-cache N');
      if (o.expertPolicy !== undefined && !['edgemoe', 'lru', 'lfu'].includes(o.expertPolicy)) throw new UsageError(`--expert-policy must be edgemoe, lru or lfu, got "${o.expertPolicy}"`);
      const experts = o.expertCache === undefined ? undefined : { capacity: o.expertCache as number, policy: o.expertPolicy as 'edgemoe' | 'lru' | 'lfu' | undefined, preload: o.expertPreload as number | undefined };
      if (o.speculative && o.level !== undefined) throw new UsageError('--speculative and --level do not combine (the record names the draft)');
      if (o.speculative && o.temperature > 0) throw new UsageError('--speculative decodes greedily: leave --temperature at 0');
      if (o.draft !== undefined && !o.speculative) throw new UsageError('--draft is for --speculative');
      const speculative = o.speculative ? { draft: o.draft as string | undefined } : undefined;
      const { runner, levels, hashes } = await openRunner(modelPath, { threads: o.threads, level: o.level, verify: o.verify, allowNonFinite: o.allowNonfinite, experts, speculative, chunk: o.chunk, engine: o.engine });
      try {
        // The tokenizer (and its schema library) loads only for models that have one.
        const codec = runner.tokenizerJson ? (await import('../../../core/tokenizer/index.js')).loadTokenizer(runner.tokenizerJson, runner.tokenizerConfigJson, path.join(modelPath, 'tokenizer.json')) : null;
        let promptIds: number[];
        if (o.prompt !== undefined) {
          if (!codec) throw new LlmcError('--prompt needs a tokenizer.json; this model has none (use --prompt-ids)', modelPath);
          // BOS as the tokenizer's post-processor / tokenizer_config.json add it.
          promptIds = codec.encode(o.prompt);
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
        if (!o.json) for (const n of runner.notes) process.stderr.write(`${noteLine(n)}\n`);
        // process.hrtime, not performance.now(): the first use of `performance` loads perf_hooks (~3 ms of start-up).
        const start = process.hrtime.bigint();
        const generated = await runner.generate(promptIds, { maxTokens: o.maxTokens, temperature: o.temperature, topP: o.topP, seed: o.seed }).catch(async (err: unknown) => {
          await hashes;
          throw err;
        });
        const seconds = Number(process.hrtime.bigint() - start) / 1e9;
        await hashes;
        const text = codec ? codec.decode(generated, { skipSpecial: true }) : undefined;
        const tokensPerSecond = generated.length / seconds;
        const cache = runner.expertStats?.() ?? null;
        if (o.json) {
          const speculative = runner.speculativeStats?.() ?? undefined;
          // The level it ran and its quality (the runner's notes say the same in words).
          const level = runner.level !== undefined && levels ? levelJson(levels.levels.find((l) => l.id === runner.level)!, levels, runner.spec.vocabSize) : undefined;
          const warning = runner.notes.find((n) => n.startsWith('warning: '));
          printJson({ prompt_ids: promptIds, generated_ids: generated, ...(text !== undefined ? { text } : {}), tokens_per_second: tokensPerSecond, notes: runner.notes, ...(level ? { level } : {}), ...(warning ? { warning } : {}), ...(cache ? { expert_cache: { ...cache, hit_rate: cache.accesses ? cache.hits / cache.accesses : 0 } } : {}), ...(speculative ? { speculative } : {}) });
        } else {
          process.stdout.write(`${generated.join(' ')}\n`);
          if (text !== undefined) process.stdout.write(`${text}\n`);
          const perStep = runner.speculativeStats?.()?.mean_accepted_per_step as number | null | undefined;
          process.stderr.write(`${generated.length} tokens, ${tokensPerSecond.toFixed(1)} tokens/s${perStep ? `, ${perStep.toFixed(2)} tokens per target step` : ''}\n`);
          if (cache) {
            const rate = cache.accesses ? (100 * cache.hits) / cache.accesses : 0;
            process.stderr.write(`expert cache: ${cache.capacity} experts, ${cache.policy}, preload ${cache.preload}: hit rate ${rate.toFixed(1)}% (${cache.hits}/${cache.accesses}), ${cache.loads} reads (${cache.preloads} preloads, ${cache.usefulPreloads} used), ${(cache.bytesRead / 1e6).toFixed(2)} MB\n`);
          }
        }
      } finally {
        await runner.close();
      }
    });
}
