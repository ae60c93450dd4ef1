/**
 * One exit-code rule for `llmc run`'s model-specific options: asking a model for what it does not
 * offer is a usage error (exit 2) on every target, checked before anything loads.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHECKPOINT_OFFER, checkRunOptions, type RunOffer } from '../src/core/pipeline/run-usage.js';
import { UsageError } from '../src/core/errors.js';
import { llmcInProcess as llmc } from './cli.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');

describe('checkRunOptions', () => {
  const none: RunOffer = { ...CHECKPOINT_OFFER, what: 'a thing' };
  const all: RunOffer = { what: 'everything', levels: true, chunks: true, speculative: true, expertCache: true, engines: ['sim', 'onnxruntime'] };
  const experts = { capacity: 2 };
  const cases: [string, Parameters<typeof checkRunOptions>[1], RegExp][] = [
    ['--level', { level: '0.5' }, /^--level needs an artifact with elastic levels .*; this is a thing$/],
    ['--chunk', { chunk: 16 }, /^--chunk needs .*chunk-partition.*; this is a thing$/],
    ['--speculative', { speculative: {} }, /^--speculative needs .*tree-search.*; this is a thing$/],
    ['--expert-cache', { experts }, /^--expert-cache needs .*mixture-of-experts/],
    ['--engine', { engine: 'onnxruntime' }, /^--engine onnxruntime: a thing runs on one engine, with no choice$/],
  ];
  it.each(cases)('%s on a model that does not offer it is a UsageError (exit 2)', (_flag, o, message) => {
    let err: unknown;
    try {
      checkRunOptions(none, o);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(UsageError);
    expect((err as UsageError).exitCode).toBe(2);
    expect((err as Error).message).toMatch(message);
    expect(() => checkRunOptions(all, o)).not.toThrow();
  });

  it('options that do not combine are refused even where each alone is offered', () => {
    for (const o of [{ chunk: 8, level: 'L0' }, { chunk: 8, speculative: {} }, { chunk: 'auto' as const, experts }]) {
      expect(() => checkRunOptions(all, o)).toThrow(/^--chunk and --(level|speculative|expert-cache) do not combine$/);
    }
    expect(() => checkRunOptions(all, { speculative: {}, level: 'L0' })).toThrow(/--speculative and --level do not combine/);
    expect(() => checkRunOptions(all, { speculative: {}, experts })).toThrow(/^--speculative and --expert-cache do not combine/);
    expect(() => checkRunOptions(none, {})).not.toThrow();
  });
});

describe('llmc run: the same misuse exits 2 on every target', () => {
  let tmp: string;
  const artifacts: Record<string, string> = {};
  beforeAll(async () => {
    tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-run-usage-'));
    for (const [target, extra] of [['hf', []], ['cuda', []], ['ts', []], ['gguf', []], ['qnn', ['--passes', 'outliers']], ['tensorrt-llm', []]] as const) {
      const out = path.join(tmp, target === 'gguf' ? 'm.gguf' : target);
      const r = await llmc('compile', STORIES, '--target', target, ...extra, '-o', out);
      expect(r.code, r.stderr).toBe(0);
      artifacts[target] = out;
    }
  }, 120_000);
  afterAll(() => fsp.rm(tmp, { recursive: true, force: true }));

  it.each(['checkpoint', 'hf', 'cuda', 'ts', 'gguf', 'qnn'])('--level on a one-model %s: exit 2, one line naming what it needs', async (kind) => {
    const model = kind === 'checkpoint' ? STORIES : artifacts[kind];
    const r = await llmc('run', model, '--prompt-ids', '1', '-n', '2', '--level', '0.5');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^llmc: --level needs an artifact with elastic levels \(llmc compile --passes reorder .*\); this is (a|an) .*\n$/);
  });

  it.each(['hf', 'cuda', 'gguf'])('--speculative, --chunk and --expert-cache on %s: exit 2 (not silently ignored)', async (kind) => {
    for (const flags of [['--speculative'], ['--chunk', '4'], ['--expert-cache', '2']]) {
      const r = await llmc('run', artifacts[kind], '--prompt-ids', '1', '-n', '2', ...flags);
      expect(r.code, `${kind} ${flags.join(' ')}`).toBe(2);
      expect(r.stderr).toMatch(new RegExp(`^llmc: ${flags[0]} needs .*; this is an? ${kind} artifact\\n$`));
    }
  });

  it.each(['hf', 'cuda', 'gguf'])('llmc check --level on a one-model %s: the same usage error, exit 2', async (kind) => {
    const budgets = path.join(tmp, 'budgets.json');
    await fsp.writeFile(budgets, JSON.stringify({ ppl_delta: { max: 1000 } }));
    const r = await llmc('check', artifacts[kind], budgets, '--level', '0.5', '--cache-dir', path.join(tmp, 'cache'));
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^llmc: --level needs an artifact with elastic levels .*; this is an? .* artifact\n$/);
  });

  it('an artifact llmc cannot run itself (tensorrt-llm) is a usage error too', async () => {
    const r = await llmc('run', artifacts['tensorrt-llm'], '--prompt-ids', '1', '-n', '2');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^llmc: llmc cannot run tensorrt-llm artifacts itself/);
  });
});
