/**
 * Text of ids as they are generated, printable piece by piece. Each piece is the difference between
 * the decoded window of recent ids and the same window without the newest ones, so every token
 * costs a decode of a few ids, not of everything so far (which grows quadratically with the
 * length), and decoders that treat a sequence's first token specially (stripping a
 * leading space) treat both sides of the difference alike. A byte-level token can end inside a UTF-8
 * character (a Cyrillic letter split over two tokens decodes to U+FFFD after the first), so a piece
 * ending in U+FFFD is held back until the next id completes it, or until flush() at the end. The
 * pieces joined equal decode(all ids) for the BPE decoders llmc supports.
 */
export class TextStream {
  private readonly ids: number[] = [];
  /** ids[prefix, read) decode to text already given out; ids[read, …) have not been given out yet. */
  private prefix = 0;
  private read = 0;

  constructor(private readonly decode: (ids: readonly number[]) => string) {}

  /** The new complete text once `id` is appended ('' while a character is still incomplete). */
  push(id: number): string {
    this.ids.push(id);
    return this.take(false);
  }

  /** What is left at the end, an incomplete character as the decoder renders it (U+FFFD). */
  flush(): string {
    return this.take(true);
  }

  private take(final: boolean): string {
    const before = this.decode(this.ids.slice(this.prefix, this.read));
    const after = this.decode(this.ids.slice(this.prefix));
    if (after.length <= before.length || (!final && after.endsWith('\uFFFD'))) return '';
    this.prefix = this.read;
    this.read = this.ids.length;
    return after.slice(before.length);
  }
}
