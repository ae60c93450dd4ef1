/**
 * Error messages that cannot fail and JSON read with limits: summarize() on any value is short and
 * never throws; parseJson refuses deep nesting and oversize text in one line before JSON.parse; each
 * reader that crashed on a value nested 100,000 levels ("Maximum call stack size exceeded") now
 * says "nested deeper than 64 levels".
 */
import fc from 'fast-check';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LlmcError, summarize } from '../src/core/errors.js';
import { JSON_MAX_DEPTH, jsonDepthExceeds, parseJson } from '../src/core/util/json.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { parseManifest } from '../src/exec/runtime/load.js';
import { parseManifestText } from '../src/app/artifact.js';
import { readLatencyFile } from '../passes/tree-search/latency-file.js';
import { loadTokenizer } from '../src/core/tokenizer/index.js';
import { chatTemplateOf, renderChat } from '../src/core/tokenizer/chat.js';
import { ensureBuilt } from './build-once.js';
import { llmcInProcess } from './cli.js';

const ROOT = path.resolve(__dirname, '..');
const STORIES = path.join(ROOT, 'fixtures/models/stories260K');
const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
const deepObj = (n: number) => '{"a":'.repeat(n) + '1' + '}'.repeat(n);

/** Nesting depth of a parsed value, by brute force (the reference for the linear scan). */
function depthOf(v: unknown): number {
  if (Array.isArray(v)) return 1 + Math.max(0, ...v.map(depthOf));
  if (v && typeof v === 'object') return 1 + Math.max(0, ...Object.values(v).map(depthOf));
  return 0;
}

describe('summarize', () => {
  it('any value: a string of at most the limit, never a throw', () => {
    fc.assert(
      fc.property(fc.anything({ withBigInt: true, withTypedArray: true, withMap: true, withNullPrototype: true, maxDepth: 6 }), fc.integer({ min: 8, max: 200 }), (v, max) => {
        const s = summarize(v, max);
        expect(typeof s).toBe('string');
        expect(s.length).toBeLessThanOrEqual(max);
      }),
      { seed: 36, numRuns: 2000 },
    );
  });
  it('small values read as JSON; deep and long ones are cut', () => {
    expect(summarize('x')).toBe('"x"');
    expect(summarize({ a: [1, 2] })).toBe('{"a": [1, 2]}');
    expect(summarize(undefined)).toBe('undefined');
    expect(summarize(2n ** 70n)).toBe('1180591620717411303424n');
    expect(summarize([[[[1]]]])).toBe('[[[…]]]');
    expect(summarize('y'.repeat(1000), 20)).toHaveLength(20);
    let v: unknown = 1;
    for (let i = 0; i < 200_000; i++) v = [v];
    expect(summarize(v)).toBe('[[[…]]]');
  });
});

describe('parseJson', () => {
  it('the depth scan agrees with the parsed value\'s depth (strings with brackets and escapes included)', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 8 }), fc.integer({ min: 0, max: 8 }), (v, max) => {
        const text = JSON.stringify(v);
        expect(jsonDepthExceeds(text, max)).toBe(depthOf(v) > max);
      }),
      { seed: 36, numRuns: 3000 },
    );
    expect(jsonDepthExceeds('["[[[\\"[[["]', 1)).toBe(false);
  });
  it('deep nesting and oversize text: one LlmcError naming the file, before JSON.parse', () => {
    for (const text of [deep(200_000), deepObj(100_000), deep(JSON_MAX_DEPTH + 1)]) {
      expect(() => parseJson(text, 'f.json')).toThrow(LlmcError);
      expect(() => parseJson(text, 'f.json')).toThrow(`nested deeper than ${JSON_MAX_DEPTH} levels`);
    }
    expect(parseJson(deep(JSON_MAX_DEPTH), 'f.json')).toBeTruthy();
    expect(() => parseJson('[1, 2]', 'f.json', { maxBytes: 4 })).toThrow(/^is 6 bytes, over the 4 bytes llmc reads for this file$/);
    expect(() => parseJson('[1, 2]', 'f.json', { maxBytes: 4 })).toThrow(expect.objectContaining({ name: 'LlmcError', file: 'f.json', exitCode: 1 }));
    expect(() => parseJson('{', 'f.json')).toThrow(/not valid JSON/);
  });
});

describe('readers given a value nested 100,000 levels: one line, no stack overflow', () => {
  let tmp: string;
  beforeAll(() => {
    ensureBuilt();
    tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-bounded-json-'));
  });
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));
  const config = readFileSync(path.join(STORIES, 'config.json'), 'utf8');
  const nested = (text: string) => text.replace(/^\{/, `{"x": ${deep(100_000)},`);

  it('config.json (llmc inspect)', async () => {
    const d = path.join(tmp, 'cfg');
    cpSync(STORIES, d, { recursive: true });
    writeFileSync(path.join(d, 'config.json'), nested(config));
    const r = await llmcInProcess('inspect', d);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/config\.json: not valid JSON for llmc: nested deeper than 64 levels/);
  });
  it('a safetensors header', async () => {
    const d = path.join(tmp, 'st');
    cpSync(STORIES, d, { recursive: true });
    const st = readFileSync(path.join(STORIES, 'model.safetensors'));
    const n = Number(st.readBigUInt64LE(0));
    const h = Buffer.from(nested(st.subarray(8, 8 + n).toString()));
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(h.length));
    writeFileSync(path.join(d, 'model.safetensors'), Buffer.concat([len, h, st.subarray(8 + n)]));
    await expect(openCheckpoint(d)).rejects.toThrow(/corrupt safetensors header: not valid JSON for llmc: nested deeper than 64 levels/);
  });
  it('a ts manifest (runtime and CLI readers)', () => {
    const m = nested(JSON.stringify({ format: 'llmc-artifact', version: 1 }));
    expect(() => parseManifest(m)).toThrow(/nested deeper than 64 levels/);
    expect(() => parseManifestText(m, 'llmc-manifest.json')).toThrow(/nested deeper than 64 levels/);
  });
  it('a tokenizer.json', () => {
    expect(() => loadTokenizer(nested('{}'), '{}')).toThrow(/nested deeper than 64 levels/);
  });
  it('tokenizer_config.json\'s chat template (run --chat): nested, null, an array: one LlmcError each', () => {
    for (const [text, msg] of [[nested('{}'), /nested deeper than 64 levels/], ['null', /not a JSON object/], ['[]', /not a JSON object/]] as const) {
      expect(() => chatTemplateOf(text, 'tokenizer_config.json')).toThrow(LlmcError);
      expect(() => chatTemplateOf(text, 'tokenizer_config.json')).toThrow(msg);
      expect(() => renderChat('{{ messages[0].content }}', [{ role: 'user', content: 'hi' }], text, 'tokenizer_config.json')).toThrow(msg);
    }
    expect(chatTemplateOf('{"chat_template":"x"}', 'tokenizer_config.json')).toBe('x');
  });
  it('a tree-search latency file', () => {
    const f = path.join(tmp, 'lat.json');
    writeFileSync(f, nested('{}'));
    expect(() => readLatencyFile(f)).toThrow(/latency file .*lat\.json: not valid JSON for llmc: nested deeper than 64 levels/);
  });
  it('a message about a hostile value is short: a 1 MB string as model_type', async () => {
    const d = path.join(tmp, 'mt');
    cpSync(STORIES, d, { recursive: true });
    writeFileSync(path.join(d, 'config.json'), JSON.stringify({ ...JSON.parse(config), model_type: 'z'.repeat(1 << 20) }));
    const r = await llmcInProcess('inspect', d);
    expect(r.code).toBe(1);
    expect(r.stderr.length).toBeLessThan(600);
  });
});
