/** Shared CLI output helpers: --json goes to stdout alone; notes, summaries and progress go to stderr. */
import { createProgress, silentProgress, type Progress } from '../../core/util/progress.js';

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + '\n');
}

export function cliProgress(json: boolean): Progress {
  return json ? silentProgress : createProgress();
}

/** A note as printed: messages that carry their own level (`warning: …`, `note: …`) keep it, once. */
export const noteLine = (message: string) => (/^(warning|note): /.test(message) ? message : `note: ${message}`);

/** Collects notes, each message once (a warning raised per level or per file is one line, not one per level). */
export function collectNotes(collected: string[]): (message: string) => boolean {
  return (message) => !collected.includes(message) && collected.push(message) > 0;
}

export function noteTo(collected: string[], json: boolean): (message: string) => void {
  const add = collectNotes(collected);
  return (message) => {
    if (!add(message)) return;
    if (!json) process.stderr.write(`${noteLine(message)}\n`);
  };
}

/** Bytes for people: 1.04 MB, 812 kB, 96 B. */
export function formatBytes(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} GB`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)} MB`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} kB`;
  return `${n} B`;
}

/** Rows of cells as aligned columns (numbers right-aligned), two spaces apart. */
export function table(rows: (string | number)[][], indent = '  '): string {
  const width = rows[0].map((_, c) => Math.max(...rows.map((r) => String(r[c]).length)));
  return rows
    .map((r) => indent + r.map((cell, c) => (typeof cell === 'number' ? String(cell).padStart(width[c]) : String(cell).padEnd(width[c]))).join('  ').trimEnd())
    .join('\n');
}
