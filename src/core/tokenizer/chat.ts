/**
 * Chat templates as transformers applies them (`apply_chat_template(messages,
 * add_generation_prompt=True)`): the Jinja template of tokenizer_config.json (`chat_template`: one
 * string, or a list of named templates of which "default" is used) rendered with the messages and
 * the tokenizer's special token strings, by @huggingface/jinja (transformers.js's renderer, with
 * trim_blocks / lstrip_blocks as transformers sets them). The rendered text is tokenized without
 * adding special tokens, as transformers does, so a BOS the template writes is not doubled.
 */
import { Template } from '@huggingface/jinja';
import { LlmcError } from '../errors.js';
import { parseJsonObject } from '../util/json.js';

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

type Json = Record<string, unknown>;

/** A special token as tokenizer_config.json writes it: a string, or an AddedToken object with `content`. */
const tokenText = (v: unknown): string | undefined =>
  typeof v === 'string' ? v : v && typeof v === 'object' && typeof (v as Json).content === 'string' ? ((v as Json).content as string) : undefined;

/**
 * The chat template of tokenizer_config.json's text, or null when it has none. A template in the
 * wrong shape, or a list without a "default" entry among several, is an error naming `file`.
 */
export function chatTemplateOf(tokenizerConfigText: string | undefined, file: string): string | null {
  if (tokenizerConfigText === undefined) return null;
  // Bounded, and an object (the text `null` or `[]` is one line, not a TypeError).
  const cfg = parseJsonObject(tokenizerConfigText, file) as Json;
  const t = cfg.chat_template;
  if (t === undefined || t === null) return null;
  if (typeof t === 'string') return t;
  const named = Array.isArray(t) ? t.filter((x): x is { name: string; template: string } => typeof x?.name === 'string' && typeof x?.template === 'string') : [];
  if (!Array.isArray(t) || named.length !== t.length) throw new LlmcError('chat_template must be a string or a list of {"name", "template"}', file);
  const chosen = named.find((x) => x.name === 'default') ?? (named.length === 1 ? named[0] : undefined);
  if (!chosen) throw new LlmcError(`chat_template lists ${named.map((x) => x.name).join(', ')} and no "default"`, file);
  return chosen.template;
}

/** The prompt text `template` makes of `messages`, ending where the assistant's reply begins. */
export function renderChat(template: string, messages: ChatMessage[], tokenizerConfigText: string | undefined, file: string): string {
  const cfg = tokenizerConfigText === undefined ? {} : (parseJsonObject(tokenizerConfigText, file) as Json);
  const specials: Record<string, string> = {};
  for (const k of ['bos_token', 'eos_token', 'unk_token', 'pad_token']) {
    const v = tokenText(cfg[k]);
    if (v !== undefined) specials[k] = v;
  }
  try {
    return new Template(template).render({ messages, add_generation_prompt: true, ...specials });
  } catch (e) {
    // The template's own raise_exception('...') and Jinja errors alike: one line.
    throw new LlmcError(`chat_template: ${String((e as Error).message ?? e).split('\n')[0]}`, file);
  }
}
