import type { Command } from 'commander';
import { PASSES } from '../../../../passes/index.js';
import { TARGETS } from '../../../../backends/index.js';
import { openCheckpoint } from '../../../core/checkpoint/index.js';
import { UsageError } from '../../../core/errors.js';
import { planCompile } from '../../compile/plan.js';
import type { Manifest } from '../../../core/records/manifest.js';
import { cliProgress, formatBytes, noteLine, printJson, table } from '../output.js';
import { collect, collectKeyValue } from '../options.js';
import { describePasses, describeTargets } from './list.js';

function parseTensorTypes(specs: string[]): { pattern: RegExp; type: string }[] {
  return specs.map((s) => {
    const i = s.lastIndexOf('=');
    if (i <= 0) throw new UsageError(`--tensor-type takes REGEX=TYPE, got "${s}"`);
    try {
      return { pattern: new RegExp(s.slice(0, i)), type: s.slice(i + 1).toUpperCase() };
    } catch {
      throw new UsageError(`--tensor-type: "${s.slice(0, i)}" is not a valid regular expression`);
    }
  });
}

/** commander's attribute name of a flag (`--calib-text <f>` → calibText). */
const attributeOf = (flag: string) => flag.replace(/^--/, '').split(/[ =<[]/)[0].replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());

export function registerCompile(program: Command): void {
  const cmd = program
    .command('compile')
    .description('Compile a Hugging Face checkpoint into a deployable artifact directory')
    .argument('<model>', 'Hugging Face checkpoint directory (config.json + *.safetensors)')
    .requiredOption('-t, --target <target>', `output target: ${TARGETS.map((t) => t.name).sort().join(', ')}`)
    .requiredOption('-o, --out <path>', 'output directory (created if missing; an existing llmc artifact there is replaced whole), or NAME.gguf for --target gguf')
    .option('-q, --quant <type>', "weight format; each target's formats and default are listed below")
    .option('--tensor-type <regex=type>', 'per-tensor format override, repeatable; the last match wins; a pattern matching no tensor is an error', collect)
    .option('--passes <list>', `comma-separated passes to run before the target (${PASSES.map((p) => p.name).join(', ')}); see below`, '')
    .option('--opt <owner.key=value>', 'an option of a pass or of the target, repeatable (e.g. reorder.levels=0.5,1); listed below', collectKeyValue('--opt'))
    .option('--cache-dir <dir>', 'where profiles are cached', '.llmc-cache')
    .option('--force', 'replace an output directory or file that is not an llmc artifact')
    .option('--allow-nonfinite', 'compile weights that hold Inf or NaN (refused by default, naming the tensor and element)');
  // Each pass's shorthand flags (`--levels X` ≡ `--opt reorder.levels=X`).
  const flags = PASSES.flatMap((p) => p.flags.map((f) => ({ pass: p.name, key: f.key, attr: attributeOf(f.flag), flag: f.flag.split(' ')[0] })));
  for (const p of PASSES) for (const f of p.flags) cmd.option(f.flag, f.help);
  cmd
    .option('--json', 'print the manifest as JSON on stdout')
    .addHelpText(
      'after',
      () =>
        '\nExamples (from a clone):\n' +
        '  llmc compile fixtures/models/stories260K --target gguf --quant Q8_0 -o out/stories-q8.gguf\n' +
        '  llmc compile fixtures/models/stories260K --target ts --passes reorder --levels 0.5,0.75,1 -o out/stories-elastic\n' +
        '  llmc compile fixtures/models/stories260K --target hf --quant F16 -o out/stories-f16\n\n' +
        `${describeTargets()}\n\n${describePasses()}\n`,
    )
    .action(async (modelDir: string, o) => {
      const json = Boolean(o.json);
      const passNames = String(o.passes)
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean);
      const opts: Record<string, string> = { ...((o.opt ?? {}) as Record<string, string>) };
      for (const f of flags) {
        if (o[f.attr] === undefined) continue;
        if (!passNames.includes(f.pass)) throw new UsageError(`${f.flag} needs --passes ${f.pass}`);
        opts[`${f.pass}.${f.key}`] = String(o[f.attr]);
      }
      const request = { target: o.target as string, passes: passNames, opts, quant: o.quant as string | undefined, tensorTypes: parseTensorTypes(o.tensorType ?? []) };
      // Everything is checked before the checkpoint is opened or anything is written.
      const plan = planCompile(request);
      // Notes are shown with the summary, after the artifact is in place (a failed compile shows its error alone).
      const notes: string[] = [];
      const started = performance.now();
      const source = await openCheckpoint(modelDir, { allowNonFinite: Boolean(o.allowNonfinite) });
      try {
        // Passes and targets pull in onnxruntime and tfjs: load them only when compiling.
        const { compile } = await import('../../compile/compile.js');
        const manifest = await compile(
          { ...request, source, outDir: o.out, progress: cliProgress(json), note: (m) => notes.push(m), cacheDir: o.cacheDir, force: Boolean(o.force) },
          plan,
        );
        const seconds = (performance.now() - started) / 1000;
        if (json) printJson({ ...manifest, notes, seconds });
        else process.stderr.write(compileSummary(o.out, manifest, notes, seconds));
      } finally {
        await source.close();
      }
    });
}

/** What a compile wrote: files, bytes per tensor group and format against the source, notes, time. */
export function compileSummary(out: string, m: Manifest, notes: readonly string[], seconds: number): string {
  const bytes = m.files.reduce((a, f) => a + f.size, 0);
  const lines = [`wrote ${out}: ${m.files.map((f) => f.path).join(', ')} (${formatBytes(bytes)}) for target ${m.target}${m.passes.length ? ` after ${m.passes.map((p) => p.name).join(', ')}` : ''}`];
  const s = m.summary;
  if (s && s.groups.length) {
    const rows: (string | number)[][] = [['tensors', 'format', 'count', 'bytes']];
    for (const g of s.groups) rows.push([g.group, g.format, g.tensors, formatBytes(g.bytes)]);
    rows.push(['total', '', s.groups.reduce((a, g) => a + g.tensors, 0), formatBytes(s.bytes)]);
    lines.push(table(rows));
    if (s.sourceBytes > 0) lines.push(`  ${formatBytes(s.bytes)} of tensors from ${formatBytes(s.sourceBytes)} in the source: ${((100 * s.bytes) / s.sourceBytes).toFixed(1)}%`);
  }
  for (const n of notes) lines.push(noteLine(n));
  lines.push(`done in ${seconds.toFixed(1)} s`);
  return lines.join('\n') + '\n';
}
