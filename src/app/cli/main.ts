/**
 * The llmc command line. Commands live in ./commands, one file each; this file only wires them
 * and turns every error — commander's usage errors included — into one line
 * `llmc: <what>: <problem>[; <what to do>]` and an exit code (2 usage, 1 input or runtime; a stack
 * trace only with --debug).
 */
import { Command, CommanderError } from 'commander';
import { TARGETS } from '../../../backends/index.js';
import { ExitCode, LlmcError } from '../../core/errors.js';
import { LLMC_VERSION } from '../../core/version.js';
import { installInterruptHandlers } from '../../core/util/interrupt.js';
import { registerCompile } from './commands/compile.js';
import { registerInspect } from './commands/inspect.js';
import { registerCheck } from './commands/check.js';
import { registerList } from './commands/list.js';
import { registerProfile } from './commands/profile.js';
import { registerReport } from './commands/report.js';
import { registerRun } from './commands/run.js';
import { registerVerify } from './commands/verify.js';

export function buildProgram(): Command {
  const program = new Command('llmc')
    .description(
      'Ahead-of-time compiler for on-device LLMs: reads a Hugging Face checkpoint, profiles it, runs compiler passes ' +
        `and writes artifacts for these targets: ${TARGETS.map((t) => t.name).join(', ')} (llmc list targets).`,
    )
    .version(LLMC_VERSION, '-V, --version')
    .option('--debug', 'print stack traces for errors')
    .exitOverride()
    // Usage errors are printed by main() in llmc's own one-line style.
    .configureOutput({ writeErr: (s) => process.stderr.write(s), outputError: () => {} });
  registerCompile(program);
  registerRun(program);
  registerInspect(program);
  registerList(program);
  registerVerify(program);
  registerCheck(program);
  registerProfile(program);
  registerReport(program);
  return program;
}

/** The command named on the command line (for "see llmc <command> --help"). */
function commandOf(program: Command, argv: string[]): string | null {
  const names = new Set(program.commands.map((c) => c.name()));
  return argv.find((a) => names.has(a)) ?? null;
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
      // Help and version print themselves and exit 0.
      if (err.exitCode === 0 || err.code === 'commander.helpDisplayed' || err.code === 'commander.version') return 0;
      const cmd = commandOf(program, argv);
      const problem = err.message.replace(/^error: /, '').replace(/'/g, '');
      process.stderr.write(`llmc: ${cmd ? `${cmd}: ` : ''}${problem}; see llmc ${cmd ? `${cmd} ` : ''}--help\n`);
      return 2;
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
