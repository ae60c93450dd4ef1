/**
 * Quantization encodings JSON for qnn-onnx-converter's --quantization_overrides, in both layouts
 * (SPEC-outliers §5), validated against the schemas below (kept in the repo as JSON Schema too:
 * backends/qnn/encodings.schema.json, which a test holds equal to these):
 *   legacy 0.6.1   {"version", "activation_encodings": {tensor: [enc]}, "param_encodings": {…}}
 *                  enc = {bitwidth, dtype: "int", is_symmetric: "True" (a string), scale, offset, min, max}
 *   aimet 1.0.0    {"version": "1.0.0", "activation_encodings": [{name, dtype: "INT", bw, enc_type:
 *                  "PER_TENSOR", is_sym: true, scale: [s], offset: [o]}], "param_encodings": […]}
 * QNN's convention: float = (q + offset)·scale over unsigned codes, so offset = −zero_point; a
 * symmetric b-bit tensor has offset −2^(b−1), min = scale·offset, max = scale·(2^b − 1 + offset).
 */
import { z } from 'zod';
import type { EncodingsFormat } from './options.js';
import type { Encoding } from './lower.js';

const finite = z.number().refine(Number.isFinite, 'must be finite');
const positive = finite.refine((x) => x > 0, 'must be positive');

const legacyEntry = z
  .object({
    bitwidth: z.union([z.literal(8), z.literal(16)]),
    dtype: z.literal('int'),
    is_symmetric: z.enum(['True', 'False']),
    scale: positive,
    offset: z.number().int(),
    min: finite,
    max: finite,
  })
  .strict()
  .superRefine((e, ctx) => {
    const levels = 2 ** e.bitwidth - 1;
    if (e.is_symmetric === 'True' && e.offset !== -(2 ** (e.bitwidth - 1))) ctx.addIssue({ code: 'custom', message: `symmetric ${e.bitwidth}-bit needs offset ${-(2 ** (e.bitwidth - 1))}` });
    const near = (a: number, b: number) => Math.abs(a - b) <= 2 * Number.EPSILON * Math.max(1, Math.abs(b));
    if (!near(e.min, e.scale * e.offset)) ctx.addIssue({ code: 'custom', message: 'min must be scale·offset' });
    if (!near(e.max, e.scale * (levels + e.offset))) ctx.addIssue({ code: 'custom', message: 'max must be scale·(2^bitwidth − 1 + offset)' });
  });

export const LEGACY_SCHEMA = z
  .object({
    version: z.literal('0.6.1'),
    activation_encodings: z.record(z.string().min(1), z.array(legacyEntry).length(1)),
    param_encodings: z.record(z.string().min(1), z.array(legacyEntry).min(1)),
  })
  .strict();

const aimetEntry = z
  .object({
    name: z.string().min(1),
    dtype: z.literal('INT'),
    bw: z.union([z.literal(8), z.literal(16)]),
    enc_type: z.enum(['PER_TENSOR', 'PER_CHANNEL']),
    is_sym: z.boolean(),
    scale: z.array(positive).min(1),
    offset: z.array(z.number().int()).min(1),
  })
  .strict()
  .superRefine((e, ctx) => {
    if (e.scale.length !== e.offset.length) ctx.addIssue({ code: 'custom', message: 'scale and offset need one value each per channel' });
    if (e.enc_type === 'PER_TENSOR' && e.scale.length !== 1) ctx.addIssue({ code: 'custom', message: 'PER_TENSOR has one scale' });
    if (e.is_sym && e.offset.some((o) => o !== -(2 ** (e.bw - 1)))) ctx.addIssue({ code: 'custom', message: `symmetric ${e.bw}-bit needs offset ${-(2 ** (e.bw - 1))}` });
  });

export const AIMET1_SCHEMA = z
  .object({
    version: z.literal('1.0.0'),
    activation_encodings: z.array(aimetEntry),
    param_encodings: z.array(aimetEntry),
  })
  .strict();

export const SCHEMAS = { legacy: LEGACY_SCHEMA, aimet1: AIMET1_SCHEMA } as const;

/** The JSON Schema documents of both layouts (what backends/qnn/encodings.schema.json holds). */
export function encodingsJsonSchema(): Record<string, unknown> {
  return {
    $comment: 'Generated from backends/qnn/encodings.ts (zod); test/qnn-target.test.ts keeps them equal.',
    legacy: z.toJSONSchema(LEGACY_SCHEMA, { unrepresentable: 'any' }),
    aimet1: z.toJSONSchema(AIMET1_SCHEMA, { unrepresentable: 'any' }),
  };
}

/** The encodings of one graph in `format`, checked against its schema. */
export function encodingsJson(encodings: readonly Encoding[], format: EncodingsFormat): unknown {
  const offset = (bits: number) => -(2 ** (bits - 1));
  let doc: unknown;
  if (format === 'legacy') {
    const entry = (e: Encoding) => [{ bitwidth: e.bits, dtype: 'int', is_symmetric: 'True', scale: e.scale, offset: offset(e.bits), min: e.scale * offset(e.bits), max: e.scale * (2 ** e.bits - 1 + offset(e.bits)) }];
    doc = {
      version: '0.6.1',
      activation_encodings: Object.fromEntries(encodings.filter((e) => e.kind === 'activation').map((e) => [e.name, entry(e)])),
      param_encodings: Object.fromEntries(encodings.filter((e) => e.kind === 'param').map((e) => [e.name, entry(e)])),
    };
  } else {
    const entry = (e: Encoding) => ({ name: e.name, dtype: 'INT', bw: e.bits, enc_type: 'PER_TENSOR', is_sym: true, scale: [e.scale], offset: [offset(e.bits)] });
    doc = { version: '1.0.0', activation_encodings: encodings.filter((e) => e.kind === 'activation').map(entry), param_encodings: encodings.filter((e) => e.kind === 'param').map(entry) };
  }
  return validateEncodings(doc, format);
}

/** Check a document against its layout's schema; a one-line error naming the first problem. */
export function validateEncodings(doc: unknown, format: EncodingsFormat, where = 'encodings'): unknown {
  const r = SCHEMAS[format].safeParse(doc);
  if (!r.success) {
    const i = r.error.issues[0];
    throw new Error(`${where}: ${format} encodings invalid at ${i.path.join('.') || '(root)'}: ${i.message}`);
  }
  return doc;
}
