import type { Command } from 'commander';
import { ExitCode, LlmcError } from '../../../core/errors.js';
import { MANIFEST_FILE } from '../../../core/records/manifest.js';
import { locate } from '../../artifact.js';
import { failureLine, METRICS, readBudgets, type Budgets } from '../../check/budgets.js';
import type { CheckSummary } from '../../check/check.js';
import { printJson } from '../output.js';
import { parseIntOption } from '../options.js';
import { DEFAULT_EVAL_TOKENS } from '../../evaluate/defaults.js';

/**
 * Print a check's outcome: every bound on stdout (or `json`, the JSON to print instead), each failed
 * one as a line on stderr; exit 1 when any failed.
 */
export function reportCheck(summary: CheckSummary, json?: unknown): void {
  if (json !== undefined) printJson(json);
  else {
    for (const r of summary.results) {
      process.stdout.write(`${r.ok ? 'ok  ' : 'FAIL'} ${r.metric} = ${r.value === null ? 'not measured' : fmtValue(r.value)} (${r.bound} ${fmtValue(r.limit)})\n`);
    }
  }
  for (const r of summary.results) if (!r.ok) process.stderr.write(`${failureLine(r)}\n`);
  if (!summary.ok) throw new ExitCode(1);
}

const fmtValue = (v: number) => (Number.isInteger(v) ? String(v) : Number(v.toPrecision(6)).toString());

export const budgetHelp =
  'budgets: JSON with one key per metric, each {"min": x} and/or {"max": y}: ' +
  Object.entries(METRICS)
    .map(([k, v]) => `${k} (${v})`)
    .join('; ');

export function registerCheck(program: Command): void {
  program
    .command('check')
    .description('Check an artifact against budgets (CI): exit 0 when all hold, 1 when any fails or cannot be measured, 2 for a bad budget file')
    .argument('<artifact>', 'artifact directory (llmc-manifest.json), or NAME.gguf compiled by llmc')
    .argument('<budgets>', 'budget file (JSON), e.g. {"bytes": {"max": 3e8}, "ppl_delta": {"max": 0.5}}')
    .option('--source <dir>', "the checkpoint the artifact was compiled from (default: the manifest's source path)")
    .option('--level <level>', 'check an elastic level of an artifact compiled with --passes reorder (an id like L3 or a size fraction)')
    .option('--eval-text <file>', "held-out text (default: llmc's built-in held-out text for a model with a tokenizer, else sequences sampled from the source)")
    .option('--eval-tokens <n>', `tokens the quality figures score (default ${DEFAULT_EVAL_TOKENS}: ≈ 30 min at 1.1B on 2 cores, linear in tokens and size)`, parseIntOption('--eval-tokens', 1))
    .option('--cache-dir <dir>', 'where the held-out set is cached', '.llmc-cache')
    .option('--json', 'print the llmc-check/1 summary as JSON (docs/ci.md)')
    .addHelpText('after', `\n${budgetHelp}\n\nExamples:\n  llmc check out/model budgets.json\n  llmc check out/model budgets.json --json > check.json\n`)
    .action(async (dir: string, budgetFile: string, o) => {
      const budgets: Budgets = await readBudgets(budgetFile);
      const artifact = await locate(dir);
      if (artifact.kind !== 'artifact') throw new LlmcError(`not an llmc artifact (no ${MANIFEST_FILE}); compile it first`, dir);
      const { checkArtifact } = await import('../../check/check.js');
      const summary = await checkArtifact({ artifact, budgets, budgetFile, sourceDir: o.source, level: o.level, evalText: o.evalText, evalTokens: o.evalTokens, cacheDir: o.cacheDir });
      reportCheck(summary, o.json ? summary : undefined);
    });
}
