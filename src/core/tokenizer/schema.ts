/**
 * The shape of tokenizer.json and tokenizer_config.json as llmc reads them, checked before anything
 * is built from them (they are untrusted input): one error naming the file and the JSON path.
 * Component `type`s stay open here; the loader says which ones it supports. zod: a well-kept
 * validator with typed results and paths in its issues (the TS runtime, which must stay
 * dependency-free, never reads tokenizer files).
 */
import { z } from 'zod';
import { LlmcError } from '../errors.js';
import { parseJson } from '../util/json.js';

const id = z.number().int().nonnegative();
const component = z.looseObject({ type: z.string() });
const pattern = z.union([z.looseObject({ String: z.string() }), z.looseObject({ Regex: z.string() })]);

/** A component that may nest more of itself under `key` (Sequence normalizers, decoders, ...). */
const nested = (key: string) =>
  z.lazy((): z.ZodType => z.union([z.null(), component.extend({ [key]: z.array(z.lazy(() => nested(key))).optional(), pattern: pattern.optional() })]));

const templateItem = z.union([
  z.looseObject({ Sequence: z.looseObject({ id: z.string() }) }),
  z.looseObject({ SpecialToken: z.looseObject({ id: z.string() }) }),
]);

const postProcessor: z.ZodType = z.lazy(() =>
  z.union([
    z.null(),
    component.extend({
      processors: z.array(postProcessor).optional(),
      single: z.array(templateItem).optional(),
      special_tokens: z.record(z.string(), z.looseObject({ ids: z.array(id).optional() })).optional(),
    }),
  ]),
);

export const TOKENIZER_JSON = z.looseObject({
  model: z.looseObject({
    type: z.string().optional(),
    vocab: z.record(z.string(), id),
    merges: z.array(z.union([z.string(), z.tuple([z.string(), z.string()])])).optional(),
    unk_token: z.string().nullable().optional(),
  }),
  added_tokens: z
    .array(z.looseObject({ id, content: z.string(), special: z.boolean().optional(), single_word: z.boolean().optional() }))
    .nullable()
    .optional(),
  normalizer: nested('normalizers').optional(),
  pre_tokenizer: nested('pretokenizers').optional(),
  decoder: nested('decoders').optional(),
  post_processor: postProcessor.optional(),
});

export const TOKENIZER_CONFIG = z.looseObject({
  add_bos_token: z.boolean().nullable().optional(),
  add_eos_token: z.boolean().nullable().optional(),
});

/** The first issue of a failed parse, as `at <path>: <message>`. */
function firstIssue(error: z.ZodError): string {
  const issue = error.issues[0];
  const at = issue.path.length ? issue.path.map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`)).join('').replace(/^\./, '') : '(top level)';
  return `at ${at}: ${issue.message}`;
}

/** Parse JSON text against a schema; one LlmcError naming `file` and the JSON path on any problem. */
export function parseJsonAs<T>(schema: z.ZodType<T>, text: string, file: string): T {
  const v = parseJson(text, file);
  const r = schema.safeParse(v);
  if (!r.success) throw new LlmcError(`unexpected content ${firstIssue(r.error)}`, file);
  return r.data;
}
