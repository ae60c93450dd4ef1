/** Run the llmc CLI in-process (no build, no child process), capturing what it writes. */
import { vi } from 'vitest';
import { main } from '../src/app/cli/main.js';

/**
 * `llmc compile` here skips its end-of-compile quality evaluation (`--no-eval`): tests about quality
 * ask for it with `llmcWithEval`.
 */
export async function llmcInProcess(...argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return llmcWithEval(...(argv[0] === 'compile' && !argv.includes('--help') ? [...argv, '--no-eval'] : argv));
}

export async function llmcWithEval(...argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
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
