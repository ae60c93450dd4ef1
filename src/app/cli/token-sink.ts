/**
 * `llmc run`'s stdout while tokens are generated: each token as soon as it is chosen, as text (its
 * complete characters, see TextStream) or as its id, and the moments that split prefill from
 * decode. Stop ids (EOS) are not printed. stdout is written token by token (on Linux a pipe or a
 * terminal takes each write at once), so a reader sees text while the model still runs.
 */
import { TextStream } from '../../core/tokenizer/stream.js';

export type SinkMode = { kind: 'text'; decode: (ids: readonly number[]) => string } | { kind: 'ids' } | { kind: 'quiet' };

/** A failed write marks stdout errored at once; its 'error' event waits for a tick the TS runtime's loop may not yield. */
const stdoutGone = () => process.stdout.destroyed || process.stdout.errored !== null;

/** Thrown from onToken once stdout's reader has gone (`llmc run … | head`): generation stops, exit 0, nothing more said. */
export class OutputClosed extends Error {}

export class TokenSink {
  private readonly text: TextStream | null;
  private printed = 0;
  private closed = false;
  private readonly onError = (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') this.closed = true;
  };
  /** process.hrtime.bigint() when generation began, at its first and its last token. */
  readonly started = process.hrtime.bigint();
  first: bigint | null = null;
  last: bigint | null = null;

  constructor(
    private readonly mode: SinkMode,
    private readonly stop: ReadonlySet<number>,
  ) {
    this.text = mode.kind === 'text' ? new TextStream(mode.decode) : null;
    if (mode.kind !== 'quiet') process.stdout.on('error', this.onError);
  }

  /** For generate's onToken. */
  readonly onToken = (id: number): void => {
    const now = process.hrtime.bigint();
    this.first ??= now;
    this.last = now;
    if (this.closed || (this.mode.kind !== 'quiet' && stdoutGone())) throw new OutputClosed();
    if (this.stop.has(id) || this.mode.kind === 'quiet') return;
    if (this.text) this.write(this.text.push(id));
    else this.write(`${this.printed === 0 ? '' : ' '}${id}`);
  };

  /** The rest of the text and the final newline. */
  end(): void {
    if (this.mode.kind === 'quiet') return;
    if (this.closed || stdoutGone()) return; // the listener stays for the write errors still on their way
    this.write(`${this.text ? this.text.flush() : ''}\n`);
    process.stdout.off('error', this.onError);
  }

  private write(s: string): void {
    if (!s) return;
    this.printed++;
    process.stdout.write(s);
  }
}
