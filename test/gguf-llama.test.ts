/**
 * GGUF files checked in real llama.cpp (node-llama-cpp's prebuilt CPU binaries):
 *  - stories260K F32: greedy continuation equals reference.json's greedy_ids exactly;
 *  - Q8_0 / Q4_K_M: greedy agreement with F32 printed over 64 tokens. (The first token already
 *    differs: a faithful Q8_0 blk.0.ffn_gate alone flips it, even written as F32 dequantized values.)
 *    What must hold: llama.cpp's logits from the quantized file track an F32 file holding
 *    dequantize(quantize(W)) of every tensor with its chosen type more closely than the source
 *    weights — llama.cpp decodes our blocks into the weights we meant (also for K-quants and
 *    IQ4_NL / IQ4_XS, on a fixture);
 *  - generated Mixtral, Qwen2 and Qwen2-MoE fixtures load and generate; their byte-level
 *    tokenizer (and the SentencePiece-style one), converted to GGUF, tokenize text in llama.cpp as
 *    the textbook BPE over their merges does.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { openCheckpoint, transformSource } from '../src/core/checkpoint/index.js';
import { closeQuantWorkers, dequantize, quantize, type QuantType } from '../src/core/quant/index.js';
import { planGguf } from '../backends/gguf/emit.js';
import { GPT2_PATTERN, toByteChars } from '../src/core/tokenizer/bytelevel.js';
import { loadTokenizer } from '../src/core/tokenizer/index.js';
import { STORIES, agreement, compileGguf, llamaGreedy, llamaLogits, llamaTokenize, relRms } from './gguf-helpers.js';

const reference = JSON.parse(readFileSync(path.join(STORIES, 'reference.json'), 'utf8')) as { prompt_ids: number[]; greedy_ids: number[] };
let tmp: string;
beforeAll(() => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-gguf-llama-'));
});
afterAll(async () => {
  rmSync(tmp, { recursive: true, force: true });
  await closeQuantWorkers();
});

describe('stories260K in llama.cpp', () => {
  let f32Ids: number[] = [];

  it('F32: greedy ids equal reference.json exactly', async () => {
    const { file } = await compileGguf(STORIES, path.join(tmp, 'f32'), { quant: 'F32' });
    f32Ids = await llamaGreedy(file, reference.prompt_ids, 64);
    expect(f32Ids.slice(0, reference.greedy_ids.length)).toEqual(reference.greedy_ids);
  });

  for (const quant of ['Q8_0', 'Q4_K_M']) {
    it(`${quant}: greedy agreement with F32 (printed); logits follow the weights we meant`, async () => {
      const { file } = await compileGguf(STORIES, path.join(tmp, quant), { quant });
      const ids = await llamaGreedy(file, reference.prompt_ids, 64);
      const a = agreement(ids, f32Ids);
      console.log(`stories260K ${quant} vs F32 over 64 greedy tokens: common prefix ${a.prefix}, positional agreement ${(a.positional * 100).toFixed(1)}%`);
      expect(ids).toHaveLength(64);
      const r = await quantizedVsControl(STORIES, quant, path.join(tmp, `${quant}-check`), [...reference.prompt_ids, ...reference.greedy_ids.slice(0, 15)]);
      console.log(`  logits rel. RMS: file vs F32-of-dequantized-weights ${r.vsControl.toFixed(4)}, file vs F32 ${r.vsF32.toFixed(4)}`);
      expect(r.vsControl).toBeLessThan(r.vsF32);
      expect(r.vsControl).toBeLessThan(0.1);
    });
  }
});

describe('K-quants in llama.cpp (llama fixture, 256-wide rows so no fallback)', () => {
  let src: string;
  beforeAll(async () => {
    src = path.join(tmp, 'fx-kq');
    await generateFixture(src, { arch: 'llama', tokenizer: 'none', planted: false, dims: { hiddenSize: 256, intermediateSize: 256, numHeads: 4, numKvHeads: 2, numLayers: 2, vocabSize: 320 } });
  });
  // Together these write Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS tensors.
  for (const quant of ['Q4_K_M', 'Q3_K_M', 'Q2_K', 'IQ4_NL', 'IQ4_XS']) {
    it(`${quant}: llama.cpp's logits are closer to the dequantized weights than to the source`, async () => {
      const r = await quantizedVsControl(src, quant, path.join(tmp, `kq-${quant}`), [1, 5, 9, 40, 41, 42, 100, 7, 300, 3]);
      console.log(`fixture ${quant} ${JSON.stringify(r.typeCounts)}: vs dequantized ${r.vsControl.toFixed(4)}, vs F32 ${r.vsF32.toFixed(4)}`);
      expect(r.vsControl).toBeLessThan(r.vsF32);
    });
  }
});

/**
 * Logits of the quantized GGUF, of an F32 GGUF holding dequantize(quantize(W)) for every tensor with
 * the type the plan chose ("control"), and of the plain F32 GGUF. If llama.cpp reads our blocks as we
 * meant, the file tracks the control (only activation rounding in quantized matmuls separates them),
 * not the unquantized source.
 */
async function quantizedVsControl(srcDir: string, quant: string, dir: string, tokens: number[]) {
  const { file, manifest } = await compileGguf(srcDir, dir, { quant });
  const ck = await openCheckpoint(srcDir);
  try {
    const plan = planGguf(ck, { quant, tensorTypes: [] });
    const typeOf = new Map<string, QuantType>();
    for (const t of plan.tensors) for (const s of t.sources) typeOf.set(s, t.type);
    const control = transformSource(ck, {
      label: `roundtrip ${quant}`,
      paramsHash: quant,
      rewrite: (name, x) => {
        const type = typeOf.get(name) ?? 'F32';
        if (type === 'F32') return x;
        return dequantize(type, quantize(type, x, ck.meta(name)!.shape.at(-1)!), x.length);
      },
    });
    const c = await compileGguf(control, `${dir}-control`, { quant: 'F32' });
    const f = await compileGguf(ck, `${dir}-f32`, { quant: 'F32' });
    const n = ck.spec.vocabSize;
    const [q, cl, fl] = [await llamaLogits(file, tokens, n), await llamaLogits(c.file, tokens, n), await llamaLogits(f.file, tokens, n)];
    const typeCounts = (manifest.targetInfo as { typeCounts: Record<string, number> }).typeCounts;
    return { vsControl: relRms(q, cl), vsF32: relRms(q, fl), typeCounts };
  } finally {
    await ck.close();
  }
}

describe('generated fixtures in llama.cpp', () => {
  for (const arch of ['mixtral', 'qwen2', 'qwen2_moe'] as const) {
    it(`${arch}: loads and generates (F32 and Q8_0)`, async () => {
      const src = path.join(tmp, `fx-${arch}`);
      await generateFixture(src, { arch, tokenizer: 'byte-level' });
      for (const quant of ['F32', 'Q8_0']) {
        const { file, manifest } = await compileGguf(src, path.join(tmp, `fx-${arch}-${quant}`), { quant });
        const info = manifest.targetInfo as { architecture: string; tensors: { name: string; ne: number[] }[] };
        expect(info.architecture).toBe(arch === 'qwen2_moe' ? 'qwen2moe' : arch === 'qwen2' ? 'qwen2' : 'llama');
        if (arch !== 'qwen2') {
          const exps = info.tensors.find((t) => t.name === 'blk.0.ffn_gate_exps.weight');
          expect(exps?.ne).toEqual([64, 64, 4]); // [n_embd, n_ff_exp, n_expert]
        }
        const ids = await llamaGreedy(file, [10, 20, 30, 40], 8);
        expect(ids).toHaveLength(8);
        for (const id of ids) expect(id).toBeGreaterThanOrEqual(0), expect(id).toBeLessThan(512);
        console.log(`${arch} ${quant}: greedy ${JSON.stringify(ids)}`);
      }
    });
  }

  /** llama.cpp's tokenization of `text` from our GGUF equals an independent BPE and llmc's tokenizer. */
  const tokenizerCase = (style: 'byte-level' | 'sentencepiece', arch: 'qwen2' | 'llama', text: string, reference: typeof referenceBpe) => async () => {
    const src = path.join(tmp, `fx-${arch}-${style}`);
    await generateFixture(src, { arch, tokenizer: style });
    const { file } = await compileGguf(src, path.join(tmp, `fx-${arch}-${style}-out`), { quant: 'F32' });
    const tokenizerJson = readFileSync(path.join(src, 'tokenizer.json'), 'utf8');
    const expected = reference(JSON.parse(tokenizerJson), text);
    expect(await llamaTokenize(file, text)).toEqual(expected);
    expect(loadTokenizer(tokenizerJson, readFileSync(path.join(src, 'tokenizer_config.json'), 'utf8')).encode(text, { addBos: false })).toEqual(expected);
  };

  it(
    'byte-level tokenizer: llama.cpp tokenizes text as the Hugging Face BPE does',
    tokenizerCase('byte-level', 'qwen2', 'Once upon a time, a little cat sat on the mat. It was 42 years old!', referenceBpe),
  );

  it(
    'SentencePiece-style tokenizer: llama.cpp tokenizes text as BPE over its merges does',
    tokenizerCase('sentencepiece', 'llama', 'Once upon a time, a little cat sat on the mat. It was 42 years old! Ünïcödé ✓', referenceSpm),
  );
});

type TokenizerJson = { model: { vocab: Record<string, number>; merges: (string | [string, string])[] } };

/** Merge ranks of a tokenizer.json ("a b" → rank). */
function mergeRanks(tj: TokenizerJson): Map<string, number> {
  const rank = new Map<string, number>();
  tj.model.merges.forEach((m, i) => rank.set(Array.isArray(m) ? m.join(' ') : m, i));
  return rank;
}

/** Merge by lowest rank until no known pair is left. */
function bpeMerge(sym: string[], rank: Map<string, number>): string[] {
  for (;;) {
    let best = -1;
    let bestRank = Infinity;
    for (let i = 0; i + 1 < sym.length; i++) {
      const r = rank.get(`${sym[i]} ${sym[i + 1]}`);
      if (r !== undefined && r < bestRank) (bestRank = r), (best = i);
    }
    if (best < 0) return sym;
    sym = [...sym.slice(0, best), sym[best] + sym[best + 1], ...sym.slice(best + 2)];
  }
}

/** SentencePiece-style BPE: "▁" for spaces and in front, merges, unknown characters as <0xNN> bytes. */
function referenceSpm(tj: TokenizerJson, text: string): number[] {
  const rank = mergeRanks(tj);
  const out: number[] = [];
  for (const s of bpeMerge([...('▁' + text.replace(/ /g, '▁'))], rank)) {
    if (s in tj.model.vocab) out.push(tj.model.vocab[s]);
    else for (const b of Buffer.from(s, 'utf8')) out.push(tj.model.vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`]);
  }
  return out;
}

/**
 * The textbook byte-level BPE, written here as the reference: GPT-2 split, bytes → symbols, then
 * repeatedly merge the adjacent pair of lowest merge rank.
 */
function referenceBpe(tj: TokenizerJson, text: string): number[] {
  const rank = mergeRanks(tj);
  const out: number[] = [];
  for (const word of text.match(GPT2_PATTERN) ?? []) {
    for (const s of bpeMerge([...toByteChars(word)], rank)) out.push(tj.model.vocab[s]);
  }
  return out;
}
