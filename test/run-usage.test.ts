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
import { RUN_CATALOG } from '../src/app/artifact.js';
import { planCompile } from '../src/app/compile/plan.js';
import { TARGETS } from '../backends/index.js';
import { checkModelLowered, modelFeatures } from '../src/core/pipeline/capabilities.js';
import { GRAPH_FEATURES } from '../src/core/pipeline/target.js';
import type { ArchSpec } from '../src/core/arch/types.js';
import { exampleSpec } from '../src/core/arch/example.js';
import type { Level, Manifest } from '../src/core/records/index.js';
import { llmcInProcess as llmc } from './cli.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');

describe('checkRunOptions', () => {
  const none: RunOffer = { ...CHECKPOINT_OFFER, what: 'a thing' };
  const all: RunOffer = { what: 'everything', levels: true, chunks: true, speculative: true, expertCache: true, engines: ['sim', 'onnxruntime'], kvTypes: ['f32', 'f16', 'q8_0'] };
  const experts = { capacity: 2 };
  const cases: [string, Parameters<typeof checkRunOptions>[1], RegExp][] = [
    ['--level', { level: '0.5' }, /^--level needs an artifact with elastic levels .*; this is a thing$/],
    // The passes and targets a refusal names come from the registries: the passes that write the
    // record, the targets whose capabilities declare the feature.
    ['--chunk', { chunk: 16 }, /^--chunk needs an artifact with chunk graphs \(llmc compile --passes chunk-partition --target ts, cuda or qnn\); this is a thing$/],
    ['--speculative', { speculative: {} }, /^--speculative needs an artifact with a verification tree \(llmc compile --passes tree-search --target ts\); this is a thing$/],
    ['--expert-cache', { experts }, /^--expert-cache needs an artifact of a mixture-of-experts model \(llmc compile --target ts\); this is a thing$/],
    ['--engine', { engine: 'onnxruntime' }, /^--engine onnxruntime: a thing runs on one engine, with no choice$/],
    ['--kv-type', { kvType: 'q8_0' }, /^--kv-type q8_0: the runner of a thing has no choice of KV cache type \(targets that do: (ts, gguf|gguf, ts)\)$/],
  ];
  it.each(cases)('%s on a model that does not offer it is a UsageError (exit 2)', (_flag, o, message) => {
    let err: unknown;
    try {
      checkRunOptions(none, o, RUN_CATALOG);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(UsageError);
    expect((err as UsageError).exitCode).toBe(2);
    expect((err as Error).message).toMatch(message);
    expect(() => checkRunOptions(all, o, RUN_CATALOG)).not.toThrow();
  });

  it('options that do not combine are refused even where each alone is offered', () => {
    for (const o of [{ chunk: 8, level: 'L0' }, { chunk: 8, speculative: {} }, { chunk: 'auto' as const, experts }]) {
      expect(() => checkRunOptions(all, o, RUN_CATALOG)).toThrow(/^--chunk and --(level|speculative|expert-cache) do not combine$/);
    }
    expect(() => checkRunOptions(all, { speculative: {}, level: 'L0' }, RUN_CATALOG)).toThrow(/--speculative and --level do not combine/);
    expect(() => checkRunOptions(all, { speculative: {}, experts }, RUN_CATALOG)).toThrow(/^--speculative and --expert-cache do not combine/);
    expect(() => checkRunOptions(none, {}, RUN_CATALOG)).not.toThrow();
  });
});

describe('declared capabilities: each target declares what it lowers and runs, checked once', () => {
  const refusal = (f: () => unknown) => {
    try {
      f();
    } catch (e) {
      expect(e).toBeInstanceOf(UsageError);
      expect((e as UsageError).exitCode).toBe(2);
      return (e as Error).message;
    }
    throw new Error('not refused');
  };

  it('every target declares every graph feature', () => {
    for (const t of TARGETS) expect(Object.keys(t.capabilities.lowers).sort(), t.name).toEqual(Object.keys(GRAPH_FEATURES).sort());
  });

  it('the pass manager refuses a pass whose graph feature the target does not lower (tree-search on cuda)', () => {
    expect(refusal(() => planCompile({ target: 'cuda', passes: ['tree-search'] }))).toBe(
      "--target cuda does not lower tree attention masks (tree-search's speculative verification tree), which pass tree-search needs (targets that do: ts)",
    );
    expect(refusal(() => planCompile({ target: 'hf', passes: ['chunk-partition'] }))).toMatch(/^--target hf does not lower fixed-shape prompt-chunk graphs .*, which pass chunk-partition needs \(targets that do: ts, cuda, qnn\)$/);
    expect(refusal(() => planCompile({ target: 'gguf', passes: ['outliers'] }))).toMatch(/^--target gguf does not lower shadow outlier execution .*, which pass outliers needs \(targets that do: qnn\)$/);
    expect(() => planCompile({ target: 'ts', passes: ['tree-search'], opts: { 'tree-search.draftSkip': '1' } })).not.toThrow();
  });

  it("a model's own features: refused where the target does not lower them, with its reason; approximated ones pass (the target notes them)", () => {
    const spec = (over: Partial<ArchSpec>): ArchSpec => ({ ...exampleSpec('mistral'), ...over });
    const target = (name: string) => TARGETS.find((t) => t.name === name)!;
    expect(modelFeatures(spec({ slidingWindow: 8 }))).toEqual(['sliding-window']);
    const moe: ArchSpec['moe'] = { routing: 'softmax-topk-renorm', numExperts: 4, topK: 2, expertIntermediateSize: 8, sharedExpertIntermediateSize: null, denseLayers: [] };
    expect(modelFeatures(spec({ moe }))).toEqual(['moe']);
    expect(refusal(() => checkModelLowered(spec({ moe }), target('qnn'), TARGETS))).toMatch(/^--target qnn does not lower mixture-of-experts layers, which this mistral model has.*\(targets that do: [a-z, -]*tensorrt-llm[a-z, -]*\)$/);
    expect(() => checkModelLowered(spec({ slidingWindow: 8 }), target('tensorrt-llm'), TARGETS)).not.toThrow();
    expect(() => checkModelLowered(spec({ slidingWindow: 8 }), target('gguf'), TARGETS)).not.toThrow();
    expect(() => checkModelLowered(spec({ slidingWindow: 8 }), target('cuda'), TARGETS)).not.toThrow();
    expect(() => checkModelLowered(spec({}), target('tensorrt-llm'), TARGETS)).not.toThrow();
    // The targets named take the model: olmoe's experts are lowered by tensorrt-llm and gguf-levels too,
    // but TensorRT-LLM has no olmoe and llama.cpp loads no narrower olmoe, so neither is suggested.
    const hint = refusal(() => checkModelLowered(exampleSpec('olmoe'), target('qnn'), TARGETS)).match(/\(targets that do: ([a-z, -]+)\)$/)![1].split(', ');
    expect(hint).toContain('cuda');
    expect(hint).toContain('gguf');
    expect(hint).not.toContain('tensorrt-llm');
    expect(hint).not.toContain('gguf-levels');
    expect(refusal(() => checkModelLowered(exampleSpec('mixtral'), target('qnn'), TARGETS))).toMatch(/tensorrt-llm/);
  });

  it('llmc list targets shows what each target runs and lowers, from the declarations', async () => {
    const list = (await llmc('list', 'targets')).stdout.replace(/\s+/g, ' ');
    expect(list).toContain('cuda: ONNX decoder');
    expect(list).toContain('llmc run: --level (per-layer widths), --chunk lowers: moe, sliding-window, chunk-graphs; refuses tree-mask, shadow-outliers');
    expect(list).toContain("lowers: moe; approximates sliding-window (llama.cpp's llama architecture attends to the whole context)");
    expect(list).toContain('llmc run: llmc does not run these artifacts itself lowers: moe, sliding-window; refuses tree-mask, chunk-graphs, shadow-outliers');
  });

  it("a level's exact bytes come from its target's declaration (gguf-levels: the level's own file), not from the CLI knowing targets", () => {
    const level = (id: string) => ({ id, nominal: 0.5, paramFrac: 0.5, file: `${id}/model.gguf`, kvGroups: 1, heads: 2, ffn: 8, quant: 'F16', adaptersMerged: false });
    const manifest = { target: 'gguf-levels', targetInfo: { format: 'gguf-levels', widths: 'uniform', levels: [level('L0'), level('L1')] }, files: [{ path: 'L0/model.gguf', size: 123 }, { path: 'L1/model.gguf', size: 456 }] } as unknown as Manifest;
    const gl = TARGETS.find((t) => t.name === 'gguf-levels')!;
    expect(gl.levelBytes!(manifest, { id: 'L1' } as Level)).toBe(456);
    expect(TARGETS.filter((t) => t.levelBytes).map((t) => t.name)).toEqual(['gguf-levels', 'hf', 'ts']);
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
