/**
 * The few encoders a hand-assembled WebAssembly module needs (LEB128, vectors, sections, names).
 * Shared by the runtime's matmul kernels and the K-quant kernels; pure and browser-safe.
 */
export const uleb = (n: number): number[] => {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n) b |= 0x80;
    out.push(b);
  } while (n);
  return out;
};

export const sleb = (n: number): number[] => {
  const out: number[] = [];
  for (;;) {
    const b = n & 0x7f;
    n >>= 7;
    if ((n === 0 && !(b & 0x40)) || (n === -1 && b & 0x40)) {
      out.push(b);
      return out;
    }
    out.push(b | 0x80);
  }
};

export const vec = (items: number[][]): number[] => [...uleb(items.length), ...items.flat()];
export const section = (id: number, body: number[]): number[] => [id, ...uleb(body.length), ...body];
export const str = (s: string): number[] => [...uleb(s.length), ...Array.from(s, (c) => c.charCodeAt(0))];

/** Value types. */
export const I32 = 0x7f;
export const F32 = 0x7d;
export const V128 = 0x7b;
