/**
 * The TS runtime with experts offloaded (`llmc run --expert-cache N`): outputs identical to the fully
 * resident model (mixtral with the expert-bits record, every policy, with and without preloading,
 * multi-token prompts under a cache smaller than one layer's experts; qwen2_moe with its resident
 * shared expert and no record), cache statistics equal to the trace simulator's on the same routes,
 * and the refusals.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { EXPERT_TABLE, findRecord } from '../src/core/records/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { Predictor, simulate } from '../src/exec/runtime/experts.js';
import { loadDir } from '../src/exec/runtime/node.js';
import type { Model } from '../src/exec/runtime/model.js';
import { llmcInProcess } from './cli.js';

let tmp: string;
let mixtral: string;
let qwen: string;

const build = async (arch: 'mixtral' | 'qwen2_moe', passes: boolean) => {
  const dir = (await generateFixture(path.join(tmp, `${arch}-src`), { arch, tokenizer: 'none', dims: { numLayers: 3, numExperts: 6 } })).dir;
  const src = await openCheckpoint(dir);
  const out = path.join(tmp, arch);
  try {
    await compile({
      source: src,
      target: 'ts',
      outDir: out,
      passes: passes ? [{ name: 'expert-bits', options: { calib: '4', calibLength: '32', heldOut: '4', budgetBpw: '6', formats: 'Q4_0,Q8_0,F16' } }] : [],
      quant: 'Q8_0',
      progress: silentProgress,
      note: () => {},
    });
  } finally {
    await src.close();
  }
  return out;
};

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-offload-'));
  mixtral = await build('mixtral', true);
  qwen = await build('qwen2_moe', false);
});
afterAll(async () => fsp.rm(tmp, { recursive: true, force: true }));

const greedy = async (m: Model, prompt: number[], n: number) => {
  const out: number[] = [];
  for await (const id of m.generate(prompt, { maxTokens: n, stopTokens: [] })) out.push(id);
  return out;
};

describe('expert offloading', () => {
  it('mixtral: identical ids and logits to the resident model, every policy, with and without preloading', async () => {
    const full = await loadDir(mixtral);
    const prompt = [1, 40, 300, 12, 7, 99];
    const ref = await greedy(full, prompt, 24);
    const refLogits = full.forward(prompt);
    for (const capacity of [2, 5, 12]) {
      for (const policy of ['edgemoe', 'lru', 'lfu'] as const) {
        for (const preload of [0, 2]) {
          const m = await loadDir(mixtral, { experts: { capacity, policy, preload } });
          try {
            expect(await greedy(m, prompt, 24)).toEqual(ref);
            // A 6-token prompt needs more distinct experts per layer than 2 or 5 slots: processed expert by expert.
            expect(Array.from(await m.forwardAsync(prompt))).toEqual(Array.from(refLogits));
            expect(m.experts!.stats.loads).toBeGreaterThan(0);
          } finally {
            await m.close();
          }
        }
      }
    }
    expect(() => full.forward([1])).not.toThrow();
  });

  it('qwen2_moe (shared expert resident, no expert-bits record: lru): identical ids', async () => {
    const full = await loadDir(qwen);
    const ref = await greedy(full, [1, 2, 3], 16);
    const m = await loadDir(qwen, { experts: { capacity: 3, preload: 0 } });
    try {
      expect(m.experts!.policy).toBe('lru');
      expect(await greedy(m, [1, 2, 3], 16)).toEqual(ref);
      expect(() => m.forward([1])).toThrow(/reads experts on demand/);
    } finally {
      await m.close();
    }
  });

  it("the runtime's hits, loads and preloads equal the simulator's on the same routes", async () => {
    const manifest = JSON.parse(await fsp.readFile(path.join(mixtral, 'llmc-manifest.json'), 'utf8'));
    const record = findRecord(manifest.passes, EXPERT_TABLE)!;
    const E = record.predictor.numExperts;
    for (const [policy, preload, capacity] of [['edgemoe', 2, 7], ['edgemoe', 0, 5], ['lru', 2, 8], ['lfu', 0, 6]] as const) {
      const m = await loadDir(mixtral, { experts: { capacity, policy, preload, trace: true } });
      try {
        await greedy(m, [1], 40);
        const s = m.experts!.stats;
        const trace = m.experts!.trace!;
        expect(trace[0]).toHaveLength(40);
        const sim = simulate(trace, { capacity, policy, numExperts: E, f: record.cache.f, predictor: preload ? new Predictor(record.predictor) : undefined, fanout: preload, cost: { bytes: record.cache.expertBytes } });
        expect({ accesses: s.accesses, hits: s.hits, loads: s.loads, preloads: s.preloads, useful: s.usefulPreloads, bytes: s.bytesRead }).toEqual({
          accesses: sim.accesses,
          hits: sim.hits,
          loads: sim.loads,
          preloads: sim.preloads,
          useful: sim.usefulPreloads,
          bytes: sim.bytesRead,
        });
        // the time decode steps waited on reads is measured beside them
        expect(s.stallMs).toBeGreaterThan(0);
      } finally {
        await m.close();
      }
    }
  });

  it('refusals: one line through llmc run', async () => {
    const cases: [string[], number, RegExp][] = [
      [[mixtral, '--expert-cache', '1'], 2, /--expert-cache must hold at least the 2 experts one token routes to, got 1/],
      [[qwen, '--expert-cache', '4', '--expert-policy', 'edgemoe'], 2, /edgemoe needs the offline activation frequencies of --passes expert-bits/],
      [[mixtral, '--expert-policy', 'lru'], 2, /need --expert-cache N/],
      [[mixtral, '--expert-cache', '4', '--expert-policy', 'belady'], 2, /--expert-policy must be edgemoe, lru or lfu/],
    ];
    for (const [args, code, msg] of cases) {
      const r = await llmcInProcess('run', ...args, '--prompt-ids', '1', '-n', '2');
      expect(r.code).toBe(code);
      expect(r.stderr.split('\n').filter(Boolean)).toHaveLength(1);
      expect(r.stderr).toMatch(msg);
    }
    const ok = await llmcInProcess('run', mixtral, '--prompt-ids', '1', '-n', '4', '--expert-cache', '4', '--json');
    expect(ok.code).toBe(0);
    expect(JSON.parse(ok.stdout).expert_cache).toMatchObject({ capacity: 4, policy: 'edgemoe' });
    // Streamed without --json: the same ids, one line (stopped at EOS or not, the EOS id is not printed).
    const j = JSON.parse(ok.stdout);
    const streamed = await llmcInProcess('run', mixtral, '--prompt-ids', '1', '-n', '4', '--expert-cache', '4');
    expect(streamed.stdout).toBe(`${(j.stop_reason === 'eos' ? j.generated_ids.slice(0, -1) : j.generated_ids).join(' ')}\n`);
  });
});
