/** `llmc verify <artifact>`: every file against the manifest's size and sha256 (streaming). */
import type { Command } from 'commander';
import { LlmcError } from '../../../core/errors.js';
import { locate, verifyFiles } from '../../artifact.js';
import { printJson } from '../output.js';

export function registerVerify(program: Command): void {
  program
    .command('verify')
    .description("Check every file of an llmc artifact against its manifest's size and sha256")
    .argument('<artifact>', 'artifact directory, or NAME.gguf with its manifest beside it')
    .option('--json', 'print {"artifact", "files", "ok"} as JSON')
    .addHelpText('after', '\nExamples (from a clone):\n  llmc compile fixtures/models/stories260K --target ts -o out/stories && llmc verify out/stories\n')
    .action(async (target: string, o: { json?: boolean }) => {
      const where = await locate(target);
      if (where.kind !== 'artifact') throw new LlmcError('not an llmc artifact (no llmc-manifest.json): nothing to verify against', target);
      if (where.manifestPath === null) throw new LlmcError("a GGUF without llmc's manifest beside it: no recorded sizes or sha256 to verify against", target);
      await verifyFiles(where, { hash: true });
      if (o.json) printJson({ artifact: target, files: where.manifest.files.length, ok: true });
      else process.stdout.write(`${target}: ${where.manifest.files.length} file(s) match the manifest\n`);
    });
}
