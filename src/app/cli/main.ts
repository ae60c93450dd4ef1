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

type Register = (program: Command) => void;
/**
 * Each command's module, in --help's order. Only the command on the command line is imported (a
 * command's module pulls in what its work needs): `llmc run` starts without the compiler.
 */
const COMMANDS: [name: string, load: () => Promise<Register>][] = [
  ['compile', async () => (await import('./commands/compile.js')).registerCompile],
  ['run', async () => (await import('./commands/run.js')).registerRun],
  ['inspect', async () => (await import('./commands/inspect.js')).registerInspect],
  ['list', async () => (await import('./commands/list.js')).registerList],
  ['verify', async () => (await import('./commands/verify.js')).registerVerify],
  ['check', async () => (await import('./commands/check.js')).registerCheck],
  ['profile', async () => (await import('./commands/profile.js')).registerProfile],
  ['report', async () => (await import('./commands/report.js')).registerReport],
];

/** The program with every command, or only `only` (the command being run) when given. */
export async function buildProgram(only?: string): Promise<Command> {
  const program = new Command('llmc')
    .description(
      'Ahead-of-time compiler for on-device LLMs: reads a Hugging Face checkpoint, profiles it, runs compiler passes ' +
        `and writes artifacts for these targets: ${TARGETS.map((t) => t.name).join(', ')} (llmc list targets).`,
    )
    .version(LLMC_VERSION, '-V, --version')
    .option('--debug', 'print stack traces for errors')
    .exitOverride()
    // Each command's --help fits a screen (≤ 60 lines, test/cli-help.test.ts): 100 columns, whatever the terminal.
    .configureHelp({ helpWidth: 100 })
    // Usage errors are printed by main() in llmc's own one-line style.
    .configureOutput({ writeErr: (s) => process.stderr.write(s), outputError: () => {} });
  const registers = await Promise.all(COMMANDS.filter(([name]) => !only || name === only).map(([, load]) => load()));
  for (const register of registers) register(program);
  return program;
}

/** The command named on the command line (for "see llmc <command> --help"). */
function commandOf(program: Command, argv: string[]): string | null {
  const names = new Set(program.commands.map((c) => c.name()));
  return argv.find((a) => names.has(a)) ?? null;
}

export async function main(argv: string[]): Promise<number> {
  installInterruptHandlers();
  // The command is the first word that is not an option; anything else (help, a typo) loads them all.
  const first = argv.find((a) => !a.startsWith('-'));
  const program = await buildProgram(COMMANDS.some(([name]) => name === first) ? first : undefined);
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
