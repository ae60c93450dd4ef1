/**
 * The tokenizer: hand-worked BPE on tiny vocabularies (merge ranks, byte fallback, unk fusing,
 * special tokens), round trips on the fixture tokenizers of both styles, refusal of unsupported
 * features, and a cross-check against @huggingface/tokenizers (an independent JS implementation).
 */
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { describe, expect, it } from 'vitest';
import { buildTokenizer } from '../fixtures/tokenizer.js';
import { LlmcError } from '../src/core/errors.js';
import { BYTE_TO_CHAR } from '../src/core/tokenizer/bytelevel.js';
import { loadTokenizer } from '../src/core/tokenizer/index.js';

const SP = '\u2581';
const byteTok = (b: number) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`;

/** A GPT-2 style tokenizer.json over the given extra tokens and merges. */
function byteLevelJson(extra: string[], merges: string[], added: { id: number; content: string }[] = []) {
  const vocab: Record<string, number> = {};
  for (let b = 0; b < 256; b++) vocab[BYTE_TO_CHAR[b]] = b; // id = byte value, for easy hand-working
  extra.forEach((t, i) => (vocab[t] = 256 + i));
  return JSON.stringify({
    version: '1.0',
    added_tokens: added.map((a) => ({ ...a, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, vocab, merges },
  });
}

/** A Llama (SentencePiece-style) tokenizer.json: <unk>,<s>,</s>, 256 byte tokens, then `pieces`. */
function spJson(pieces: string[], merges: string[], opts: { byteFallback?: boolean; metaspace?: boolean } = {}) {
  const vocab: Record<string, number> = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  for (let b = 0; b < 256; b++) vocab[byteTok(b)] = 3 + b;
  pieces.forEach((p, i) => (vocab[p] = 259 + i));
  const special = (id: number, content: string) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  return JSON.stringify({
    version: '1.0',
    added_tokens: [special(0, '<unk>'), special(1, '<s>'), special(2, '</s>')],
    normalizer: opts.metaspace
      ? null
      : { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: SP }, { type: 'Replace', pattern: { String: ' ' }, content: SP }] },
    pre_tokenizer: opts.metaspace ? { type: 'Metaspace', replacement: SP, prepend_scheme: 'first', split: false } : null,
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [],
      special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } },
    },
    decoder: opts.metaspace
      ? { type: 'Metaspace', replacement: SP, prepend_scheme: 'first', split: false }
      : {
          type: 'Sequence',
          decoders: [
            { type: 'Replace', pattern: { String: SP }, content: ' ' },
            { type: 'ByteFallback' },
            { type: 'Fuse' },
            { type: 'Strip', content: ' ', start: 1, stop: 0 },
          ],
        },
    model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: true, byte_fallback: opts.byteFallback ?? true, vocab, merges },
  });
}

describe('byte-level BPE, hand-worked', () => {
  const G = BYTE_TO_CHAR[0x20]; // 'Ġ'
  it('applies merges by rank, not by position', () => {
    // "abc": with "b c" ranked first, a·bc; then "a bc" is not a merge → [a, bc].
    const t1 = loadTokenizer(byteLevelJson(['bc', 'ab'], ['b c', 'a b']));
    expect(t1.encode('abc')).toEqual([0x61, 256]);
    // Ranks swapped → [ab, c].
    const t2 = loadTokenizer(byteLevelJson(['bc', 'ab'], ['a b', 'b c']));
    expect(t2.encode('abc')).toEqual([257, 0x63]);
  });

  it('pre-tokenizes with the GPT-2 regex, so merges never cross words', () => {
    // vocab: ab=256, abc=257, Ġa=258; merges: a b, ab c, Ġ a.
    const t = loadTokenizer(byteLevelJson(['ab', 'abc', `${G}a`], ['a b', 'ab c', `${G} a`]));
    // "abc abc" → "abc" | " abc". Second word: Ġ a b c → (a b)=rank0 first → Ġ ab c → ab c → Ġ abc.
    expect(t.encode('abc abc')).toEqual([257, 0x20, 257]);
    // "c" and " a" are separate pre-tokens: "ca" would not split like that, " a" merges to Ġa.
    expect(t.encode("x's a")).toEqual([0x78, 0x27, 0x73, 258]);
    expect(t.decode([257, 0x20, 257])).toBe('abc abc');
  });

  it('spells non-ASCII text as UTF-8 bytes and decodes it back', () => {
    const t = loadTokenizer(byteLevelJson([], []));
    expect(t.encode('é€')).toEqual([0xc3, 0xa9, 0xe2, 0x82, 0xac]);
    expect(t.decode([0xc3, 0xa9, 0xe2, 0x82, 0xac])).toBe('é€');
    // An incomplete sequence decodes to U+FFFD, as from_utf8_lossy does.
    expect(t.decode([0xe2, 0x82])).toBe('\ufffd');
  });

  it('matches added tokens before pre-tokenizing', () => {
    const t = loadTokenizer(byteLevelJson([], [], [{ id: 300, content: '<|eot|>' }]));
    expect(t.encode('a<|eot|>b')).toEqual([0x61, 300, 0x62]);
    expect(t.decode([0x61, 300, 0x62])).toBe('a<|eot|>b');
    expect(t.decode([0x61, 300, 0x62], { skipSpecial: true })).toBe('ab');
    expect(t.vocabSize).toBe(301);
  });
});

describe('SentencePiece-style BPE, hand-worked', () => {
  // pieces: ▁=259, h=260, i=261, ▁h=262, ▁hi=263
  const pieces = [SP, 'h', 'i', `${SP}h`, `${SP}hi`];
  const merges = [`${SP} h`, `${SP}h i`];

  it('prepends ▁, replaces spaces, merges, adds <s> per the template', () => {
    const t = loadTokenizer(spJson(pieces, merges));
    expect(t.encode('hi hi')).toEqual([1, 263, 263]);
    expect(t.encode('hi hi', { addBos: false })).toEqual([263, 263]);
    expect(t.bosId).toBe(1);
    expect(t.decode([1, 263, 263], { skipSpecial: true })).toBe('hi hi');
    // Two spaces: ▁hi ▁ ▁hi (the lone ▁ has no partner to merge with).
    expect(t.encode('hi  hi', { addBos: false })).toEqual([263, 259, 263]);
    expect(t.decode([263, 259, 263])).toBe('hi  hi');
  });

  it('falls back to UTF-8 byte tokens for unknown characters', () => {
    const t = loadTokenizer(spJson(pieces, merges));
    // "hé" → ▁ h é → ▁h + <0xC3> <0xA9>
    expect(t.encode('hé', { addBos: false })).toEqual([262, 3 + 0xc3, 3 + 0xa9]);
    expect(t.decode([262, 3 + 0xc3, 3 + 0xa9])).toBe('hé');
    // A lone continuation byte is invalid UTF-8: one U+FFFD per byte.
    expect(t.decode([262, 3 + 0xa9, 3 + 0xa9])).toBe('h\ufffd\ufffd');
  });

  it('without byte fallback, unknown characters become one fused <unk>', () => {
    const t = loadTokenizer(spJson(pieces, merges, { byteFallback: false }));
    expect(t.encode('hxyz', { addBos: false })).toEqual([262, 0]);
  });

  it('the Metaspace pre-tokenizer/decoder form encodes the same', () => {
    const t = loadTokenizer(spJson(pieces, merges, { metaspace: true }));
    expect(t.encode('hi hi', { addBos: false })).toEqual([263, 263]);
    expect(t.decode([263, 263])).toBe('hi hi');
  });

  it('tokenizer_config.json decides bos/eos and add_bos_token', () => {
    const cfg = JSON.stringify({ add_bos_token: false, add_eos_token: true, bos_token: '<s>', eos_token: '</s>' });
    const t = loadTokenizer(spJson(pieces, merges), cfg);
    expect(t.eosId).toBe(2);
    expect(t.encode('hi')).toEqual([263, 2]);
  });
});

describe('unsupported features are refused by name', () => {
  const base = JSON.parse(byteLevelJson([], []));
  const cases: [string, (j: Record<string, any>) => void, RegExp][] = [
    ['WordPiece model', (j) => (j.model = { type: 'WordPiece', vocab: {} }), /model type "WordPiece"/],
    ['BERT normalizer', (j) => (j.normalizer = { type: 'BertNormalizer' }), /normalizer type "BertNormalizer"/],
    ['BPE dropout', (j) => (j.model.dropout = 0.1), /BPE dropout/],
    ['continuing_subword_prefix', (j) => (j.model.continuing_subword_prefix = '##'), /continuing_subword_prefix/],
    ['Bert post-processor', (j) => (j.post_processor = { type: 'BertProcessing' }), /post_processor type "BertProcessing"/],
    ['CTC decoder', (j) => (j.decoder = { type: 'CTC' }), /decoder type "CTC"/],
  ];
  it.each(cases)('%s', (_name, mutate, re) => {
    const j = structuredClone(base);
    mutate(j);
    let err: unknown;
    try {
      loadTokenizer(JSON.stringify(j), undefined, '/m/tokenizer.json');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(LlmcError);
    expect((err as LlmcError).file).toBe('/m/tokenizer.json');
    expect((err as LlmcError).message).toMatch(re);
  });
});

const SAMPLES = [
  '',
  'The old fisherman sat at the back.',
  'the the the',
  '  leading spaces and trailing  ',
  'tabs\tand\nnewlines\n\n',
  'numbers 12 345 6789 and punctuation!?;: "quoted"',
  "it's they're we've I'm you'll he'd",
  'café naïve résumé — “curly” ‘quotes’',
  'Καλημέρα κόσμε, Привет мир, 你好世界, こんにちは',
  'emoji 🙂👍🏽 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢',
  'a compiler reads a program',
];

describe.each(['byte-level', 'sentencepiece'] as const)('fixture tokenizer (%s)', (style) => {
  const built = buildTokenizer(style, 512, 256);
  const tok = loadTokenizer(built.tokenizerJson, built.tokenizerConfigJson);

  it('has the requested vocab size and special ids', () => {
    expect(tok.vocabSize).toBe(512);
    expect(tok.bosId).toBe(built.bosId);
    expect(tok.eosId).toBe(built.eosId);
  });

  it.each(SAMPLES)('decode(encode(s)) == s: %j', (s) => {
    const ids = tok.encode(s, { addBos: false });
    expect(ids.every((id) => id >= 0 && id < 512)).toBe(true);
    expect(tok.decode(ids)).toBe(s);
  });

  it('learned merges are meaningful: common corpus words are single tokens', () => {
    // Byte-level words carry their leading space; SentencePiece prepends ▁ itself.
    for (const w of ['the', 'and', 'of']) expect(tok.encode(style === 'byte-level' ? ` ${w}` : w, { addBos: false })).toHaveLength(1);
    // Running text compresses to well under one token per character.
    const s = 'The little boat left the harbor early in the morning, when the water was still.';
    expect(tok.encode(s, { addBos: false }).length).toBeLessThan(s.length / 2.5);
  });

  it('agrees with @huggingface/tokenizers on encode and decode', () => {
    const hf = new HfTokenizer(JSON.parse(built.tokenizerJson), JSON.parse(built.tokenizerConfigJson));
    for (const s of SAMPLES) {
      const theirs = hf.encode(s, { add_special_tokens: false }).ids;
      expect(tok.encode(s, { addBos: false })).toEqual(theirs);
      if (theirs.length) expect(tok.decode(theirs)).toBe(hf.decode(theirs, { skip_special_tokens: false }));
    }
    const withSpecial = hf.encode('hello there', { add_special_tokens: true }).ids;
    expect(tok.encode('hello there')).toEqual(withSpecial);
  });
});
