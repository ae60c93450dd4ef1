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

  /** One line, as the CLI prints it: control characters from file or tensor names are escaped, never sent to the terminal. */
  get line(): string {
    return escapeControls(this.file ? `${this.file}: ${this.message}` : this.message);
  }
}

/** A usage error (bad flag value, missing argument): exit code 2. */
export class UsageError extends LlmcError {
  constructor(message: string) {
    super(message, undefined, 2);
    this.name = 'UsageError';
  }
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
