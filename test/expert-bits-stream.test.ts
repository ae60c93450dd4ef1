/**
 * expert-bits' measurements layer-streamed (src/exec/stream; forced here, automatic above 1 GiB of
 * float32 weights) against the whole-model Engine, the independent reference: routing (router
 * logits, MoE inputs), the teacher-forced KL of every item and candidate (force-routed experts
 * included) and held-out perplexities, to float32 rounding; on the fixtures the whole pass's
 * decisions are the same. test/expert-bits-stream-moe.test.ts checks moe-8x.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { ts } from '../backends/ts/index.js';
import { analyzeExpertBits } from '../passes/expert-bits/run.js';
import { parseExpertBitsOptions } from '../passes/expert-bits/options.js';
import { expertsOf, moeLayers } from '../passes/expert-bits/items.js';
import { Lab, layerKl } from '../passes/expert-bits/measure.js';
import type { QuantType } from '../src/core/quant/types.js';

let tmp: string;
const sources: { close(): Promise<void> }[] = [];
const open = async (dir: string) => {
  const s = await openCheckpoint(dir);
  sources.push(s);
  return s;
};

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-expert-bits-stream-'));
});
afterAll(async () => {
  for (const s of sources) await s.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

const close = (a: number, b: number, rel = 1e-4, abs = 1e-9) => Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b)) + abs;

describe('the whole pass, streamed and whole-graph', () => {
  for (const arch of ['mixtral', 'qwen2_moe'] as const) {
    it(`${arch} fixture: the same sensitivities, routing, held-out losses and plan`, async () => {
      const src = await open((await generateFixture(path.join(tmp, arch), { arch, tokenizer: 'none' })).dir);
      // minTokens above some experts' counts: force-routed experts (their biased reference branch) are compared too
      const o = parseExpertBitsOptions({ calib: '4', calibLength: '24', heldOut: '3', budgetBpw: '5', minTokens: '20', formats: 'Q4_0,Q8_0,F16', measure: 'exact' });
      const run = (stream: boolean) => analyzeExpertBits(src, o, { target: ts, note: () => {}, cacheDir: path.join(tmp, `cache-${arch}-${stream}`), progress: silentProgress, stream });
      const whole = (await run(false)).record;
      const streamed = (await run(true)).record;
      expect(whole.experts.some((e) => e.forced)).toBe(true);
      expect(streamed.experts).toEqual(whole.experts);
      whole.items.forEach((it, i) =>
        it.choices.forEach((c, j) => {
          const s = streamed.items[i].choices[j];
          expect(close(s.kl, c.kl), `${it.key} ${c.written} kl ${s.kl} vs ${c.kl}`).toBe(true);
          expect(s.recon).toBe(c.recon);
        }),
      );
      expect(streamed.items.map((it) => it.chosen)).toEqual(whole.items.map((it) => it.chosen));
      expect(close(streamed.plan.heldOutPpl, whole.plan.heldOutPpl, 1e-5)).toBe(true);
      streamed.uniform.forEach((u, k) => expect(close(u.heldOutLoss, whole.uniform[k].heldOutLoss, 1e-4, 1e-6)).toBe(true));
    });
  }
});

describe('block-local sensitivities', () => {
  it("each MoE layer's KL with its experts quantized (the block factor): one streamed sweep = one whole-graph forward per layer", async () => {
    const src = await open((await generateFixture(path.join(tmp, 'mixtral-block'), { arch: 'mixtral', tokenizer: 'none' })).dir);
    const seqs = Array.from({ length: 3 }, (_, s) => Array.from({ length: 20 }, (_, t) => (s * 977 + t * 131 + 5) % src.spec.vocabSize));
    const layers = moeLayers(src.spec).map((layer) => ({ layer, assign: expertsOf(src).filter((e) => e.layer === layer).flatMap((e) => Object.values(e.tensors).map((t) => [t, 'Q4_0'] as [string, QuantType])) }));
    const whole = await Lab.open(src, layers.flatMap((l) => l.assign.map(([t]) => t)));
    const streamed = await Lab.open(src, [], undefined, true);
    try {
      const kw = await layerKl(whole, layers, seqs, silentProgress);
      const ks = await layerKl(streamed, layers, seqs, silentProgress);
      kw.forEach((v, i) => expect(close(ks[i], v), `layer ${i}: ${ks[i]} vs ${v}`).toBe(true));
      for (const v of kw) expect(v).toBeGreaterThan(0);
    } finally {
      await whole.close();
      await streamed.close();
    }
  });
});
