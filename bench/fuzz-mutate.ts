/**
 * Mutants of a file, addressed by (seed, index): mutant i of a run is the same bytes on every machine
 * and in every worker, so a worker killed on a hang restarts at i + 1 and a crash is replayed from its
 * index. The operators are those of issue 36's campaign: bit flips, byte runs, truncations, value
 * swaps (a JSON value replaced, or an integer field of a binary header made to lie), deleted and
 * duplicated keys, deep nesting (up to 200,000 levels), plus inserted/removed byte ranges.
 */

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

/** splitmix32 over (seed, index): a uint32 stream. */
export function rngFor(seed: number, index: number): () => number {
  let s = (Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(index + 1, 0xc2b2ae35)) >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  };
}

const below = (r: () => number, n: number) => (n <= 0 ? 0 : r() % n);
const pick = <T>(r: () => number, xs: readonly T[]): T => xs[below(r, xs.length)];
/** Log-uniform in [lo, hi]: small values often, huge ones sometimes. */
const logUniform = (r: () => number, lo: number, hi: number) => Math.floor(Math.exp(Math.log(lo) + (r() / 2 ** 32) * (Math.log(hi) - Math.log(lo))));

/** A file to mutate: its bytes, whether it is JSON text, and where its header ends (binary: where most edits go). */
export interface SeedFile {
  name: string;
  bytes: Uint8Array;
  json?: boolean;
  hot?: number;
  /** How often this file, rather than another of the input, is the one mutated (default 1). */
  weight?: number;
}

/** A seed prepared once: JSON parsed and its node paths listed. */
export interface Prepared extends SeedFile {
  value?: Json;
  paths?: (string | number)[][];
}

export function prepare(s: SeedFile): Prepared {
  if (!s.json) return s;
  const value = JSON.parse(Buffer.from(s.bytes).toString('utf8')) as Json;
  return { ...s, value, paths: nodes(value) };
}

/** Every path to a node of a JSON value (root first); not below 12 levels; at most 20,000 paths. */
function nodes(v: Json): (string | number)[][] {
  const out: (string | number)[][] = [];
  const walk = (x: Json, at: (string | number)[]) => {
    if (out.length >= 20_000) return;
    out.push(at);
    if (at.length >= 12) return;
    if (Array.isArray(x)) x.forEach((y, i) => walk(y, [...at, i]));
    else if (x && typeof x === 'object') for (const [k, y] of Object.entries(x)) walk(y, [...at, k]);
  };
  walk(v, []);
  return out;
}

/** JSON text of values that break readers: huge, negative, fractional, wrong types, escapes, long. */
function nastyText(r: () => number, original: Json | undefined): string {
  switch (below(r, 8)) {
    case 0:
      return pick(r, ['null', '0', '-1', '1e308', '-1e308', '2.5', '1e7', '2147483648', '4294967296', '9007199254740993', '1e400', '-0', '""', '"x"', '[]', '{}', '[null]', 'true', '"../../x"', '"\\u001b[31mX\\n"', '"(a+)+$"']);
    case 1: // a number near the original, or the original's size times a power of two
      return typeof original === 'number' ? String(pick(r, [original + 1, original - 1, original * 2, original * 1024, -original, original / 3, original * 2 ** 31])) : String(r() | 0);
    case 2: // a long string or array (size checks)
      return pick(r, [JSON.stringify('a'.repeat(logUniform(r, 100, 1_000_000))), `[${'0,'.repeat(logUniform(r, 10, 200_000))}0]`]);
    case 3: // deep nesting: arrays or objects, up to 200,000 levels
      return deepText(logUniform(r, 20, 200_000), below(r, 2) === 0);
    case 4: // another type of the same value
      return JSON.stringify(original === undefined ? null : typeof original === 'string' ? Number(original) || [original] : typeof original === 'number' ? String(original) : Array.isArray(original) ? original[0] ?? null : original && typeof original === 'object' ? Object.values(original) : [original]);
    case 5:
      return String((r() / 2 ** 32) * 2 ** below(r, 80) * (below(r, 2) ? 1 : -1));
    case 6: // the original, as it was (for duplicated keys: the same key twice, same value)
      return JSON.stringify(original ?? null);
    default:
      return pick(r, ['"\\ud800"', '"\\u0000"', '"☃"', '{"__proto__":{"x":1}}', '{"constructor":1}', '[1,[2,[3]]]']);
  }
}

const deepText = (n: number, obj: boolean) => (obj ? '{"a":'.repeat(n) + '1' + '}'.repeat(n) : '['.repeat(n) + '1' + ']'.repeat(n));

/** A placeholder JSON.stringify writes as a string, replaced by raw text afterwards. */
const HOLE = (i: number) => `\u0000hole${i}\u0000`;

/** The JSON text of `s` with structural edits: values swapped, keys deleted or duplicated, nodes nested. */
function structural(s: Prepared, r: () => number, edits: number, ops: string[]): string {
  let v = structuredClone(s.value!);
  const holes: string[] = [];
  const paths = s.paths!;
  const get = (p: (string | number)[]): Json | undefined => {
    let x: Json | undefined = v;
    for (const k of p) x = x && typeof x === 'object' ? (x as Record<string | number, Json>)[k] : undefined;
    return x;
  };
  for (let e = 0; e < edits; e++) {
    const p = pick(r, paths);
    const cur = get(p);
    if (cur === undefined) continue;
    const parent = p.length ? get(p.slice(0, -1)) : undefined;
    const last = p[p.length - 1];
    /** This node's text replaced by raw `text`. */
    const put = (text: string) => {
      if (p.length === 0) v = HOLE(holes.length);
      else (parent as Record<string | number, Json>)[last] = HOLE(holes.length);
      holes.push(text);
    };
    const op = below(r, 10);
    if (op < 5 || p.length === 0) {
      // a value swapped: a nasty value, or another node's value
      const other = below(r, 4) === 0 ? get(pick(r, paths)) : undefined;
      const text = other !== undefined ? JSON.stringify(other) : nastyText(r, cur);
      ops.push('swap');
      put(text);
    } else if (op < 7 && parent && typeof parent === 'object' && !Array.isArray(parent)) {
      ops.push('delete');
      delete (parent as Record<string, Json>)[last as string];
    } else if (op < 7 && Array.isArray(parent)) {
      ops.push('delete');
      parent.splice(last as number, 1);
    } else if (op < 9 && cur && typeof cur === 'object' && !Array.isArray(cur) && Object.keys(cur).length) {
      // a key of this object written twice (JSON.parse keeps the last)
      ops.push('dup-key');
      const keys = Object.keys(cur);
      const k = pick(r, keys);
      const dupFirst = below(r, 2) === 0;
      const entries = keys.map((x) => `${JSON.stringify(x)}:${JSON.stringify(cur[x])}`);
      const dup = `${JSON.stringify(k)}:${nastyText(r, cur[k])}`;
      put(`{${dupFirst ? [dup, ...entries].join(',') : [...entries, dup].join(',')}}`);
    } else {
      ops.push('nest');
      const n = logUniform(r, 20, 200_000);
      const obj = below(r, 2) === 0;
      const inner = JSON.stringify(cur);
      put(obj ? '{"a":'.repeat(n) + inner + '}'.repeat(n) : '['.repeat(n) + inner + ']'.repeat(n));
    }
  }
  let text = JSON.stringify(v);
  // Holes inside holes are not made (a hole's text is raw): replace in order.
  holes.forEach((h, i) => (text = text.replace(JSON.stringify(HOLE(i)), () => h)));
  return text;
}

const INTERESTING = [0n, 1n, 2n, 0x7fn, 0x80n, 0xffn, 0x7fffn, 0xffffn, 0x7fffffffn, 0x80000000n, 0xffffffffn, 0x100000000n, 2n ** 53n, 2n ** 63n - 1n, 2n ** 63n, 2n ** 64n - 1n];

/** Byte-level edits of `b` (a fresh copy returned when the length changes). */
function byteEdit(b: Uint8Array, r: () => number, hot: number, ops: string[]): Uint8Array {
  const at = () => (hot > 0 && below(r, 5) !== 0 ? below(r, Math.min(hot, b.length)) : below(r, b.length));
  if (b.length === 0) return b;
  const op = below(r, 12);
  if (op < 3) {
    ops.push('flip');
    for (let k = 1 + below(r, 4); k > 0; k--) b[at()] ^= 1 << below(r, 8);
    return b;
  }
  if (op < 5) {
    ops.push('run');
    const start = at();
    const len = Math.min(b.length - start, logUniform(r, 1, 256));
    const fill = pick(r, [0x00, 0xff, 0x22, 0x7b, 0x5b, 0x30, 0x39, -1]);
    for (let i = 0; i < len; i++) b[start + i] = fill < 0 ? r() & 0xff : fill;
    return b;
  }
  if (op < 7) {
    ops.push('truncate');
    return b.subarray(0, below(r, b.length));
  }
  if (op < 10) {
    // an integer field lying: u8/u16/u32/u64 little-endian at any offset
    ops.push('int');
    const width = pick(r, [1, 2, 4, 8]);
    const start = Math.min(at(), Math.max(0, b.length - width));
    let x = below(r, 3) === 0 ? BigInt(r()) * BigInt(1 + below(r, 65536)) : pick(r, INTERESTING);
    for (let i = 0; i < width && start + i < b.length; i++, x >>= 8n) b[start + i] = Number(x & 0xffn);
    return b;
  }
  // a range of bytes duplicated or removed
  const start = at();
  const len = Math.min(b.length - start, logUniform(r, 1, 4096));
  if (op === 10) {
    ops.push('dup-range');
    const out = new Uint8Array(b.length + len);
    out.set(b.subarray(0, start + len));
    out.set(b.subarray(start), start + len);
    return out;
  }
  ops.push('cut-range');
  const out = new Uint8Array(b.length - len);
  out.set(b.subarray(0, start));
  out.set(b.subarray(start + len), start);
  return out;
}

/** Mutant `index` of an input made of `files` (one of them mutated): the files' bytes and the operators applied. */
export function mutant(files: readonly Prepared[], seed: number, index: number): { files: Uint8Array[]; ops: string[]; file: string } {
  const r = rngFor(seed, index);
  const total = files.reduce((a, f) => a + (f.weight ?? 1), 0);
  let w = (r() / 2 ** 32) * total;
  let which = 0;
  while (which < files.length - 1 && (w -= files[which].weight ?? 1) >= 0) which++;
  const f = files[which];
  const ops: string[] = [];
  let b: Uint8Array;
  // JSON: structural edits in 3 of 4 mutants, then byte edits in half of those; else byte edits only.
  const isJson = f.json && f.value !== undefined;
  if (isJson && below(r, 4) !== 0) {
    b = new Uint8Array(Buffer.from(structural(f, r, 1 + below(r, 3), ops)));
    if (below(r, 2) === 0) b = byteEdit(b, r, 0, ops);
  } else {
    b = f.bytes.slice();
    for (let k = 1 + below(r, 3); k > 0; k--) b = byteEdit(b, r, f.hot ?? 0, ops);
  }
  return { files: files.map((x, i) => (i === which ? b : x.bytes)), ops, file: f.name };
}
