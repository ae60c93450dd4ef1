import type { Command } from 'commander';
import { BACKENDS } from '../../../../backends/index.js'; // load-on-use thunks: cheap to import
import { openCheckpoint } from '../../../core/checkpoint/index.js';
import { UsageError } from '../../../core/errors.js';
import { cliProgress, noteTo, printJson } from '../output.js';
import { collect, collectKeyValue } from '../options.js';

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


export function registerCompile(program: Command): void {
  program
    .command('compile')
    .description('Compile a Hugging Face checkpoint into a deployable artifact directory')
    .argument('<model>', 'Hugging Face checkpoint directory (config.json + *.safetensors)')
    .requiredOption('-t, --target <target>', `output target: ${Object.keys(BACKENDS).sort().join(', ')}`)
    .requiredOption('-o, --out <dir>', 'output directory (created if missing)')
    .option('-q, --quant <type>', 'weight format, e.g. F16, Q8_0, Q4_K_M (default: the target\'s)')
    .option('--tensor-type <regex=type>', 'per-tensor override, repeatable; last match wins', collect, [])
    .option('--passes <list>', 'comma-separated passes to run before the backend, in order', '')
    .option('--opt <key=value>', 'pass or target option, repeatable (e.g. reorder.levels=0.5,1)', collectKeyValue('--opt'), {})
    .option('--cache-dir <dir>', 'where profiles are cached', '.llmc-cache')
    .option('--importance <provider>', 'reorder: unit importance (taylor | activation | magnitude | auto)')
    .option('--levels <list>', 'reorder: elastic levels, a count or fractions (e.g. 0.5,0.75,1)')
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
      // --opt pass.key=value goes to that pass; anything else goes to the target.
      const passOpts: Record<string, Record<string, string>> = Object.fromEntries(passNames.map((p) => [p, {}]));
      const extra: Record<string, string> = {};
      for (const [k, v] of Object.entries(o.opt as Record<string, string>)) {
        const dot = k.indexOf('.');
        const owner = dot > 0 ? k.slice(0, dot) : '';
        if (owner in passOpts) passOpts[owner][k.slice(dot + 1)] = v;
        else extra[k] = v;
      }
      // Convenience flags of the reorder pass.
      for (const [flag, key] of [['importance', 'importance'], ['levels', 'levels']] as const) {
        if (o[flag] === undefined) continue;
        if (!('reorder' in passOpts)) throw new UsageError(`--${flag} needs --passes reorder`);
        passOpts.reorder[key] = String(o[flag]);
      }
      const notes: string[] = [];
      const source = await openCheckpoint(modelDir);
      try {
        // Passes and backends pull in onnxruntime and tfjs: load them only when compiling.
        const { compile } = await import('../../compile/compile.js');
        const manifest = await compile({
          source,
          target: o.target,
          outDir: o.out,
          passes: passNames.map((name) => ({ name, options: passOpts[name] })),
          options: { quant: o.quant, tensorTypes: parseTensorTypes(o.tensorType), extra },
          progress: cliProgress(json),
          note: noteTo(notes, json),
          cacheDir: o.cacheDir,
        });
        if (json) printJson({ ...manifest, notes });
        else {
          const bytes = manifest.files.reduce((a, f) => a + f.size, 0);
          process.stdout.write(`wrote ${o.out}: ${manifest.files.map((f) => f.path).join(', ')} (${(bytes / 1e6).toFixed(2)} MB)\n`);
        }
      } finally {
        await source.close();
      }
    });
}
