/**
 * A Hugging Face `tokenizer.json` (BPE model) loaded into an encoder/decoder: GPT-2 style
 * byte-level tokenizers (ByteLevel pre-tokenizer/decoder, optional Split regex) and
 * SentencePiece-style Llama tokenizers (Prepend/Replace normalizer or Metaspace, byte fallback),
 * with added/special tokens and TemplateProcessing. Anything else is refused with a one-line
 * error naming the file and the feature, rather than tokenizing differently from the original.
 */
import safeRegex from 'safe-regex2';
import { parseJsonAs, TOKENIZER_CONFIG, TOKENIZER_JSON } from './schema.js';
import { clip, LlmcError, summarize } from '../errors.js';
import { Bpe } from './bpe.js';
import { CHAR_TO_BYTE, gpt2Split, toByteChars } from './bytelevel.js';

export interface Tokenizer {
  /** Token ids of `text`. addBos defaults to what tokenizer_config.json / the post-processor do. */
  encode(text: string, opts?: { addBos?: boolean }): number[];
  /** Text of `ids`; special tokens are kept unless skipSpecial. */
  decode(ids: readonly number[], opts?: { skipSpecial?: boolean }): string;
  bosId: number | null;
  eosId: number | null;
  vocabSize: number;
  /** The token string of an id (undefined when out of range). */
  idToToken(id: number): string | undefined;
}

type Json = Record<string, unknown>;
type Fail = (why: string) => never;

interface AddedToken {
  id: number;
  content: string;
  special: boolean;
  lstrip: boolean;
  rstrip: boolean;
}

/** A piece of input text; `first` is true for the piece that starts the input. */
interface Piece {
  text: string;
  first: boolean;
}

const utf8 = new TextEncoder();
const lossy = new TextDecoder('utf-8', { fatal: false });
const strict = new TextDecoder('utf-8', { fatal: true });

function escapeRe(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** A regular expression matching literal text; V8 refuses one over its size limit (a megabyte-long token), which is the file's problem. */
function literalRe(source: string, fail: Fail, what: string): RegExp {
  try {
    const re = new RegExp(source, 'gu');
    re.test(''); // V8 compiles on first use: an oversized pattern throws here, not in the middle of encode()
    re.lastIndex = 0;
    return re;
  } catch {
    return fail(`${what} is too long to match (${source.length} characters of pattern)`);
  }
}

function stringPattern(p: unknown, fail: Fail, what: string): RegExp {
  const o = (p ?? {}) as Json;
  if (typeof o.String === 'string') return literalRe(escapeRe(o.String), fail, `${what} string`);
  if (typeof o.Regex === 'string') {
    let re: RegExp;
    try {
      re = new RegExp(o.Regex, 'gu');
      re.test(''); // compiled on first use: a pattern over V8's size limit throws here
      re.lastIndex = 0;
    } catch {
      return fail(`${what} regex ${summarize(o.Regex, 200)} is not supported by JavaScript regular expressions`);
    }
    // A repetition inside a repetition can backtrack exponentially (`(a+)+$` hangs on 30 characters);
    // tokenizers' own patterns have none.
    if (!safeRegex(o.Regex, { limit: 1000 })) fail(`${what} regex ${summarize(o.Regex, 200)} nests repetitions, which can take exponential time on some inputs`);
    return re;
  }
  return fail(`${what} has an unsupported pattern ${summarize(p)}`);
}

// ---------------------------------------------------------------- normalizers

type Normalizer = (s: string) => string;

function normalizer(n: unknown, fail: Fail): Normalizer {
  if (n === null || n === undefined) return (s) => s;
  const o = n as Json;
  switch (o.type) {
    case 'Sequence': {
      const parts = ((o.normalizers as unknown[]) ?? []).map((x) => normalizer(x, fail));
      return (s) => parts.reduce((acc, f) => f(acc), s);
    }
    case 'Prepend': {
      const p = String(o.prepend);
      return (s) => (s === '' ? s : p + s);
    }
    case 'Replace': {
      const re = stringPattern(o.pattern, fail, 'Replace normalizer');
      const content = String(o.content);
      return (s) => s.replace(re, () => content);
    }
    case 'NFC':
    case 'NFD':
    case 'NFKC':
    case 'NFKD': {
      const form = o.type;
      return (s) => s.normalize(form);
    }
    case 'Lowercase':
      return (s) => s.toLowerCase();
    default:
      return fail(`normalizer type "${String(o.type)}" is not supported (supported: Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, Lowercase)`);
  }
}

// ---------------------------------------------------------------- pre-tokenizers

/** Splits a normalized piece into words (already in the model's alphabet). */
type PreTokenizer = (words: string[], first: boolean) => string[];

/** Split `s` around the matches of `re` as the Split pre-tokenizer's behaviors do. */
function splitKeep(s: string, re: RegExp, behavior: string, fail: Fail): string[] {
  const spans = [...s.matchAll(re)].filter((m) => m[0] !== '').map((m) => [m.index!, m.index! + m[0].length]);
  const out: string[] = [];
  let last = 0;
  switch (behavior) {
    case 'Isolated':
    case 'Removed':
      for (const [a, b] of spans) {
        if (a > last) out.push(s.slice(last, a));
        if (behavior === 'Isolated') out.push(s.slice(a, b));
        last = b;
      }
      break;
    case 'MergedWithPrevious':
      for (const [, b] of spans) {
        out.push(s.slice(last, b));
        last = b;
      }
      break;
    case 'MergedWithNext':
      for (const [a] of spans) {
        if (a > last) out.push(s.slice(last, a));
        last = a;
      }
      break;
    default:
      fail(`Split behavior "${behavior}" is not supported`);
  }
  if (last < s.length) out.push(s.slice(last));
  return out;
}

function preTokenizer(p: unknown, fail: Fail): { split: PreTokenizer; byteLevel: boolean } {
  if (p === null || p === undefined) return { split: (w) => w, byteLevel: false };
  const o = p as Json;
  switch (o.type) {
    case 'Sequence': {
      const parts = ((o.pretokenizers as unknown[]) ?? []).map((x) => preTokenizer(x, fail));
      return { split: (w, first) => parts.reduce((acc, f) => f.split(acc, first), w), byteLevel: parts.some((x) => x.byteLevel) };
    }
    case 'ByteLevel': {
      const addPrefix = o.add_prefix_space === true;
      const useRegex = o.use_regex !== false;
      return {
        byteLevel: true,
        split: (words) =>
          words.flatMap((w) => {
            const s = addPrefix && !w.startsWith(' ') ? ' ' + w : w;
            return (useRegex ? gpt2Split(s) : [s]).map(toByteChars);
          }),
      };
    }
    case 'Metaspace': {
      const rep = String(o.replacement ?? '\u2581');
      const scheme = String(o.prepend_scheme ?? (o.add_prefix_space === false ? 'never' : 'always'));
      const split = o.split !== false;
      const repRe = literalRe(escapeRe(rep), fail, 'pre_tokenizer Metaspace replacement'); // splitKeep iterates with matchAll, which copies it
      return {
        byteLevel: false,
        split: (words, first) =>
          words.flatMap((w, i) => {
            let s = w.replace(/ /g, rep);
            if ((scheme === 'always' || (scheme === 'first' && first && i === 0)) && !s.startsWith(rep)) s = rep + s;
            return split ? splitKeep(s, repRe, 'MergedWithNext', fail) : [s];
          }),
      };
    }
    case 'Split': {
      const re = stringPattern(o.pattern, fail, 'Split pre-tokenizer');
      if (o.invert === true) fail('Split pre-tokenizer with invert=true is not supported');
      const behavior = String(o.behavior);
      return { byteLevel: false, split: (words) => words.flatMap((w) => splitKeep(w, re, behavior, fail)) };
    }
    case 'Digits': {
      const re = o.individual_digits === true ? /\p{N}/gu : /\p{N}+/gu;
      return { byteLevel: false, split: (words) => words.flatMap((w) => splitKeep(w, re, 'Isolated', fail)) };
    }
    case 'WhitespaceSplit':
      return { byteLevel: false, split: (words) => words.flatMap((w) => w.split(/\s+/u).filter(Boolean)) };
    default:
      return fail(`pre_tokenizer type "${String(o.type)}" is not supported (supported: ByteLevel, Metaspace, Split, Digits, WhitespaceSplit, Sequence)`);
  }
}

// ---------------------------------------------------------------- decoders

/** Transforms the list of token strings, as the decode_chain of `tokenizers` does. */
type Decoder = (tokens: string[]) => string[];

function byteFallbackDecode(tokens: string[]): string[] {
  const out: string[] = [];
  let bytes: number[] = [];
  const flush = () => {
    if (!bytes.length) return;
    try {
      out.push(strict.decode(Uint8Array.from(bytes)));
    } catch {
      out.push('\ufffd'.repeat(bytes.length));
    }
    bytes = [];
  };
  for (const t of tokens) {
    const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(t);
    if (m) bytes.push(parseInt(m[1], 16));
    else {
      flush();
      out.push(t);
    }
  }
  flush();
  return out;
}

function decoder(d: unknown, fail: Fail): Decoder {
  if (d === null || d === undefined) return (t) => t;
  const o = d as Json;
  switch (o.type) {
    case 'Sequence': {
      const parts = ((o.decoders as unknown[]) ?? []).map((x) => decoder(x, fail));
      return (t) => parts.reduce((acc, f) => f(acc), t);
    }
    case 'ByteLevel':
      return (tokens) => {
        const bytes: number[] = [];
        for (const t of tokens) {
          const bs: number[] = [];
          let ok = true;
          for (const ch of t) {
            const b = CHAR_TO_BYTE.get(ch);
            if (b === undefined) {
              ok = false;
              break;
            }
            bs.push(b);
          }
          for (const b of ok ? bs : utf8.encode(t)) bytes.push(b); // a token may be megabytes long: no spread
        }
        return [lossy.decode(Uint8Array.from(bytes))];
      };
    case 'Replace': {
      const re = stringPattern(o.pattern, fail, 'Replace decoder');
      const content = String(o.content);
      return (tokens) => tokens.map((t) => t.replace(re, () => content));
    }
    case 'ByteFallback':
      return byteFallbackDecode;
    case 'Fuse':
      return (tokens) => [tokens.join('')];
    case 'Strip': {
      const c = String(o.content);
      const start = Number(o.start ?? 0);
      const stop = Number(o.stop ?? 0);
      return (tokens) =>
        tokens.map((t) => {
          const chars = [...t];
          let a = 0;
          let b = chars.length;
          while (a < start && a < b && chars[a] === c) a++;
          while (chars.length - b < stop && b > a && chars[b - 1] === c) b--;
          return chars.slice(a, b).join('');
        });
    }
    case 'Metaspace': {
      const rep = String(o.replacement ?? '\u2581');
      const scheme = String(o.prepend_scheme ?? (o.add_prefix_space === false ? 'never' : 'always'));
      return (tokens) =>
        tokens.map((t, i) => {
          const s = t.split(rep).join(' ');
          return i === 0 && scheme !== 'never' && s.startsWith(' ') ? s.slice(1) : s;
        });
    }
    default:
      return fail(`decoder type "${String(o.type)}" is not supported (supported: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence)`);
  }
}

// ---------------------------------------------------------------- post-processor

/** Special ids placed before and after the sequence for a single input. */
function template(p: unknown, fail: Fail, tokenId: (t: string) => number | undefined): { before: number[]; after: number[] } {
  if (p === null || p === undefined) return { before: [], after: [] };
  const o = p as Json;
  switch (o.type) {
    case 'ByteLevel':
      return { before: [], after: [] };
    case 'Sequence': {
      const parts = ((o.processors as unknown[]) ?? []).map((x) => template(x, fail, tokenId));
      return { before: parts.flatMap((x) => x.before), after: parts.flatMap((x) => x.after) };
    }
    case 'TemplateProcessing': {
      const specials = (o.special_tokens ?? {}) as Record<string, { ids?: number[] }>;
      const out = { before: [] as number[], after: [] as number[] };
      let seen = false;
      for (const item of (o.single as Json[]) ?? []) {
        if (item.Sequence) {
          seen = true;
          continue;
        }
        const st = item.SpecialToken as { id?: string } | undefined;
        if (!st || typeof st.id !== 'string') fail('TemplateProcessing item is not a Sequence or SpecialToken');
        const ids = specials[st.id]?.ids ?? [tokenId(st.id) ?? fail(`TemplateProcessing special token "${st.id}" is unknown`)];
        (seen ? out.after : out.before).push(...ids);
      }
      return out;
    }
    default:
      return fail(`post_processor type "${String(o.type)}" is not supported (supported: TemplateProcessing, ByteLevel, Sequence)`);
  }
}

// ---------------------------------------------------------------- loader

function tokenName(v: unknown): string | null {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as Json).content === 'string') return (v as Json).content as string;
  return null;
}

/**
 * Load a tokenizer from the text of tokenizer.json (and optionally tokenizer_config.json).
 * `file` names tokenizer.json in error messages.
 */
export function loadTokenizer(tokenizerJsonText: string, tokenizerConfigText?: string, file = 'tokenizer.json'): Tokenizer {
  const fail: Fail = (why) => {
    throw new LlmcError(`unsupported tokenizer: ${clip(why)}`, file); // `why` quotes the file's names and types
  };
  const tj = parseJsonAs(TOKENIZER_JSON, tokenizerJsonText, file) as Json;
  const cfg: Json = tokenizerConfigText === undefined ? {} : parseJsonAs(TOKENIZER_CONFIG, tokenizerConfigText, file.replace(/tokenizer\.json$/, 'tokenizer_config.json'));

  const model = (tj.model ?? {}) as Json;
  const mtype = model.type ?? (model.merges ? 'BPE' : undefined);
  if (mtype !== 'BPE') fail(`model type "${String(mtype)}" (only BPE is supported)`);
  if (typeof model.dropout === 'number' && model.dropout > 0) fail('BPE dropout');
  if (model.continuing_subword_prefix) fail(`BPE continuing_subword_prefix "${String(model.continuing_subword_prefix)}"`);
  if (model.end_of_word_suffix) fail(`BPE end_of_word_suffix "${String(model.end_of_word_suffix)}"`);
  if (typeof model.vocab !== 'object' || model.vocab === null) fail('model.vocab is missing');
  const vocab = new Map<string, number>(Object.entries(model.vocab as Record<string, number>));
  const merges = ((model.merges as unknown[]) ?? []).map((m): [string, string] => {
    if (Array.isArray(m) && m.length === 2) return [String(m[0]), String(m[1])];
    if (typeof m === 'string') {
      const i = m.indexOf(' ', 1);
      if (i > 0) return [m.slice(0, i), m.slice(i + 1)];
    }
    return fail(`malformed merge ${summarize(m)}`);
  });
  const added: AddedToken[] = ((tj.added_tokens as Json[]) ?? []).map((t) => {
    if (t.single_word === true) fail(`added token "${String(t.content)}" with single_word=true`);
    return { id: Number(t.id), content: String(t.content), special: t.special === true, lstrip: t.lstrip === true, rstrip: t.rstrip === true };
  });

  const bpe = new Bpe(
    {
      vocab,
      merges,
      unkToken: typeof model.unk_token === 'string' ? model.unk_token : null,
      fuseUnk: model.fuse_unk === true,
      byteFallback: model.byte_fallback === true,
      ignoreMerges: model.ignore_merges === true,
    },
    fail,
  );
  const norm = normalizer(tj.normalizer, fail);
  const pre = preTokenizer(tj.pre_tokenizer, fail);
  const dec = decoder(tj.decoder, fail);

  const idToTok: string[] = [];
  for (const [t, id] of vocab) idToTok[id] = t;
  const addedById = new Map<number, AddedToken>();
  for (const a of added) {
    idToTok[a.id] = a.content;
    addedById.set(a.id, a);
  }
  const tokenId = (t: string) => added.find((a) => a.content === t)?.id ?? vocab.get(t);
  const vocabSize = idToTok.length;

  const tpl = template(tj.post_processor, fail, tokenId);
  const bosName = tokenName(cfg.bos_token);
  const eosName = tokenName(cfg.eos_token);
  const bosId = (bosName !== null ? tokenId(bosName) : undefined) ?? (tpl.before.length === 1 ? tpl.before[0] : null);
  const eosId = (eosName !== null ? tokenId(eosName) : undefined) ?? null;
  const cfgAddBos = typeof cfg.add_bos_token === 'boolean' ? cfg.add_bos_token : undefined;
  const cfgAddEos = typeof cfg.add_eos_token === 'boolean' ? cfg.add_eos_token : undefined;

  // Added tokens split the input first, longest match at the leftmost position.
  const addedRe = added.length
    ? literalRe(
        [...added]
          .sort((a, b) => b.content.length - a.content.length)
          .map((a) => escapeRe(a.content))
          .join('|'),
        fail,
        'added_tokens',
      )
    : null;
  const addedByContent = new Map(added.map((a) => [a.content, a]));

  function splitAdded(text: string): (Piece | AddedToken)[] {
    if (!addedRe) return [{ text, first: true }];
    const out: (Piece | AddedToken)[] = [];
    let last = 0;
    for (const m of text.matchAll(addedRe)) {
      const a = addedByContent.get(m[0])!;
      let before = text.slice(last, m.index);
      if (a.lstrip) before = before.replace(/\s+$/u, '');
      if (before) out.push({ text: before, first: last === 0 });
      out.push(a);
      last = m.index! + m[0].length;
      if (a.rstrip) while (last < text.length && /\s/u.test(text[last])) last++;
    }
    if (last < text.length) out.push({ text: text.slice(last), first: last === 0 });
    return out;
  }

  function encode(text: string, opts: { addBos?: boolean } = {}): number[] {
    const ids: number[] = [];
    for (const part of splitAdded(text)) {
      if ('id' in part) {
        ids.push(part.id);
        continue;
      }
      // A loop, not push(...): a word of 200,000 characters ("[[[[…") is as many ids, past the spread's stack.
      for (const w of pre.split([norm(part.text)], part.first)) for (const id of bpe.encodeWord(w)) ids.push(id);
    }
    if (opts.addBos === true) return bosId === null ? ids : [bosId, ...ids];
    if (opts.addBos === false) return ids;
    const before = cfgAddBos === undefined ? tpl.before : cfgAddBos && bosId !== null ? [bosId] : [];
    const after = cfgAddEos === undefined ? tpl.after : cfgAddEos && eosId !== null ? [eosId] : [];
    return before.length || after.length ? before.concat(ids, after) : ids;
  }

  function decode(ids: readonly number[], opts: { skipSpecial?: boolean } = {}): string {
    const tokens: string[] = [];
    for (const id of ids) {
      const t = idToTok[id];
      if (t === undefined) throw new LlmcError(`token id ${id} is outside the vocabulary (size ${vocabSize})`, file);
      if (opts.skipSpecial && addedById.get(id)?.special) continue;
      tokens.push(t);
    }
    return dec(tokens).join('');
  }

  return { encode, decode, bosId, eosId, vocabSize, idToToken: (id) => idToTok[id] };
}
