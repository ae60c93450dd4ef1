import type { Command } from 'commander';
import { PASSES } from '../../../../passes/index.js';
import { TARGETS } from '../../../../backends/index.js';
import { openCheckpoint } from '../../../core/checkpoint/index.js';
import { LlmcError, UsageError } from '../../../core/errors.js';
import type { CachePolicy } from '../../../core/pipeline/pass.js';
import { checkProfileOf, PROFILE_INDEX, readProfileIndex } from '../../profile/dir.js';
import { CACHE_HELP, parseCachePolicy } from './profile.js';
import { planCompile } from '../../compile/plan.js';
import { findConfig, resolveConfig, CONFIG_FILE, DEFAULT_CACHE_DIR, type ResolvedConfig } from '../../compile/config.js';
import { cliProgress, noteTo, printJson } from '../output.js';
import { collect, collectKeyValue } from '../options.js';
import { checkMeasurable, readBudgets } from '../../check/budgets.js';
import { reportCheck } from './check.js';

/** commander's attribute name of a flag (`--calib-text <f>` → calibText). */
const attributeOf = (flag: string) => flag.replace(/^--/, '').split(/[ =<[]/)[0].replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());

/** The resolved configuration as a config file (nothing unset, nothing null). */
function configJson(r: ResolvedConfig): Record<string, unknown> {
  const t = r.target;
  return {
    model: r.model,
    target: { name: t.name, ...(t.quant !== null ? { quant: t.quant } : {}), tensorTypes: t.tensorTypes, options: t.options },
    passes: r.passes,
    ...(r.out !== null ? { out: r.out } : {}),
    cacheDir: r.cacheDir,
    ...(r.check !== null ? { check: r.check } : {}),
  };
}

export function registerCompile(program: Command): void {
  const cmd = program
    .command('compile')
    .description('Compile a Hugging Face checkpoint into a deployable artifact directory')
    .argument('[model]', `Hugging Face checkpoint directory (config.json + *.safetensors); or "model" in ${CONFIG_FILE}`)
    .option('-t, --target <target>', `output target: ${TARGETS.map((t) => t.name).sort().join(', ')}`)
    .option('-o, --out <dir>', 'output directory (created if missing)')
    .option('-q, --quant <type>', 'weight format, e.g. F16, Q8_0, Q4_K_M (default: the target\'s)')
    .option('--tensor-type <regex=type>', 'per-tensor override, repeatable; last match wins', collect, [])
    .option('--passes <list>', 'comma-separated passes to run before the backend, in order')
    .option('--opt <key=value>', 'pass or target option, repeatable (e.g. reorder.levels=0.5,1)', collectKeyValue('--opt'), {})
    .option('--cache-dir <dir>', `where profiles are cached (default: ${DEFAULT_CACHE_DIR})`)
    .option('--cache <policy>', CACHE_HELP, parseCachePolicy, 'on')
    .option('--profile <dir>', 'measurements from llmc profile (refused when it profiled another checkpoint); used instead of --cache-dir')
    .option('--config <file>', `a config file: passes with options, target with options, paths (default: ./${CONFIG_FILE} if present); flags override it`);
  // Each pass's shorthand flags (`--levels X` ≡ `--opt reorder.levels=X`).
  const flags = PASSES.flatMap((p) => p.flags.map((f) => ({ pass: p.name, key: f.key, attr: attributeOf(f.flag), flag: f.flag.split(' ')[0] })));
  for (const p of PASSES) for (const f of p.flags) cmd.option(f.flag, f.help);
  cmd
    .option('--check <budgets>', 'after compiling, check the artifact against a budget file (as llmc check; exit 1 when a budget fails)')
    .option('--print-config', 'print the resolved configuration (config file + flags) as JSON and stop')
    .option('--dry-run', 'run the passes and show what would be written (files, sizes, formats per tensor group) without writing it')
    .option('--json', 'print the manifest as JSON on stdout')
    .addHelpText(
      'after',
      '\nExamples:\n' +
        '  llmc compile ./stories260K --target gguf --quant Q8_0 -o out/\n' +
        '  llmc compile ./model --target ts --passes reorder --opt reorder.levels=0.5,0.75,1 -o out/\n' +
        `  llmc compile --config ${CONFIG_FILE} --print-config\n` +
        '  llmc compile ./model --target ts --quant Q4_0 --dry-run\n',
    )
    .action(async (modelArg: string | undefined, o) => {
      const json = Boolean(o.json);
      const opts: Record<string, string> = { ...(o.opt as Record<string, string>) };
      const passList = o.passes === undefined ? undefined : String(o.passes).split(',').map((s) => s.trim()).filter(Boolean);
      const found = await findConfig(o.config);
      const listed = passList ?? (found?.config.passes ?? []).map((p) => p.name);
      for (const f of flags) {
        if (o[f.attr] === undefined) continue;
        if (!listed.includes(f.pass)) throw new UsageError(`${f.flag} needs --passes ${f.pass}`);
        opts[`${f.pass}.${f.key}`] = String(o[f.attr]);
      }
      const { resolved, request } = resolveConfig(
        found?.config ?? null,
        { model: modelArg, target: o.target, quant: o.quant, tensorTypes: o.tensorType, passes: passList, opts, out: o.out, cacheDir: o.cacheDir, check: o.check },
        found?.file,
      );
      // Everything is checked before the checkpoint is opened or anything is written.
      const plan = planCompile(request);
      resolved.target.quant = plan.formats.quant ?? plan.target.formats.default;
      if (o.printConfig) return printJson(configJson(resolved));
      const budgets = resolved.check === null ? undefined : await readBudgets(resolved.check);
      if (budgets) checkMeasurable(budgets, plan.target.name, resolved.check!);
      const out = resolved.out;
      if (out === null && !o.dryRun) throw new UsageError(`no output directory: give -o DIR${found ? ` or set "out" in ${found.file}` : ''}`);
      const notes: string[] = [];
      const profileIndex = o.profile === undefined ? undefined : await readProfileIndex(o.profile);
      if (profileIndex === null) throw new LlmcError(`not a profile directory (no ${PROFILE_INDEX}; make one with llmc profile)`, o.profile);
      const source = await openCheckpoint(resolved.model);
      try {
        if (profileIndex) await checkProfileOf(o.profile, profileIndex, source);
        // A dry run writes nothing, not even to the cache.
        const policy: CachePolicy = o.dryRun && o.cache === 'on' ? 'readonly' : o.cache;
        const cacheDir = { dir: o.profile ?? resolved.cacheDir, policy };
        // Passes and targets pull in onnxruntime and tfjs: load them only when compiling.
        const { compile, dryRun } = await import('../../compile/compile.js');
        const common = { ...request, source, progress: cliProgress(json), note: noteTo(notes, json), cacheDir };
        if (o.dryRun) {
          const { printDryRun } = await import('./dry-run.js');
          return printDryRun(await dryRun({ ...common, outDir: out ?? '' }, plan), resolved, json, notes);
        }
        const manifest = await compile({ ...common, outDir: out! }, plan);
        if (!json) {
          const bytes = manifest.files.reduce((a, f) => a + f.size, 0);
          process.stdout.write(`wrote ${out}: ${manifest.files.map((f) => f.path).join(', ')} (${(bytes / 1e6).toFixed(2)} MB)\n`);
        }
        if (budgets) {
          const { checkArtifact } = await import('../../check/check.js');
          const summary = await checkArtifact({ dir: out!, manifest, budgets, budgetFile: resolved.check!, source, cacheDir });
          reportCheck(summary, json ? { ...manifest, notes, check: summary } : undefined);
        } else if (json) printJson({ ...manifest, notes });
      } finally {
        await source.close();
      }
    });
}
