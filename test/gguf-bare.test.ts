/**
 * Any GGUF, with or without llmc's manifest beside it: `llmc inspect`, `run` and `report` read the
 * model, the tokenizer and the chat template from the file's own metadata. Checked on llmc's GGUF
 * copied alone (the ids must equal the run with its manifest), on a GGUF whose header another
 * writer (@huggingface/gguf) rebuilt with llama.cpp-converter-style metadata, and on a real
 * tokenizer's prompt against transformers' own prompt ids (../shared reference.json); and on a GGUF
 * that llama.cpp's own gguf-py wrote anew (gguf_new_metadata.py, from the llama.cpp source
 * node-llama-cpp ships).
 */
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { buildGgufHeader, gguf, GGUFValueType } from '@huggingface/gguf';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GGML_TYPES, ggufArchSpec, readGgufHeader } from '../backends/gguf/read.js';
import { FIXTURE_PRESETS, generateFixture } from '../fixtures/generate.js';
import { llmcInProcess } from './cli.js';
import { llamaCppGgufPy, ROOT, STORIES } from './gguf-helpers.js';

let tmp: string;
let withManifest: string;
let bare: string;
beforeAll(async () => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-gguf-bare-'));
  withManifest = path.join(tmp, 'stories.gguf');
  const r = await llmcInProcess('compile', STORIES, '--target', 'gguf', '--quant', 'Q8_0', '-o', withManifest);
  expect(r.code, r.stderr).toBe(0);
  mkdirSync(path.join(tmp, 'copy'));
  bare = path.join(tmp, 'copy', 'stories.gguf');
  copyFileSync(withManifest, bare);
}, 60_000);
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const runIds = async (file: string, ...extra: string[]) => {
  const r = await llmcInProcess('run', file, '--prompt-ids', '1,50,100', '-n', '12', '--json', ...extra);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as { prompt_ids: number[]; generated_ids: number[]; text?: string; notes: string[] };
};

describe('a GGUF copied without its manifest', () => {
  it('inspect: the model from its metadata equals the manifest\'s architecture', async () => {
    const r = await llmcInProcess('inspect', bare, '--json');
    expect(r.code, r.stderr).toBe(0);
    const d = JSON.parse(r.stdout);
    const m = JSON.parse(readFileSync(`${withManifest}.llmc-manifest.json`, 'utf8'));
    for (const k of ['modelType', 'hiddenSize', 'intermediateSize', 'numLayers', 'numHeads', 'numKvHeads', 'headDim', 'vocabSize', 'maxPositions', 'tieEmbeddings', 'bosTokenId', 'eosTokenIds']) {
      expect(d.spec[k], k).toEqual(m.arch[k]);
    }
    expect(d.spec.rmsNormEps).toBe(Math.fround(m.arch.rmsNormEps));
    expect(d.tokenizer).toMatchObject({ model: 'llama', tokens: 512, bosTokenId: 1, eosTokenId: 2, addBosToken: true, chatTemplate: null });
    expect(d.types).toHaveProperty('Q8_0');
    const text = await llmcInProcess('inspect', bare);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/no llmc manifest: read from its own metadata/);
    expect(text.stdout).toMatch(/architecture: llama \(llama\), 5 layers, hidden 64, heads 8 \(kv 4\)/);
  });

  it('run: the same ids as the run with the manifest (llama.cpp both times)', async () => {
    const a = await runIds(withManifest);
    const b = await runIds(bare);
    expect(b.generated_ids).toHaveLength(12);
    expect(b.generated_ids).toEqual(a.generated_ids);
    // llmc's placeholder vocabulary (stories260K has no tokenizer) round-trips ids, not text: --prompt is refused.
    const t = await llmcInProcess('run', bare, '--prompt', 'ab', '-n', '2', '--json');
    expect(t.code).toBe(1);
    expect(t.stderr).toMatch(/use --prompt-ids/);
  }, 60_000);

  it('run options llama.cpp cannot honour: one line, exit 2', async () => {
    for (const extra of [['--level', '0.5'], ['--expert-cache', '2'], ['--speculative'], ['--chunk', '4'], ['--engine', 'sim'], ['--verify']]) {
      const r = await llmcInProcess('run', bare, '--prompt-ids', '1', '-n', '2', ...extra);
      expect(r.code, `${extra.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr.trim().split('\n'), extra.join(' ')).toHaveLength(1);
    }
    // With the manifest too: --expert-cache is refused, not ignored.
    const r = await llmcInProcess('run', withManifest, '--prompt-ids', '1', '-n', '2', '--expert-cache', '2');
    expect(r.code).toBe(2);
  });

  it('report: sizes without a source; the quality table with --source; verify has nothing to check against', async () => {
    const md = path.join(tmp, 'bare.md');
    const r = await llmcInProcess('report', bare, '-o', md);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/quality table left out: a GGUF without llmc's manifest names no source checkpoint; give it with --source DIR/);
    expect(readFileSync(md, 'utf8')).toMatch(/\| mlp \| Q8_0 \|/);
    // 2048 held-out tokens (not 16384): the table's presence and a loose budget are what is checked here.
    const q = await llmcInProcess('report', bare, '--json', '--source', STORIES, '--eval-tokens', '2048');
    expect(q.code, q.stderr).toBe(0);
    const quality = (JSON.parse(q.stdout).sections as { id: string; data: { greedyAgreement: number } }[]).find((x) => x.id === 'quality');
    expect(quality?.data.greedyAgreement).toBeGreaterThan(0);
    expect(quality?.data.greedyAgreement).toBeLessThanOrEqual(1);
    // A single-file artifact with its manifest reports too (it used to need a directory).
    const withM = await llmcInProcess('report', withManifest, '-o', path.join(tmp, 'with.md'), '--no-quality');
    expect(withM.code, withM.stderr).toBe(0);
    // llmc check: the quality budgets need the source named; with it they are measured.
    const budgets = path.join(tmp, 'budgets.json');
    writeFileSync(budgets, JSON.stringify({ ppl_delta: { max: 5 } }));
    const noSource = await llmcInProcess('check', bare, budgets);
    expect(noSource.code).toBe(2);
    expect(noSource.stderr.trim().split('\n')).toHaveLength(1);
    const checked = await llmcInProcess('check', bare, budgets, '--source', STORIES, '--eval-tokens', '2048');
    expect(checked.code, checked.stderr).toBe(0);
    const v = await llmcInProcess('verify', bare);
    expect(v.code).toBe(1);
    expect(v.stderr.trim().split('\n')).toHaveLength(1);
  }, 120_000);
});

describe('a GGUF whose header another writer built (@huggingface/gguf), as llama.cpp\'s converter writes it', () => {
  it('inspect and run read it; ids equal llmc\'s own file', async () => {
    const { typedMetadata, tensorInfoByteRange, tensorDataOffset, littleEndian } = await gguf(bare, { allowLocalFile: true, typedMetadata: true });
    const md = { ...typedMetadata } as Record<string, unknown>;
    // The converter writes no llama.vocab_size (llama.cpp counts the tokens) and often a chat template.
    delete md['llama.vocab_size'];
    md['general.name'] = { value: 'Stories 260K (converted)', type: GGUFValueType.STRING };
    md['tokenizer.chat_template'] = { value: "{% for m in messages %}{{ m['content'] }}{% endfor %}", type: GGUFValueType.STRING };
    md.kv_count = { value: BigInt(Object.keys(md).length - 3), type: GGUFValueType.UINT64 };
    const bytes = readFileSync(bare);
    const header = await buildGgufHeader(new Blob([bytes]), md as Parameters<typeof buildGgufHeader>[1], { littleEndian, tensorInfoByteRange });
    const other = path.join(tmp, 'other.gguf');
    writeFileSync(other, Buffer.concat([Buffer.from(await header.arrayBuffer()), bytes.subarray(Number(tensorDataOffset))]));

    const h = await readGgufHeader(other);
    expect(h.metadata.has('llama.vocab_size')).toBe(false);
    const i = await llmcInProcess('inspect', other, '--json');
    expect(i.code, i.stderr).toBe(0);
    const d = JSON.parse(i.stdout);
    expect(d.name).toBe('Stories 260K (converted)');
    expect(d.spec.vocabSize).toBe(512);
    expect(d.tokenizer.chatTemplate).toMatch(/messages/);
    expect((await runIds(other)).generated_ids).toEqual((await runIds(bare)).generated_ids);
  }, 60_000);
});

describe('the model from GGUF metadata, per family', () => {
  it('mixtral and qwen2 fixtures: ggufArchSpec equals the checkpoint\'s spec where the GGUF carries it', async () => {
    for (const arch of ['mixtral', 'qwen2'] as const) {
      const fx = await generateFixture(path.join(tmp, arch), { arch, tokenizer: 'byte-level', dims: FIXTURE_PRESETS.tiny });
      const out = path.join(tmp, `${arch}.gguf`);
      const r = await llmcInProcess('compile', fx.dir, '--target', 'gguf', '--quant', 'F16', '-o', out);
      expect(r.code, r.stderr).toBe(0);
      const s = ggufArchSpec(await readGgufHeader(out), out);
      const want = fx.spec;
      expect(s.modelType).toBe(want.modelType);
      for (const k of ['hiddenSize', 'numLayers', 'numHeads', 'numKvHeads', 'headDim', 'vocabSize', 'maxPositions', 'tieEmbeddings', 'qkvBias'] as const) expect(s[k], `${arch} ${k}`).toEqual(want[k]);
      if (want.moe) expect(s.moe).toMatchObject({ numExperts: want.moe.numExperts, topK: want.moe.topK, expertIntermediateSize: want.moe.expertIntermediateSize, routing: 'softmax-topk-renorm' });
      else expect(s.intermediateSize).toBe(want.intermediateSize);
    }
  }, 120_000);

  it('an architecture llmc does not compile: one line naming it', async () => {
    const bytes = readFileSync(bare);
    const { typedMetadata, tensorInfoByteRange, tensorDataOffset, littleEndian } = await gguf(bare, { allowLocalFile: true, typedMetadata: true });
    const md = { ...typedMetadata, 'general.architecture': { value: 'falcon', type: GGUFValueType.STRING } };
    const header = await buildGgufHeader(new Blob([bytes]), md as Parameters<typeof buildGgufHeader>[1], { littleEndian, tensorInfoByteRange });
    const phi = path.join(tmp, 'phi.gguf');
    writeFileSync(phi, Buffer.concat([Buffer.from(await header.arrayBuffer()), bytes.subarray(Number(tensorDataOffset))]));
    const r = await llmcInProcess('inspect', phi);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/general\.architecture "falcon": llmc reads back llama, qwen2, qwen2moe, .*GGUFs; run this one with llama\.cpp's llama-cli/);
  });

});

describe('llama.cpp\'s own gguf-py', () => {
  let py: ReturnType<typeof llamaCppGgufPy>;
  beforeAll(() => {
    py = llamaCppGgufPy(tmp);
    if ('skip' in py) console.warn(`skipped: ${py.skip}`);
  }, 60_000);
  const python = (args: string[]) => {
    if (!('pythonPath' in py)) throw new Error('unreachable');
    const r = spawnSync('python3', args, { encoding: 'utf8', env: { ...process.env, PYTHONPATH: py.pythonPath } });
    expect(r.status, r.stderr).toBe(0);
    return r.stdout;
  };

  it('every ggml type\'s block geometry and enum value is gguf-py\'s (GGML_QUANT_SIZES)', (ctx) => {
    if ('skip' in py) return ctx.skip();
    const theirs = JSON.parse(python(['-c', 'import gguf, json; print(json.dumps({t.name: [int(t), *s] for t, s in gguf.GGML_QUANT_SIZES.items()}))'])) as Record<string, [number, number, number]>;
    expect(Object.keys(GGML_TYPES).sort()).toEqual(Object.keys(theirs).sort());
    for (const [name, t] of Object.entries(GGML_TYPES)) expect([t.ggmlType, t.blockSize, t.typeSize], name).toEqual(theirs[name]);
  });

  it('a GGUF gguf_new_metadata.py wrote (new name, a chat template, no vocab_size): inspect, run and report as llmc\'s own', async (ctx) => {
    if ('skip' in py) return ctx.skip();
    const out = path.join(tmp, 'by-gguf-py.gguf');
    const script = path.join(tmp, 'llama.cpp/gguf-py/gguf/scripts/gguf_new_metadata.py');
    python([script, bare, out, '--general-name', 'written by gguf-py', '--chat-template', '{{ messages[0].content }}', '--remove-metadata', 'llama.vocab_size', '--force']);
    const i = await llmcInProcess('inspect', out, '--json');
    expect(i.code, i.stderr).toBe(0);
    const d = JSON.parse(i.stdout);
    expect(d.name).toBe('written by gguf-py');
    expect(d.metadata).not.toHaveProperty('llama.vocab_size');
    expect(d.spec.vocabSize).toBe(512);
    expect(d.tokenizer.chatTemplate).toBe('{{ messages[0].content }}');
    expect((await runIds(out)).generated_ids).toEqual((await runIds(bare)).generated_ids);
    const r = await llmcInProcess('report', out, '--json', '--no-quality');
    expect(r.code, r.stderr).toBe(0);
  }, 60_000);
});

const DENSE = path.join(ROOT, '../shared/models/trained/dense-28M');
describe.skipIf(!existsSync(DENSE))('--prompt with a real vocabulary (dense-28M, byte-level BPE)', () => {
  it('llama.cpp tokenizes with the GGUF\'s own vocabulary: the prompt ids of transformers (reference.json), with and without the manifest', async () => {
    const out = path.join(tmp, 'dense.gguf');
    const r = await llmcInProcess('compile', DENSE, '--target', 'gguf', '--quant', 'Q8_0', '-o', out);
    expect(r.code, r.stderr).toBe(0);
    mkdirSync(path.join(tmp, 'dense-copy'));
    const copy = path.join(tmp, 'dense-copy', 'dense.gguf');
    copyFileSync(out, copy);
    const ref = JSON.parse(readFileSync(path.join(DENSE, 'reference.json'), 'utf8')).references as Record<string, { prompt_ids: number[] }>;
    for (const [prompt, { prompt_ids }] of Object.entries(ref)) {
      const runs = [];
      for (const file of [out, copy]) {
        const x = await llmcInProcess('run', file, '--prompt', prompt, '-n', '8', '--json');
        expect(x.code, x.stderr).toBe(0);
        runs.push(JSON.parse(x.stdout));
      }
      expect(runs[0].prompt_ids, prompt).toEqual(prompt_ids);
      expect(runs[1].prompt_ids, prompt).toEqual(prompt_ids);
      expect(runs[1].generated_ids).toEqual(runs[0].generated_ids);
      expect(typeof runs[1].text).toBe('string');
    }
  }, 180_000);
});
if (!existsSync(DENSE)) console.log(`dense-28M --prompt test: skipped (${DENSE} is absent; CI has ../shared)`);
