/**
 * Errors a user can act on. The CLI prints `llmc: <file>: <message>` on one line and exits with
 * `exitCode`; anything that is not an LlmcError is a bug and gets a stack trace only with --debug.
 */
export class LlmcError extends Error {
  constructor(
    message: string,
    /** The file (or directory) the problem is in, when there is one. */
    readonly file?: string,
    /** 1 = bad input or failed job, 2 = usage error. */
    readonly exitCode: 1 | 2 = 1,
  ) {
    super(message);
    this.name = 'LlmcError';
  }

  /**
   * One line, as the CLI prints it: control characters from file or tensor names are escaped, never
   * sent to the terminal, and a quoted name a hostile file made megabytes long is cut.
   */
  get line(): string {
    return boundLine(escapeControls(this.file ? `${this.file}: ${this.message}` : this.message));
  }
}

/** A usage error (bad flag value, missing argument): exit code 2. */
export class UsageError extends LlmcError {
  constructor(message: string) {
    super(message, undefined, 2);
    this.name = 'UsageError';
  }
}

/** Quoted strings over 120 characters cut to 120 (what follows them, often what to do next, is kept); then at most 2,000 characters. */
function boundLine(s: string): string {
  const cut = s.length <= 200 ? s : s.replace(/"((?:[^"\\]|\\.){120})(?:[^"\\]|\\.)+"/g, '"$1…"');
  return clip(cut, 2000);
}

/** C0/C1 control characters (newlines, escape sequences) as visible \u escapes. */
export function escapeControls(s: string): string {
  return s.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** Ends a command with an exit code after it printed its own lines (e.g. the failed budgets): the CLI adds nothing. */
export class ExitCode extends LlmcError {
  constructor(code: 1 | 2) {
    super('', undefined, code);
    this.name = 'ExitCode';
  }
}

/** Message text quoting what a file said (a name, a type): cut to `max` characters. */
export const clip = (s: string, max = 300): string => (s.length > max ? `${s.slice(0, max - 1)}…` : s);

/**
 * A value as a message shows it: JSON-like, at most `max` characters and two levels deep, so an
 * error message about a hostile value (nested 100,000 levels, megabytes long, a bigint) cannot
 * itself fail or flood the terminal.
 */
export function summarize(v: unknown, max = 80): string {
  if (typeof v === 'string' && v.length > 4 * max) v = v.slice(0, 4 * max); // JSON.stringify of a megabyte string, only to cut it

  const s = show(v, 0, max + 1);
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

function show(v: unknown, depth: number, room: number): string {
  const budget = Math.max(1, room);
  switch (typeof v) {
    case 'string':
      return JSON.stringify(v.length > budget ? v.slice(0, budget) : v);
    case 'bigint':
      return `${v}n`;
    case 'function':
    case 'symbol':
      return `<${typeof v}>`;
    case 'object':
      break;
    default:
      return String(v);
  }
  if (v === null) return 'null';
  const isArr = Array.isArray(v);
  if (ArrayBuffer.isView(v)) return `<${(v as unknown as { length?: number }).length ?? v.byteLength} ${v.constructor.name}>`;
  const [open, close] = isArr ? ['[', ']'] : ['{', '}'];
  const entries = isArr ? (v as unknown[]) : Object.keys(v as object);
  if (entries.length === 0) return `${open}${close}`;
  if (depth >= 2) return `${open}…${close}`;
  let out = open;
  for (let i = 0; i < entries.length; i++) {
    if (out.length >= budget) return `${out}…${close}`;
    const item = isArr ? show(entries[i], depth + 1, budget - out.length) : `${JSON.stringify(entries[i] as string)}: ${show((v as Record<string, unknown>)[entries[i] as string], depth + 1, budget - out.length)}`;
    out += (i ? ', ' : '') + item;
  }
  return out + close;
}
