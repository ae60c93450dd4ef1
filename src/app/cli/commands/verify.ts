/** `llmc verify <artifact>`: every file against the manifest's size and sha256 (streaming), every bad file reported. */
import type { Command } from 'commander';
import { escapeControls, ExitCode, LlmcError } from '../../../core/errors.js';
import { checkFiles, locate } from '../../artifact.js';
import { printJson } from '../output.js';

export function registerVerify(program: Command): void {
  program
    .command('verify')
    .description("Check every file of an llmc artifact against its manifest's size and sha256; exit 1 naming each bad file")
    .argument('<artifact>', 'artifact directory, or NAME.gguf with its manifest beside it')
    .option('--json', 'print {"artifact", "files", "ok", "problems": [{"file", "problem"}]} as JSON, on failure too')
    .addHelpText('after', '\nExamples (from a clone):\n  llmc compile fixtures/models/stories260K --target ts -o out/stories && llmc verify out/stories\n')
    .action(async (target: string, o: { json?: boolean }) => {
      let files = 0;
      let problems;
      try {
        const where = await locate(target);
        if (where.kind !== 'artifact') throw new LlmcError('not an llmc artifact (no llmc-manifest.json): nothing to verify against', target);
        if (where.manifestPath === null) throw new LlmcError("a GGUF without llmc's manifest beside it: no recorded sizes or sha256 to verify against", target);
        files = where.manifest.files.length;
        problems = await checkFiles(where, { hash: true });
      } catch (err) {
        // Not an artifact, or its manifest is unreadable: --json still prints its object.
        if (!o.json || !(err instanceof LlmcError)) throw err;
        problems = [{ file: err.file ?? target, problem: err.message }];
      }
      const ok = problems.length === 0;
      if (o.json) printJson({ artifact: target, files, ok, problems });
      else if (ok) process.stdout.write(`${target}: ${files} file(s) match the manifest\n`);
      else for (const p of problems) process.stderr.write(`llmc: ${escapeControls(`${p.file}: ${p.problem}`)}\n`);
      if (!ok) throw new ExitCode(1);
    });
}
