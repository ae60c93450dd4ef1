/**
 * Text of ids as they are generated, printable piece by piece: the difference between the decoded
 * prefix and what was given out before. A byte-level token can end inside a UTF-8 character (an
 * emoji split over two tokens decodes to U+FFFD after the first), so a trailing run of U+FFFD is
 * held back until the next id completes it, or until flush() at the end. The pieces joined equal
 * decode(all ids) whenever decoding a longer prefix only appends text, as the BPE decoders llmc
 * supports do.
 */
export class TextStream {
  private readonly ids: number[] = [];
  /** UTF-16 units of the decoded text given out so far. */
  private given = 0;

  constructor(private readonly decode: (ids: readonly number[]) => string) {}

  /** The new complete text once `id` is appended ('' while a character is still incomplete). */
  push(id: number): string {
    this.ids.push(id);
    const text = this.decode(this.ids);
    let end = text.length;
    while (end > this.given && text.charCodeAt(end - 1) === 0xfffd) end--;
    return this.take(text, end);
  }

  /** What is left at the end, an incomplete character as the decoder renders it (U+FFFD). */
  flush(): string {
    const text = this.decode(this.ids);
    return this.take(text, text.length);
  }

  private take(text: string, end: number): string {
    if (end <= this.given) return '';
    const piece = text.slice(this.given, end);
    this.given = end;
    return piece;
  }
}
