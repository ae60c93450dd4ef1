/** Run the llmc CLI in-process (no child process), capturing what it writes. */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { vi } from 'vitest';
import { ensureBuilt } from './build-once.js';

type Main = (typeof import('../src/app/cli/main.js'))['main'];
let mainP: Promise<Main> | undefined;

/**
 * The built CLI (dist/, as `npm test` compiles it first; ensureBuilt when a file runs alone), loaded by
 * Node itself (vitest.config.ts externalizes dist/): vitest's module transform turns every imported
 * function call into a property lookup on a module object, which ran the compiler's and the runtime's
 * hot loops about 4× slower than the CLI runs them.
 */
function builtMain(): Promise<Main> {
  return (mainP ??= (async () => {
    ensureBuilt();
    const url = pathToFileURL(path.resolve(__dirname, '../dist/src/app/cli/main.js')).href;
    return ((await import(url)) as typeof import('../src/app/cli/main.js')).main;
  })());
}

/**
 * `llmc compile` here skips its end-of-compile quality evaluation (`--no-eval`): tests about quality
 * ask for it with `llmcWithEval`.
 */
export async function llmcInProcess(...argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return llmcWithEval(...(argv[0] === 'compile' && !argv.includes('--help') ? [...argv, '--no-eval'] : argv));
}

export async function llmcWithEval(...argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return captured(await builtMain(), argv);
}

/**
 * The CLI from src/ (through vitest's transform), for a test that changes src's own module state —
 * e.g. a plugin pushed onto src's PASSES / TARGETS, which dist's copies of the registries do not see.
 */
export async function llmcFromSource(...argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const { main } = await import('../src/app/cli/main.js');
  return captured(main, argv[0] === 'compile' && !argv.includes('--help') ? [...argv, '--no-eval'] : argv);
}

async function captured(main: Main, argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const out = vi.spyOn(process.stdout, 'write').mockImplementation((s: string | Uint8Array) => ((stdout += String(s)), true));
  const err = vi.spyOn(process.stderr, 'write').mockImplementation((s: string | Uint8Array) => ((stderr += String(s)), true));
  try {
    const code = await main(argv);
    return { code, stdout, stderr };
  } finally {
    out.mockRestore();
    err.mockRestore();
  }
}
