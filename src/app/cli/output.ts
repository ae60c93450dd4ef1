/** Shared CLI output helpers: --json goes to stdout alone; notes and progress go to stderr. */
import { createProgress, silentProgress, type Progress } from '../../core/util/progress.js';

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + '\n');
}

export function cliProgress(json: boolean): Progress {
  return json ? silentProgress : createProgress();
}

export function noteTo(collected: string[], json: boolean): (message: string) => void {
  return (message) => {
    collected.push(message);
    if (!json) process.stderr.write(`note: ${message}\n`);
  };
}
