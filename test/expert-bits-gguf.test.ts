/**
 * expert-bits with the gguf target, which stacks a layer's experts in one tensor of one type
 * (capabilities.perExpertFormats false): the pass writes the best layer-proj plan, says so in the
 * compile output and the record with what a per-expert plan would save, and real llama.cpp
 * (node-llama-cpp) runs that plan: the file's stacked tensors have the planned ggml types, and
 * llama.cpp's logits follow llmc's TS runtime on a ts artifact of the same plan.
 * Exact greedy equality is not asserted: llama.cpp quantizes activations to 8 bits inside its
 * quantized matmuls (even Q8_0 experts alone move greedy ids on this model), so the test asserts
 * its logits are several times closer to the planned weights' than to the unquantized model's.
 */
import { gguf } from '@huggingface/gguf';
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { upcycleToMixtral } from '../fixtures/upcycle.js';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { EXPERT_TABLE, findRecord } from '../src/core/records/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { agreement, llamaGreedy, llamaLogits, relRms } from './gguf-helpers.js';
import { llmcInProcess } from './cli.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
let src: Checkpoint;
const opts = { calib: '4', calibLength: '32', heldOut: '4', budgetBpw: '5.5', formats: 'Q2_K,Q4_0,Q4_K,Q8_0' };

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-expert-gguf-'));
  src = await openCheckpoint((await upcycleToMixtral(STORIES, path.join(tmp, 'model'), { experts: 4 })).dir);
});
afterAll(async () => {
  await src?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

const build = async (target: 'gguf' | 'ts', out: string, extra: Record<string, string> = {}) => {
  const notes: string[] = [];
  const manifest = await compile({
    source: src,
    target,
    outDir: out,
    passes: target === 'gguf' || extra.granularity ? [{ name: 'expert-bits', options: { ...opts, ...extra } }] : [],
    quant: 'F32',
    progress: silentProgress,
    note: (m) => notes.push(m),
    cacheDir: path.join(tmp, 'cache'),
  });
  return { manifest, notes };
};

describe('expert-bits → gguf', () => {
  it('writes the best layer-proj plan, says so, records what per-expert formats would save; llama.cpp runs it', async () => {
    const g = await build('gguf', path.join(tmp, 'gguf'));
    const record = findRecord(g.manifest.passes, EXPERT_TABLE)!;
    expect(record.granularity).toBe('layer-proj');
    expect(g.notes.join('\n')).toMatch(/target gguf stacks each layer's experts in one tensor of one type: the plan written is per layer and projection \(layer-proj\)/);
    expect(g.notes.join('\n')).toMatch(/a per-expert plan of the same \d+ bytes would lose/);
    expect(record.perExpert).not.toBeNull();
    expect(record.perExpert!.plan.bytes).toBeLessThanOrEqual(record.plan.bytes);
    expect(record.plan.bytes).toBeLessThanOrEqual(record.budget.bytes!);

    // The file's stacked expert tensors carry the plan's types.
    const file = path.join(tmp, 'gguf', 'model.gguf');
    const { tensorInfos } = await gguf(file, { allowLocalFile: true });
    const TYPE: Record<number, string> = { 0: 'F32', 1: 'F16', 2: 'Q4_0', 6: 'Q5_0', 8: 'Q8_0', 10: 'Q2_K', 11: 'Q3_K', 12: 'Q4_K', 14: 'Q6_K' };
    const proj = { gate: 'ffn_gate_exps', up: 'ffn_up_exps', down: 'ffn_down_exps' } as const;
    for (const it of record.items) {
      const [layer, , p] = it.key.split('.');
      const info = tensorInfos.find((t) => t.name === `blk.${layer}.${proj[p as keyof typeof proj]}.weight`)!;
      expect(TYPE[info.dtype]).toBe(it.choices[it.chosen].written[0]);
    }
    expect(new Set(record.items.map((it) => it.choices[it.chosen].written[0])).size).toBeGreaterThan(1);

    // The same plan as a ts artifact (layer-proj on ts measures and decides the same), and the model unquantized.
    const t = await build('ts', path.join(tmp, 'ts'), { granularity: 'layer-proj' });
    const same = findRecord(t.manifest.passes, EXPERT_TABLE)!;
    expect(same.items.map((i) => i.chosen)).toEqual(record.items.map((i) => i.chosen));
    await build('ts', path.join(tmp, 'f32'));
    const ours = await loadDir(path.join(tmp, 'ts'));
    const full = await loadDir(path.join(tmp, 'f32'));
    const seq = [1, 461, 461, 401, 401, 401, 461, 378, 458, 461, 458, 458, 461, 401, 360, 362, 340, 266, 424, 369];
    const rows = (m: typeof ours) => {
      const all = m.forward(seq);
      return seq.map((_, p) => all.slice(p * 512, (p + 1) * 512));
    };
    const theirs = await llamaLogits(file, seq, 512);
    const vsPlan = relRms(theirs, rows(ours));
    const vsFull = relRms(theirs, rows(full));
    expect(vsPlan).toBeLessThan(0.1);
    expect(vsPlan * 3).toBeLessThan(vsFull);
    const greedy = await llamaGreedy(file, [1], 24);
    const mine: number[] = [];
    for await (const id of ours.generate([1], { maxTokens: 24, stopTokens: [] })) mine.push(id);
    const a = agreement(greedy, mine);
    console.log(`llama.cpp vs llmc run on the layer-proj plan: logits relRms ${vsPlan.toExponential(2)} (vs unquantized ${vsFull.toExponential(2)}); greedy prefix ${a.prefix}/24, positional ${a.positional.toFixed(2)}`);
    expect(greedy[0]).toBe(mine[0]);
  });

  it('maxLoss is accepted on the written GGUF run by llama.cpp; run options llama.cpp cannot honour on it are refused (exit 2)', async () => {
    const g = await build('gguf', path.join(tmp, 'gguf-maxloss'), { budgetBpw: undefined as unknown as string, maxLoss: '0.1', acceptance: '8' });
    const a = findRecord(g.manifest.passes, EXPERT_TABLE)!.artifact!;
    expect(a).toMatchObject({ target: 'gguf', engine: 'llama.cpp', sequences: 8, reference: 'F32' });
    expect(a.upperBound).toBeLessThanOrEqual(0.1);
    expect(a.rounds.at(-1)!.accepted).toBe(true);
    console.log(`gguf maxLoss=0.1 on llama.cpp: ${a.rounds.map((r) => `held-out ${r.heldOutLoss.toFixed(4)} → artifact ${r.loss.toFixed(4)} (bound ${r.upperBound.toFixed(4)})`).join('; ')}`);
    const file = path.join(tmp, 'gguf-maxloss');
    for (const flags of [['--expert-cache', '2'], ['--expert-cache', '2', '--expert-policy', 'edgemoe'], ['--speculative'], ['--chunk', '4'], ['--level', '0.5']]) {
      const r = await llmcInProcess('run', file, '--prompt-ids', '1', '-n', '2', ...flags);
      expect(r.code, flags.join(' ')).toBe(2);
      expect(r.stderr).toMatch(new RegExp(`^llmc: ${flags[0]} needs .*; this is a gguf artifact\\n$`));
    }
  }, 120_000);
});

