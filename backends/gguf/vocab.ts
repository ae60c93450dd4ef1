/**
 * tokenizer.json (+ tokenizer_config.json) → llama.cpp's tokenizer.ggml.* metadata.
 *  - "llama": SentencePiece-style vocabularies (BPE with byte fallback and "▁" for spaces, or Unigram).
 *    llama.cpp merges the highest-scoring adjacent pair first, so a BPE piece's score is minus the
 *    rank of the merge that makes it (earlier merge = higher score).
 *  - "gpt2": byte-level BPE: tokens + merges + a pre-tokenizer name llama.cpp knows (`tokenizer.ggml.pre`),
 *    recognized from the tokenizer's split regex.
 * A checkpoint without a tokenizer gets a placeholder "llama" vocabulary so llama.cpp can load it.
 */
import { LlmcError, summarize } from '../../src/core/errors.js';
import type { ArchSpec } from '../../src/core/checkpoint/index.js';
import { archOf } from '../../src/core/arch/registry.js';
import { arr, bool, str, u32, type GgufKv } from './writer.js';
import { parseJsonObject } from '../../src/core/util/json.js';

/** llama_token_type (llama-vocab.h). */
export const TOKEN_TYPE = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

export interface GgufVocab {
  kvs: GgufKv[];
  model: 'llama' | 'gpt2';
  pre?: string;
  size: number;
  notes: string[];
}

type Json = Record<string, any>;

/** Split regexes of tokenizers llama.cpp knows, keyed to its `tokenizer.ggml.pre` names. */
const GPT2_REGEX = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const KNOWN_PRE: Record<string, string> = {
  [GPT2_REGEX]: 'gpt-2',
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": 'qwen2',
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": 'llama-bpe',
};

const parseJson = (text: string, file: string): Json => parseJsonObject(text, file) as Json;

/** Every pre-tokenizer / normalizer node, flattening Sequence nodes. */
function nodes(n: Json | null | undefined): Json[] {
  if (!n) return [];
  if (n.type === 'Sequence') return [...(n.pretokenizers ?? []), ...(n.normalizers ?? [])].flatMap(nodes);
  return [n];
}

function tokenContent(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as Json).content === 'string') return (v as Json).content;
  return undefined;
}

/** Placeholder: <unk>, <s>, </s>, the 256 byte tokens, then unique filler pieces. */
export function placeholderVocab(spec: ArchSpec): GgufVocab {
  const n = spec.vocabSize;
  const tokens: string[] = [];
  const types: number[] = [];
  for (let i = 0; i < n; i++) {
    if (i === 0) (tokens.push('<unk>'), types.push(TOKEN_TYPE.UNKNOWN));
    else if (i === 1) (tokens.push('<s>'), types.push(TOKEN_TYPE.CONTROL));
    else if (i === 2) (tokens.push('</s>'), types.push(TOKEN_TYPE.CONTROL));
    else if (i < 259 && n >= 259) (tokens.push(`<0x${(i - 3).toString(16).toUpperCase().padStart(2, '0')}>`), types.push(TOKEN_TYPE.BYTE));
    else (tokens.push(`<placeholder_${i}>`), types.push(TOKEN_TYPE.NORMAL));
  }
  // Tokens the family's llama.cpp arch looks up by text take the last ids (as phi3's own vocabulary has them).
  const tail = archOf(spec).gguf.placeholderTail ?? [];
  if (n - tail.length >= 259) {
    tail.forEach((t, k) => {
      tokens[n - tail.length + k] = t;
      types[n - tail.length + k] = TOKEN_TYPE.CONTROL;
    });
  }
  const bos = spec.bosTokenId !== null && spec.bosTokenId < n ? spec.bosTokenId : Math.min(1, n - 1);
  const eos = spec.eosTokenIds.find((e) => e < n) ?? Math.min(2, n - 1);
  return {
    model: 'llama',
    size: n,
    notes: [
      `warning: no tokenizer.json; wrote a placeholder vocabulary of ${n} tokens (ids round-trip, text does not)`,
    ],
    kvs: [
      { key: 'tokenizer.ggml.model', value: str('llama') },
      { key: 'tokenizer.ggml.tokens', value: arr('STRING', tokens) },
      { key: 'tokenizer.ggml.scores', value: arr('FLOAT32', tokens.map(() => 0)) },
      { key: 'tokenizer.ggml.token_type', value: arr('INT32', types) },
      { key: 'tokenizer.ggml.bos_token_id', value: u32(bos) },
      { key: 'tokenizer.ggml.eos_token_id', value: u32(eos) },
      { key: 'tokenizer.ggml.unknown_token_id', value: u32(0) },
      { key: 'tokenizer.ggml.add_bos_token', value: bool(true) },
      { key: 'tokenizer.ggml.add_eos_token', value: bool(false) },
    ],
  };
}

/** Convert a Hugging Face tokenizer; `vocabSize` is the embedding's row count (the GGUF vocab size). */
export function convertTokenizer(
  tokenizerText: string,
  tokenizerConfigText: string | undefined,
  spec: ArchSpec,
  file: string,
): GgufVocab {
  const tj = parseJson(tokenizerText, file);
  const tc = tokenizerConfigText ? parseJson(tokenizerConfigText, file.replace(/tokenizer\.json$/, 'tokenizer_config.json')) : {};
  const model = tj.model as Json | undefined;
  if (!model || typeof model !== 'object') throw new LlmcError('missing "model"', file);
  const n = spec.vocabSize;
  const notes: string[] = [];

  // id → piece, and optional scores (Unigram).
  const pieces: (string | undefined)[] = new Array(n);
  const scores = new Float32Array(n);
  const byteFallback = model.byte_fallback === true;
  if (model.type === 'BPE') {
    if (typeof model.vocab !== 'object' || model.vocab === null) throw new LlmcError('BPE model without a "vocab" object', file);
    for (const [piece, id] of Object.entries(model.vocab as Record<string, number>)) {
      if (!Number.isInteger(id) || id < 0) throw new LlmcError(`bad id ${id} for token ${summarize(piece)}`, file);
      if (id < n) pieces[id] = piece;
    }
  } else if (model.type === 'Unigram') {
    if (!Array.isArray(model.vocab)) throw new LlmcError('Unigram model without a "vocab" list', file);
    (model.vocab as [string, number][]).forEach(([piece, score], id) => {
      if (id < n) (pieces[id] = piece), (scores[id] = score);
    });
  } else {
    throw new LlmcError(`tokenizer model type "${model.type}" is not supported for GGUF (supported: BPE, Unigram)`, file);
  }
  const added = new Map<number, Json>();
  for (const a of (tj.added_tokens ?? []) as Json[]) {
    if (Number.isInteger(a.id) && a.id < n) {
      pieces[a.id] = a.content;
      added.set(a.id, a);
    } else if (Number.isInteger(a.id)) notes.push(`added token ${summarize(a.content)} (id ${a.id}) is beyond the model's vocabulary of ${n}; dropped`);
  }

  const pre = nodes(tj.pre_tokenizer);
  const norm = nodes(tj.normalizer);
  const byteLevel = pre.some((p) => p.type === 'ByteLevel') || tj.decoder?.type === 'ByteLevel';
  const metaspace = pre.find((p) => p.type === 'Metaspace');
  const spmLike = byteFallback || model.type === 'Unigram' || !!metaspace || norm.some((x) => x.type === 'Replace' && x.content === '▁');
  if (!spmLike && !byteLevel) throw new LlmcError('cannot tell the tokenizer style (neither SentencePiece-like nor byte-level BPE)', file);
  const style: 'llama' | 'gpt2' = spmLike ? 'llama' : 'gpt2';

  const unk = typeof model.unk_token === 'string' ? model.unk_token : undefined;
  const idOf = new Map<string, number>();
  pieces.forEach((p, i) => p !== undefined && !idOf.has(p) && idOf.set(p, i));

  const tokens: string[] = [];
  const types: number[] = [];
  let missing = 0;
  for (let i = 0; i < n; i++) {
    const p = pieces[i];
    if (p === undefined) {
      tokens.push(`[PAD${i}]`);
      types.push(TOKEN_TYPE.UNUSED);
      missing++;
      continue;
    }
    tokens.push(p);
    const a = added.get(i);
    if (p === unk) types.push(TOKEN_TYPE.UNKNOWN);
    else if (a) types.push(a.special ? TOKEN_TYPE.CONTROL : TOKEN_TYPE.USER_DEFINED);
    else if (style === 'llama' && /^<0x[0-9A-Fa-f]{2}>$/.test(p)) types.push(TOKEN_TYPE.BYTE);
    else types.push(TOKEN_TYPE.NORMAL);
  }
  if (missing) notes.push(`${missing} ids of the ${n}-token embedding have no token; written as [PAD<id>] (unused)`);

  const kvs: GgufKv[] = [{ key: 'tokenizer.ggml.model', value: str(style) }];
  let preName: string | undefined;
  const merges: string[] = ((model.merges ?? []) as (string | [string, string])[]).map((m) => (Array.isArray(m) ? `${m[0]} ${m[1]}` : m));
  if (style === 'gpt2') {
    const split = pre.find((p) => p.type === 'Split');
    const regex: string | undefined = split ? (split.pattern?.Regex ?? split.pattern?.String) : pre.some((p) => p.type === 'ByteLevel' && p.use_regex !== false) ? GPT2_REGEX : undefined;
    preName = regex !== undefined ? KNOWN_PRE[regex] : undefined;
    if (!preName) {
      preName = 'default';
      notes.push(`warning: pre-tokenizer regex ${summarize(regex ?? null)} is not one llama.cpp knows; wrote tokenizer.ggml.pre = "default"`);
    }
    kvs.push({ key: 'tokenizer.ggml.pre', value: str(preName) });
    kvs.push({ key: 'tokenizer.ggml.tokens', value: arr('STRING', tokens) });
    kvs.push({ key: 'tokenizer.ggml.token_type', value: arr('INT32', types) });
    kvs.push({ key: 'tokenizer.ggml.merges', value: arr('STRING', merges) });
  } else {
    if (model.type === 'BPE') {
      // Score = -(rank of the merge producing the piece); pieces no merge produces score 0.
      merges.forEach((m, rank) => {
        const sp = m.indexOf(' ');
        const id = idOf.get(m.slice(0, sp) + m.slice(sp + 1));
        if (id !== undefined && scores[id] === 0) scores[id] = -(rank + 1);
      });
    }
    const prependScheme = metaspace ? (metaspace.prepend_scheme ?? (metaspace.add_prefix_space === false ? 'never' : 'always')) : undefined;
    const addSpacePrefix = metaspace ? prependScheme !== 'never' : norm.some((x) => x.type === 'Prepend' && x.prepend === '▁');
    kvs.push({ key: 'tokenizer.ggml.tokens', value: arr('STRING', tokens) });
    kvs.push({ key: 'tokenizer.ggml.scores', value: arr('FLOAT32', Array.from(scores)) });
    kvs.push({ key: 'tokenizer.ggml.token_type', value: arr('INT32', types) });
    kvs.push({ key: 'tokenizer.ggml.add_space_prefix', value: bool(addSpacePrefix) });
  }

  // Special tokens: tokenizer_config.json names them by content; config.json ids are the fallback.
  const special = (key: string): number | undefined => {
    const c = tokenContent(tc[key]);
    return c !== undefined ? idOf.get(c) : undefined;
  };
  const bos = special('bos_token') ?? (spec.bosTokenId ?? undefined);
  const eos = special('eos_token') ?? spec.eosTokenIds[0];
  const unkId = unk !== undefined ? idOf.get(unk) : special('unk_token');
  const pad = special('pad_token');
  for (const [key, id] of [['bos_token_id', bos], ['eos_token_id', eos], ['unknown_token_id', unkId], ['padding_token_id', pad]] as const) {
    if (id !== undefined && id !== null && id < n) kvs.push({ key: `tokenizer.ggml.${key}`, value: u32(id) });
  }
  // add_bos: tokenizer_config says so explicitly, else the post-processor's template shows it.
  const template = tj.post_processor?.single as Json[] | undefined;
  const templBos = Array.isArray(template) && template.length > 0 && template[0].SpecialToken !== undefined;
  const addBos = typeof tc.add_bos_token === 'boolean' ? tc.add_bos_token : templBos || style === 'llama';
  kvs.push({ key: 'tokenizer.ggml.add_bos_token', value: bool(addBos) });
  kvs.push({ key: 'tokenizer.ggml.add_eos_token', value: bool(tc.add_eos_token === true) });
  if (typeof tc.chat_template === 'string') kvs.push({ key: 'tokenizer.chat_template', value: str(tc.chat_template) });
  return { kvs, model: style, pre: preName, size: n, notes };
}
