/**
 * `llmc report A B`: two artifacts side by side. The tensors it lists as differing are checked
 * against the two GGUF files' own tensor types, read by an independent reader (@huggingface/gguf).
 */
import { gguf } from '@huggingface/gguf';
import { promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { llmcInProcess as llmc } from './cli.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-report-compare-'));
});
afterAll(() => fsp.rm(tmp, { recursive: true, force: true }));

type Section = { id: string; data: Record<string, unknown> };

describe('llmc report A B', () => {
  it('two GGUFs: sizes, and exactly the tensors whose type differs in the files', async () => {
    const [a, b] = [path.join(tmp, 'q8.gguf'), path.join(tmp, 'q4km.gguf')];
    expect((await llmc('compile', STORIES, '--target', 'gguf', '--quant', 'Q8_0', '-o', a)).code).toBe(0);
    expect((await llmc('compile', STORIES, '--target', 'gguf', '--quant', 'Q4_K_M', '--tensor-type', 'attn_q=Q8_0', '-o', b)).code).toBe(0);
    const r = await llmc('report', a, b, '--json', '--no-quality');
    expect(r.code, r.stderr).toBe(0);
    const sections = JSON.parse(r.stdout).sections as Section[];
    expect(sections.map((s) => s.id)).toEqual(['side-by-side', 'sizes', 'tensor-formats']);
    const side = sections[0].data as { a: { bytes: number; quant: string }; b: { bytes: number; quant: string }; sameSource: boolean };
    expect([side.a.bytes, side.b.bytes]).toEqual([(await fsp.stat(a)).size, (await fsp.stat(b)).size]);
    expect([side.a.quant, side.b.quant, side.sameSource]).toEqual(['Q8_0', 'Q4_K_M', true]);

    // The reference: each file's tensor types, by GGUF name, mapped to the source tensor through A's manifest.
    const types = async (file: string) => new Map((await gguf(file, { allowLocalFile: true })).tensorInfos.map((t) => [t.name, t.dtype]));
    const [ta, tb] = [await types(a), await types(b)];
    const sourceOf = new Map((JSON.parse(readFileSync(`${a}.llmc-manifest.json`, 'utf8')).targetInfo.tensors as { name: string; source: string }[]).map((t) => [t.name, t.source]));
    const expected = [...ta.keys()].filter((n) => ta.get(n) !== tb.get(n)).map((n) => sourceOf.get(n)).sort();
    const formats = sections[2].data as { tensors: number; differ: { tensor: string; a: string; b: string }[] };
    expect(formats.tensors).toBe(ta.size);
    expect(formats.differ.map((d) => d.tensor)).toEqual(expected);
    expect(expected.length).toBeGreaterThan(5);
    expect(formats.differ.find((d) => /layers\.0\.self_attn\.q_proj/.test(d.tensor))).toBeUndefined(); // Q8_0 in both
  });

  it('speed side by side: each artifact decoded on its own runner, 64 tokens timed one by one', async () => {
    const [a, b] = [path.join(tmp, 'speed-q8.gguf'), path.join(tmp, 'speed-ts')];
    expect((await llmc('compile', STORIES, '--target', 'gguf', '--quant', 'Q8_0', '--no-eval', '-o', a)).code).toBe(0);
    expect((await llmc('compile', STORIES, '--target', 'ts', '--quant', 'Q8_0', '--no-eval', '-o', b)).code).toBe(0);
    const r = await llmc('report', a, b, '--json', '--eval-tokens', '255');
    expect(r.code, r.stderr).toBe(0);
    const sections = JSON.parse(r.stdout).sections as Section[];
    expect(sections.map((s) => s.id)).toEqual(['side-by-side', 'sizes', 'quality', 'speed', 'tensor-formats']);
    const speed = sections[3].data as Record<'a' | 'b', { executor: string; tokensPerSecond: number; tokenMs: number[] }>;
    expect([speed.a.executor, speed.b.executor]).toEqual(['llama.cpp', 'ts-runtime']);
    for (const s of [speed.a, speed.b]) {
      expect(s.tokenMs).toHaveLength(64); // stories260K never stops early from BOS within 64 tokens
      expect(s.tokenMs.every((ms) => ms > 0)).toBe(true);
      // the per-token times add up to the run that gave tokens/s (less what generate does after the last token)
      const total = s.tokenMs.reduce((x, y) => x + y, 0) / 1000;
      expect(64 / total / s.tokensPerSecond).toBeGreaterThan(0.999);
      expect(64 / total / s.tokensPerSecond).toBeLessThan(1.05);
    }
  });

  it('formats by another name are the same (cuda fp16 = hf F16); a target without per-tensor formats says so; a checkpoint is refused (exit 1)', async () => {
    const cuda = path.join(tmp, 'cuda');
    const ts = path.join(tmp, 'ts');
    const hf = path.join(tmp, 'hf');
    expect((await llmc('compile', STORIES, '--target', 'cuda', '--quant', 'fp16', '-o', cuda)).code).toBe(0);
    expect((await llmc('compile', STORIES, '--target', 'ts', '--quant', 'F16', '-o', ts)).code).toBe(0);
    expect((await llmc('compile', STORIES, '--target', 'hf', '-o', hf)).code).toBe(0);
    const r = await llmc('report', cuda, ts, '--json', '--no-quality');
    const differ = (JSON.parse(r.stdout).sections as Section[]).find((s) => s.id === 'tensor-formats')!.data.differ as { tensor: string; a: string | null; b: string }[];
    // Only tensors cuda keeps in its own precision or does not record (norms) differ, never fp16 against F16.
    expect(differ.filter((d) => d.a === 'fp16' && d.b === 'F16')).toEqual([]);
    const md = path.join(tmp, 'cmp.md');
    expect((await llmc('report', ts, hf, '-o', md, '--no-quality')).code).toBe(0);
    expect(readFileSync(md, 'utf8')).toMatch(/Not compared: hf \(hf\) records no format per tensor\./);
    const profile = await llmc('report', ts, STORIES, '--json');
    expect(profile.code).toBe(1);
  });
});
