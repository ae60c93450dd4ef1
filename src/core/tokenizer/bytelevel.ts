/**
 * GPT-2's byte-level alphabet: every byte maps to a printable unicode character, so any text is
 * spelled with 256 base symbols and BPE never meets an unknown character.
 */

/** bytes_to_unicode() of GPT-2: printable bytes keep their code point, the rest move to 256+. */
function buildTables(): { byteToChar: string[]; charToByte: Map<string, number>; order: number[] } {
  const order: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) order.push(b);
  for (let b = 0xa1; b <= 0xac; b++) order.push(b);
  for (let b = 0xae; b <= 0xff; b++) order.push(b);
  const cps = [...order];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!order.includes(b)) {
      order.push(b);
      cps.push(256 + n++);
    }
  }
  const byteToChar: string[] = new Array(256);
  const charToByte = new Map<string, number>();
  order.forEach((b, i) => {
    byteToChar[b] = String.fromCodePoint(cps[i]);
    charToByte.set(byteToChar[b], b);
  });
  return { byteToChar, charToByte, order };
}

const TABLES = buildTables();
/** byte → its character in the byte-level alphabet. */
export const BYTE_TO_CHAR: readonly string[] = TABLES.byteToChar;
/** character → byte (the inverse of BYTE_TO_CHAR). */
export const CHAR_TO_BYTE: ReadonlyMap<string, number> = TABLES.charToByte;
/** The bytes in GPT-2's vocabulary order (its first 256 ids). */
export const GPT2_BYTE_ORDER: readonly number[] = TABLES.order;

/** GPT-2's pre-tokenization pattern (ByteLevel pre-tokenizer with use_regex=true). */
export const GPT2_PATTERN = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

const encoder = new TextEncoder();

/** Text → its bytes spelled in the byte-level alphabet. */
export function toByteChars(text: string): string {
  let s = '';
  for (const b of encoder.encode(text)) s += BYTE_TO_CHAR[b];
  return s;
}

/** Split text into pre-tokens as GPT-2's regex does. */
export function gpt2Split(text: string): string[] {
  return text.match(GPT2_PATTERN) ?? [];
}
