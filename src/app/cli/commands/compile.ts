import type { Command } from 'commander';
import { PASSES } from '../../../../passes/index.js';
import { TARGETS } from '../../../../backends/index.js';
import { openCheckpoint } from '../../../core/checkpoint/index.js';
import { UsageError } from '../../../core/errors.js';
import { planCompile } from '../../compile/plan.js';
import { cliProgress, noteTo, printJson } from '../output.js';
import { collect, collectKeyValue } from '../options.js';
import { formatLevelTable, levelRows } from '../levels.js';

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
    .requiredOption('-o, --out <dir>', 'output directory (created if missing)')
    .option('-q, --quant <type>', 'weight format, e.g. F16, Q8_0, Q4_K_M (default: the target\'s)')
    .option('--tensor-type <regex=type>', 'per-tensor override, repeatable; last match wins', collect, [])
    .option('--passes <list>', 'comma-separated passes to run before the backend, in order', '')
    .option('--opt <key=value>', 'pass or target option, repeatable (e.g. reorder.levels=0.5,1)', collectKeyValue('--opt'), {})
    .option('--cache-dir <dir>', 'where profiles are cached', '.llmc-cache');
  // Each pass's shorthand flags (`--levels X` ≡ `--opt reorder.levels=X`).
  const flags = PASSES.flatMap((p) => p.flags.map((f) => ({ pass: p.name, key: f.key, attr: attributeOf(f.flag), flag: f.flag.split(' ')[0] })));
  for (const p of PASSES) for (const f of p.flags) cmd.option(f.flag, f.help);
  cmd
    .option('--json', 'print the manifest as JSON on stdout')
    .addHelpText(
      'after',
      '\nExamples:\n' +
        '  llmc compile ./stories260K --target gguf --quant Q8_0 -o out/\n' +
        '  llmc compile ./model --target ts --passes reorder --opt reorder.levels=0.5,0.75,1 -o out/\n',
    )
    .action(async (modelDir: string, o) => {
      const json = Boolean(o.json);
      const passNames = String(o.passes)
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean);
      const opts: Record<string, string> = { ...(o.opt as Record<string, string>) };
      for (const f of flags) {
        if (o[f.attr] === undefined) continue;
        if (!passNames.includes(f.pass)) throw new UsageError(`${f.flag} needs --passes ${f.pass}`);
        opts[`${f.pass}.${f.key}`] = String(o[f.attr]);
      }
      const request = { target: o.target as string, passes: passNames, opts, quant: o.quant as string | undefined, tensorTypes: parseTensorTypes(o.tensorType) };
      // Everything is checked before the checkpoint is opened or anything is written.
      const plan = planCompile(request);
      const notes: string[] = [];
      const source = await openCheckpoint(modelDir);
      try {
        // Passes and targets pull in onnxruntime and tfjs: load them only when compiling.
        const { compile } = await import('../../compile/compile.js');
        const manifest = await compile(
          { ...request, source, outDir: o.out, progress: cliProgress(json), note: noteTo(notes, json), cacheDir: o.cacheDir },
          plan,
        );
        const levels = levelRows(manifest);
        if (json) printJson({ ...manifest, notes, ...(levels ? { levels: levels.rows } : {}) });
        else {
          const bytes = manifest.files.reduce((a, f) => a + f.size, 0);
          process.stdout.write(`wrote ${o.out}: ${manifest.files.map((f) => f.path).join(', ')} (${(bytes / 1e6).toFixed(2)} MB)\n`);
          // Quality where the user picks a level: the table of levels, on stderr.
          if (levels) process.stderr.write(`\n${formatLevelTable(levels.record, levels.rows, manifest.arch.vocabSize)}\n`);
        }
      } finally {
        await source.close();
      }
    });
}
