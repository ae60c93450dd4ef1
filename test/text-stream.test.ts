/** TextStream: decoded text given out piece by piece, never half a UTF-8 character. */
import { describe, expect, it } from 'vitest';
import { TextStream } from '../src/core/tokenizer/stream.js';

/** A byte-level "tokenizer": each id is one byte; decoding is lossy UTF-8, as tokenizers' decoders are. */
const bytes = (ids: readonly number[]) => new TextDecoder('utf-8', { fatal: false }).decode(Uint8Array.from(ids));

function pieces(ids: number[]): string[] {
  const s = new TextStream(bytes);
  return [...ids.map((id) => s.push(id)), s.flush()];
}

describe('TextStream', () => {
  it('holds back a character until its last byte, then gives it whole; the pieces join to the full decode', () => {
    const text = 'a€😀b'; // 1 + 3 + 4 + 1 bytes
    const ids = [...new TextEncoder().encode(text)];
    const out = pieces(ids);
    expect(out).toEqual(['a', '', '', '€', '', '', '', '😀', 'b', '']);
    expect(out.join('')).toBe(text);
  });

  it('an incomplete character at the end comes out at flush as the decoder renders it', () => {
    const out = pieces([0x68, 0xe2, 0x82]);
    expect(out.slice(0, 3)).toEqual(['h', '', '']);
    expect(out[3]).toBe('\uFFFD');
    expect(out.join('')).toBe(bytes([0x68, 0xe2, 0x82]));
  });

  it('an invalid byte followed by more text is given out with that text', () => {
    const out = pieces([0xff, 0x41]);
    expect(out).toEqual(['', '\uFFFDA', '']);
  });
});
