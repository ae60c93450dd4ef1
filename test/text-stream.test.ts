/** TextStream: decoded text given out piece by piece, never half a UTF-8 character. */
import { describe, expect, it } from 'vitest';
import { buildTokenizer } from '../fixtures/tokenizer.js';
import { loadTokenizer } from '../src/core/tokenizer/index.js';
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

describe.each(['byte-level', 'sentencepiece'] as const)('TextStream over a real tokenizer (%s fixture: ByteLevel; Metaspace with byte fallback)', (style) => {
  const built = buildTokenizer(style, 512, 256);
  const tok = loadTokenizer(built.tokenizerJson, built.tokenizerConfigJson);
  const decode = (ids: readonly number[]) => tok.decode(ids, { skipSpecial: true });

  it.each(['  leading spaces, then words', 'café naïve — “curly”', 'Привет мир, 你好世界', 'emoji 🙂👍🏽 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 end'])('pieces join to decode(ids), none holds half a character: %j', (text) => {
    const ids = tok.encode(text, { addBos: false });
    const s = new TextStream(decode);
    const pieces = [...ids.map((id) => s.push(id)), s.flush()];
    expect(pieces.join('')).toBe(decode(ids));
    for (const p of pieces) expect(p).not.toContain('\uFFFD');
    // Split characters exist here (multi-byte text in a 512-token vocabulary): some ids gave nothing yet.
    if (/[^\x00-\x7f]/.test(text)) expect(pieces.slice(0, -1).some((p) => p === '')).toBe(true);
  });
});
