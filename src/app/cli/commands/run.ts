import type { Command } from 'commander';
import path from 'node:path';
import { openGenerator } from '../../../exec/engine/generator.js';
import { LlmcError, UsageError } from '../../../core/errors.js';
import { loadTokenizer } from '../../../core/tokenizer/index.js';
import { printJson } from '../output.js';
import { ELASTIC_LEVELS, findRecord, MANIFEST_FILE } from '../../../core/records/index.js';
import type { Model } from '../../../exec/runtime/model.js';
import { levelJson, levelLine } from '../levels.js';
import { parseFloatOption, parseIdList, parseIntOption } from '../options.js';

export function registerRun(program: Command): void {
  program
    .command('run')
    .description('Generate tokens from a Hugging Face checkpoint (on onnxruntime) or a compiled artifact directory')
    .argument('<model>', 'checkpoint directory (config.json + *.safetensors) or artifact directory (llmc-manifest.json)')
    .option('--prompt-ids <ids>', 'prompt as comma-separated token ids, e.g. 1,2,3', parseIdList('--prompt-ids'))
    .option('--prompt <text>', 'prompt text (needs a tokenizer.json in the model directory)')
    .requiredOption('-n, --max-tokens <n>', 'tokens to generate at most (stops earlier at EOS)', parseIntOption('--max-tokens', 1))
    .option('--temperature <t>', 'sampling temperature; 0 = greedy', parseFloatOption('--temperature', 0), 0)
    .option('--top-p <p>', 'nucleus sampling mass in (0, 1]', parseFloatOption('--top-p', 0, 1), 1)
    .option('--seed <s>', 'sampling seed', parseIntOption('--seed', 0), 0)
    .option('--threads <n>', 'onnxruntime threads (default: all cores)', parseIntOption('--threads', 1))
    .option('--level <level>', 'elastic level of a ts artifact compiled with --passes reorder: an id (L3) or a size fraction (0.5)')
    .option('--json', 'print {"prompt_ids", "generated_ids", "text"?, "tokens_per_second", "level"?} as JSON')
    .addHelpText('after', '\nExamples:\n  llmc run ../shared/models/stories260K --prompt-ids 1 --max-tokens 32\n  llmc run ./model --prompt "Once upon a time" -n 20 --temperature 0.8 --seed 7 --json\n')
    .action(async (modelPath: string, o) => {
      if ((o.promptIds === undefined) === (o.prompt === undefined)) throw new UsageError('give exactly one of --prompt-ids or --prompt');
      if (o.topP <= 0) throw new UsageError(`--top-p must be in (0, 1], got ${o.topP}`);
      const generator = await openGenerator(modelPath, { threads: o.threads });
      try {
        const codec = generator.tokenizerJson
          ? loadTokenizer(generator.tokenizerJson, generator.tokenizerConfigJson, path.join(modelPath, 'tokenizer.json'))
          : null;
        let promptIds: number[];
        if (o.prompt !== undefined) {
          if (!codec) throw new LlmcError('--prompt needs a tokenizer.json; this model has none (use --prompt-ids)', modelPath);
          // BOS as the tokenizer's post-processor / tokenizer_config.json add it.
          promptIds = codec.encode(o.prompt);
        } else promptIds = o.promptIds;
        if (promptIds.length === 0) throw new UsageError('the prompt is empty');
        // --level: run the prefix sub-model (the runtime slices weight prefixes, no copies) with its adapters.
        let level = {};
        let picked: { line: string; json: ReturnType<typeof levelJson> } | undefined;
        if (o.level !== undefined) {
          const model = (generator as { model?: Model }).model;
          if (!model) throw new UsageError('--level needs a ts artifact compiled with --passes reorder');
          const where = path.join(modelPath, MANIFEST_FILE);
          const run = model.level(String(o.level), where);
          const record = findRecord(model.manifest?.passes, ELASTIC_LEVELS, where)!;
          level = { widths: run.widths, ...(run.adapters ? { adapters: run.adapters } : {}) };
          picked = { line: levelLine(run.level, record, model.spec.vocabSize), json: levelJson(run.level, record, model.spec.vocabSize) };
          if (!o.json) process.stderr.write(`${picked.line}\n`);
        }
        const start = performance.now();
        const generated = await generator.generate(promptIds, { maxTokens: o.maxTokens, temperature: o.temperature, topP: o.topP, seed: o.seed, ...level });
        const seconds = (performance.now() - start) / 1000;
        const text = codec ? codec.decode(generated, { skipSpecial: true }) : undefined;
        const tokensPerSecond = generated.length / seconds;
        if (o.json) {
          printJson({
            prompt_ids: promptIds,
            generated_ids: generated,
            ...(text !== undefined ? { text } : {}),
            tokens_per_second: tokensPerSecond,
            ...(picked ? { level: picked.json, ...(picked.json.worseThanUniform ? { warning: picked.line.split('\n')[1] } : {}) } : {}),
          });
        } else {
          process.stdout.write(`${generated.join(' ')}\n`);
          if (text !== undefined) process.stdout.write(`${text}\n`);
          process.stderr.write(`${generated.length} tokens, ${tokensPerSecond.toFixed(1)} tokens/s\n`);
        }
      } finally {
        await generator.close();
      }
    });
}
