import type { Command } from 'commander';
import { PASSES } from '../../../../passes/index.js';
import { TARGETS } from '../../../../backends/index.js';
import { openCheckpoint } from '../../../core/checkpoint/index.js';
import { LlmcError, UsageError } from '../../../core/errors.js';
import type { CachePolicy, StageEvent } from '../../../core/pipeline/pass.js';
import path from 'node:path';
import { checkProfileOf, PROFILE_INDEX, readProfileIndex } from '../../profile/dir.js';
import { CACHE_HELP, parseCachePolicy } from './profile.js';
import { planCompile } from '../../compile/plan.js';
import { findConfig, resolveConfig, CONFIG_FILE, DEFAULT_CACHE_DIR, type ResolvedConfig } from '../../compile/config.js';
import type { Manifest } from '../../../core/records/manifest.js';
import { cliProgress, collectNotes, formatBytes, noteLine, printJson, table } from '../output.js';
import { checkOutputName } from '../../compile/output.js';
import { describePasses, describeTargets } from './list.js';
import { collect, collectKeyValue, parseIntOption } from '../options.js';
import { formatLevelTable, levelRows, type LevelRow } from '../levels.js';
import { readBudgets } from '../../check/budgets.js';
import { reportCheck } from './check.js';
import { locate } from '../../artifact.js';
import { formatQuality } from '../quality.js';
import type { HeldOut, QuickEvaluation } from '../../evaluate/artifact.js';
import { DEFAULT_EVAL_TOKENS } from '../../evaluate/defaults.js';

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
    .argument('[model]', `Hugging Face checkpoint directory (or "model" in ${CONFIG_FILE})`)
    .option('-t, --target <target>', `output target: ${TARGETS.map((t) => t.name).sort().join(', ')}`)
    .option('-o, --out <path>', 'output directory (an llmc artifact there is replaced whole), or NAME.gguf for --target gguf')
    .option('-q, --quant <type>', 'weight format, any case (F16 = fp16): llmc list formats')
    .option('--tensor-type <regex=type>', 'per-tensor format, repeatable; the last match wins', collect)
    .option('--passes <list>', `passes to run, comma-separated: ${PASSES.map((p) => p.name).join(', ')}`)
    .option('--opt <owner.key=value>', 'a pass or target option, repeatable (e.g. reorder.levels=0.5,1): llmc list', collectKeyValue('--opt'))
    .option('--cache-dir <dir>', `where profiles are cached (default: ${DEFAULT_CACHE_DIR})`)
    .option('--cache <policy>', CACHE_HELP, parseCachePolicy, 'on')
    .option('--profile <dir>', 'measurements from llmc profile of this checkpoint, instead of --cache-dir')
    .option('--config <file>', `config file (default: ./${CONFIG_FILE}); flags override it`)
    .option('--force', 'replace an output directory or file that is not an llmc artifact')
    .option('--allow-nonfinite', 'compile weights that hold Inf or NaN (refused by default)')
    .option('--imatrix <file|auto>', "gguf: quantize with llama.cpp's importance matrix: a FILE, or auto (measured: --passes imatrix)")
    .option('--device <name>', "layer-streamed work on onnxruntime's cpu (default), cuda, coreml, dml")
    .option('--stream-above <size>', 'layer-stream models above this float32 size (default 1G)')
    .option('--stream-memory <size>', "streamed hidden states kept in memory, then spilled to disk (free/4)");
  // Each pass's shorthand flags (`--levels X` ≡ `--opt reorder.levels=X`).
  const flags = PASSES.flatMap((p) => p.flags.map((f) => ({ pass: p.name, key: f.key, attr: attributeOf(f.flag), flag: f.flag.split(' ')[0] })));
  for (const p of PASSES) for (const f of p.flags) cmd.option(f.flag, f.help);
  cmd
    .option('--check <budgets>', 'then check the artifact against a budget file (as llmc check)')
    .option('--print-config', 'print the resolved configuration as JSON and stop')
    .option('--no-eval', 'skip the quality evaluation at the end (--check\'s quality budgets then fail)')
    .option('--eval-text <file>', "held-out text for the evaluation and --check (default: llmc's built-in held-out text with a tokenizer, else samples from the source)")
    .option('--eval-tokens <n>', `tokens the evaluation scores (default ${DEFAULT_EVAL_TOKENS}: ≈ 30 min at 1.1B on 2 cores, linear in tokens and size; fewer: faster, wider intervals)`, parseIntOption('--eval-tokens', 1))
    .option('--dry-run', 'run the passes, show what would be written, write nothing')
    .option('--json', 'print the manifest as JSON on stdout')
    .addHelpText(
      'after',
      () =>
        '\nExamples (from a clone):\n' +
        '  llmc compile fixtures/models/stories260K --target gguf --quant Q8_0 -o out/stories-q8.gguf\n' +
        '  llmc compile fixtures/models/stories260K --target ts --passes reorder --levels 0.5,0.75,1 -o out/stories-elastic\n' +
        '  llmc compile fixtures/models/stories260K --target hf --quant F16 -o out/stories-f16\n' +
        '  llmc compile fixtures/models/stories260K --target ts --quant Q4_0 --dry-run\n\n' +
        'Environment:\n' +
        "  LLMC_DIGEST_CACHE  where the checkpoint's sha256 is kept while its files are unchanged (default\n" +
        '                     $XDG_CACHE_HOME/llmc/sha256, else ~/.cache/llmc/sha256); off: hash the checkpoint every time\n\n' +
        'Targets, passes, formats and every --opt with its default: llmc list targets | passes | formats\n' +
        "What each pass costs at 1.1B and 7B (time, peak memory, layer-streamed): docs/scale.md\n",
    )
    .action(async (modelArg: string | undefined, o) => {
      const json = Boolean(o.json);
      const opts: Record<string, string> = { ...((o.opt ?? {}) as Record<string, string>) };
      let passList = o.passes === undefined ? undefined : String(o.passes).split(',').map((s) => s.trim()).filter(Boolean);
      const found = await findConfig(o.config);
      let listed = passList ?? (found?.config.passes ?? []).map((p) => p.name);
      // --imatrix auto ≡ --passes …,imatrix; --imatrix FILE ≡ --opt gguf.imatrix=FILE
      if (o.imatrix !== undefined) {
        const v = String(o.imatrix).trim();
        if (v.toLowerCase() === 'auto') {
          if (!listed.includes('imatrix')) passList = listed = [...listed, 'imatrix'];
        } else opts['gguf.imatrix'] = v;
      }
      for (const f of flags) {
        if (o[f.attr] === undefined) continue;
        if (!listed.includes(f.pass)) throw new UsageError(`${f.flag} needs --passes ${f.pass}`);
        opts[`${f.pass}.${f.key}`] = String(o[f.attr]);
      }
      const { resolved, request } = resolveConfig(
        found?.config ?? null,
        { model: modelArg, target: o.target, quant: o.quant, tensorTypes: o.tensorType ?? [], passes: passList, opts, out: o.out, cacheDir: o.cacheDir, check: o.check },
        found?.file,
      );
      // Everything is checked before the checkpoint is opened or anything is written.
      const plan = planCompile(request);
      if (o.device !== undefined) (await import('../../../exec/stream/device.js')).useStreamDevice(String(o.device));
      {
        const { parseBytes, useStreamSettings } = await import('../../../exec/stream/spill.js');
        useStreamSettings({
          dir: path.join(o.profile ?? resolved.cacheDir, 'tmp'),
          ...(o.streamAbove === undefined ? {} : { aboveBytes: parseBytes('--stream-above', String(o.streamAbove)) }),
          ...(o.streamMemory === undefined ? {} : { memoryBytes: parseBytes('--stream-memory', String(o.streamMemory)) }),
        });
      }
      resolved.target.quant = plan.formats.quant ?? plan.target.formats.default;
      if (o.printConfig) return printJson(configJson(resolved));
      const budgets = resolved.check === null ? undefined : await readBudgets(resolved.check);
      if (o.evalText !== undefined && !o.eval && !budgets) throw new UsageError('--eval-text is the held-out text of the evaluation, which --no-eval turns off');
      const out = resolved.out;
      if (out === null && !o.dryRun) throw new UsageError(`no output directory: give -o DIR${found ? ` or set "out" in ${found.file}` : ''}`);
      if (out !== null) checkOutputName(out, plan.target);
      // Notes are shown with the summary, after the artifact is in place (a failed compile shows its error alone).
      const notes: string[] = [];
      const started = performance.now();
      const profileIndex = o.profile === undefined ? undefined : await readProfileIndex(o.profile);
      if (profileIndex === null) throw new LlmcError(`not a profile directory (no ${PROFILE_INDEX}; make one with llmc profile)`, o.profile);
      const source = await openCheckpoint(resolved.model, { allowNonFinite: Boolean(o.allowNonfinite) });
      try {
        if (profileIndex) await checkProfileOf(o.profile, profileIndex, source);
        // A dry run writes nothing, not even to the cache.
        const policy: CachePolicy = o.dryRun && o.cache === 'on' ? 'readonly' : o.cache;
        // pieces of a streamed sweep read back from the cache: a compile resumed after Ctrl-C (or repeated) says how many
        let reused = 0;
        const cacheDir = { dir: o.profile ?? resolved.cacheDir, policy, onStage: (e: StageEvent) => void (e.kind === 'stream-piece' && e.cached && reused++) };
        // Passes and targets pull in onnxruntime and tfjs: load them only when compiling.
        const { compile, dryRun } = await import('../../compile/compile.js');
        const common = { ...request, source, progress: cliProgress(json), note: collectNotes(notes), cacheDir, force: Boolean(o.force) };
        if (o.dryRun) {
          const { printDryRun } = await import('./dry-run.js');
          return printDryRun(await dryRun({ ...common, outDir: out ?? '' }, plan), resolved, json, notes);
        }
        // A held-out text is read and cut into windows before the compile, so a bad one costs nothing.
        let held: HeldOut | undefined;
        if (o.evalText !== undefined) held = await (await import('../../evaluate/artifact.js')).heldOutSet(source, { text: o.evalText, tokens: o.evalTokens });
        const manifest = await compile({ ...common, outDir: out! }, plan);
        if (reused > 0) notes.push(`${reused} layer-streamed piece(s) read from the profile cache (a resumed or repeated sweep)`);
        const artifact = await locate(out!);
        if (artifact.kind !== 'artifact') throw new LlmcError('internal: the compile left no manifest', out!);
        let evaluation: QuickEvaluation | null = null;
        if (o.eval) {
          const { quickEvaluation } = await import('../../evaluate/artifact.js');
          evaluation = await quickEvaluation(artifact, source, { held, tokens: o.evalTokens, cacheDir, progress: common.progress });
        }
        const seconds = (performance.now() - started) / 1000;
        if (!json) process.stderr.write(compileSummary(out!, manifest, notes, seconds, evaluation));
        const quality = { ...(evaluation === null ? {} : { quality: evaluation }), ...levelsJson(manifest) };
        if (budgets) {
          const { checkArtifact } = await import('../../check/check.js');
          // No evaluation, no quality figures: its budgets fail saying so (CI never passes on what was not measured).
          const notRun = !o.eval ? 'the compile ran with --no-eval' : evaluation?.measured === false ? `the compile's evaluation was skipped: ${evaluation.reason}` : undefined;
          const summary = await checkArtifact({ artifact, budgets, budgetFile: resolved.check!, source, cacheDir, notRun, held, evalTokens: o.evalTokens, measured: evaluation?.measured ? evaluation : undefined });
          reportCheck(summary, json ? { ...manifest, notes, seconds, ...quality, check: summary } : undefined);
        } else if (json) printJson({ ...manifest, notes, seconds, ...quality });
      } finally {
        await source.close();
      }
    });
}

/** What a compile wrote: files, bytes per tensor group and format against the source, the quality lost, notes, time. */
export function compileSummary(out: string, m: Manifest, notes: readonly string[], seconds: number, evaluation: QuickEvaluation | null = null): string {
  const bytes = m.files.reduce((a, f) => a + f.size, 0);
  // Hundreds of files (chunk graphs, levels): the first few and the count; the manifest lists them all.
  const names = m.files.length > 12 ? [...m.files.slice(0, 8).map((f) => f.path), `… ${m.files.length - 8} more (${m.files.length} files)`] : m.files.map((f) => f.path);
  const lines = [`wrote ${out}: ${names.join(', ')} (${formatBytes(bytes)}) for target ${m.target}${m.passes.length ? ` after ${m.passes.map((p) => p.name).join(', ')}` : ''}`];
  const s = m.summary;
  if (s && s.groups.length) {
    const rows: (string | number)[][] = [['tensors', 'format', 'count', 'bytes']];
    for (const g of s.groups) rows.push([g.group, g.format, g.tensors, formatBytes(g.bytes)]);
    rows.push(['total', '', s.groups.reduce((a, g) => a + g.tensors, 0), formatBytes(s.bytes)]);
    lines.push(table(rows));
    if (s.sourceBytes > 0) lines.push(`  ${formatBytes(s.bytes)} of tensors from ${formatBytes(s.sourceBytes)} in the source: ${((100 * s.bytes) / s.sourceBytes).toFixed(1)}%`);
  }
  if (evaluation) lines.push(...qualityLines(evaluation));
  // Quality where the user picks a level: the table of elastic levels.
  const levels = levelRows(m);
  if (levels) lines.push(formatLevelTable(levels.record, levels.rows, m.arch.vocabSize));
  for (const n of notes) lines.push(noteLine(n));
  lines.push(`done in ${seconds.toFixed(1)} s`);
  return lines.join('\n') + '\n';
}

/** `--json`'s `levels`: the level table's rows, when the artifact has elastic levels. */
function levelsJson(m: Manifest): { levels?: LevelRow[] } {
  const levels = levelRows(m);
  return levels ? { levels: levels.rows } : {};
}

/** The evaluation's lines of the summary. */
function qualityLines(e: QuickEvaluation): string[] {
  if (!e.measured) return [`  quality: not measured: ${e.reason}`];
  return formatQuality(e.quality, e.heldOut);
}
