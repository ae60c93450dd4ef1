/**
 * The llmc command line. Commands live in ./commands, one file each; this file only wires them
 * and turns errors into one line and an exit code (a stack trace only with --debug).
 */
import { Command, CommanderError } from 'commander';
import { ExitCode, LlmcError } from '../../core/errors.js';
import { LLMC_VERSION } from '../../core/version.js';
import { installInterruptHandlers } from '../../core/util/interrupt.js';
import { registerCompile } from './commands/compile.js';
import { registerRun } from './commands/run.js';
import { registerInspect } from './commands/inspect.js';
import { registerCheck } from './commands/check.js';
import { registerReport } from './commands/report.js';
import { registerProfile } from './commands/profile.js';

export function buildProgram(): Command {
  const program = new Command('llmc')
    .description(
      'Ahead-of-time compiler for on-device LLMs: reads a Hugging Face checkpoint, profiles it, ' +
        'runs compiler passes and writes artifacts for llama.cpp (GGUF), onnxruntime/CUDA, QNN and ' +
        "llmc's own TypeScript runtime.",
    )
    .version(LLMC_VERSION, '-V, --version')
    .option('--debug', 'print stack traces for errors')
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride()
    .configureOutput({ writeErr: (s) => process.stderr.write(s) });
  registerCompile(program);
  registerRun(program);
  registerInspect(program);
  registerCheck(program);
  registerProfile(program);
  registerReport(program);
  return program;
}

export async function main(argv: string[]): Promise<number> {
  installInterruptHandlers();
  const program = buildProgram();
  const debug = argv.includes('--debug');
  try {
    await program.parseAsync(argv, { from: 'user' });
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      // help / version exit 0; commander already printed usage errors.
      return err.exitCode === 0 ? 0 : 2;
    }
    if (err instanceof ExitCode) return err.exitCode;
    if (err instanceof LlmcError) {
      process.stderr.write(`llmc: ${err.line}\n`);
      if (debug) process.stderr.write(`${err.stack}\n`);
      return err.exitCode;
    }
    const e = err as Error;
    process.stderr.write(`llmc: internal error: ${e?.message ?? String(err)}${debug ? '' : ' (run with --debug for details)'}\n`);
    if (debug) process.stderr.write(`${e?.stack}\n`);
    return 1;
  }
}
