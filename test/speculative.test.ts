/**
 * Speculative decoding in the TS runtime (record spec-tree/1, `llmc run --speculative`):
 * - tree verification reproduces plain decoding bit for bit (every node's logits = the one-token
 *   decode of its path), F32 and Q8_0;
 * - greedy output = plain greedy decoding token for token: stories260K with its own 50% elastic
 *   level as draft (and the reference ids), a fixture pair with a separate draft checkpoint, a
 *   layer-skipping draft under LLMCad's dynamic policy;
 * - the simulation the pass predicts with (a known continuation instead of the target) accepts
 *   exactly what the target run accepts, and the trace replay predicts it;
 * - bad input: one line, exit 2.
 */
import { existsSync, promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { chainTree, findRecord, SPEC_TREE, treeFromPaths, type SpecTree } from '../src/core/records/index.js';
import { modelFromTensors } from '../src/exec/runtime/memory.js';
import type { Model } from '../src/exec/runtime/model.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { OracleVerifier, SpeculativeDecoder, drafterFor } from '../src/exec/runtime/speculative.js';
import { llmcInProcess as llmc } from './cli.js';
import { calibrationSet } from '../src/measure/calibration.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
const REF = JSON.parse(readFileSync(path.join(STORIES, 'reference.json'), 'utf8')).greedy_ids as number[];
const PHONE = path.resolve(__dirname, '../docs/latency/phone-cpu-llmcad.json');
let tmp: string;
let cache: string;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-spec-'));
  cache = path.join(tmp, 'cache');
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

const plain = async (m: Model, prompt: number[], n: number) => {
  const out: number[] = [];
  for await (const id of m.generate(prompt, { maxTokens: n, stopTokens: [] })) out.push(id);
  return out;
};
const same = (a: Float32Array, b: Float32Array) => a.length === b.length && a.every((x, i) => Object.is(x, b[i]));

describe('tree verification = plain decoding, bit for bit', () => {
  it('every node of a branching tree gets the logits of a one-token decode of its path (F32 and Q8_0), and KV compaction keeps the path', async () => {
    const art = path.join(tmp, 'q8');
    expect((await llmc('compile', STORIES, '--target', 'ts', '-q', 'Q8_0', '-o', art)).code).toBe(0);
    const src = await openCheckpoint(STORIES);
    const models = [await modelFromTensors(src), await loadDir(art)];
    await src.close();
    const ctx = [1, 461, 461, 401, 401, 401, 461, 378, 455];
    const t = treeFromPaths([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0, 0]]);
    const tokens = t.parent.map((_, i) => 300 + 7 * i);
    const depth = t.parent.map((_, i) => (i ? 1 + (t.parent[i] ? 1 : 0) : 0));
    for (let i = 1; i < t.parent.length; i++) depth[i] = depth[t.parent[i]] + 1;
    const lineage = (i: number): number[] => (i === 0 ? [0] : [...lineage(t.parent[i]), i]);
    for (const [k, m] of models.entries()) {
      const V = m.spec.vocabSize;
      const c = m.newCache();
      m.forward(ctx.slice(0, -1), c);
      const base = c.length;
      const tree = {
        shared: base,
        visible: tokens.map((_, i) => Int32Array.from(lineage(i), (a) => base + a)),
        positions: Int32Array.from(depth, (d) => base + d),
        keyPositions: Int32Array.from(depth, (d) => base + d),
      };
      const got = m.forward(tokens.map((x, i) => (i === 0 ? ctx[ctx.length - 1] : x)), c, { tree, rowwise: true, logitRows: tokens.map((_, i) => i) });
      for (let i = 0; i < tokens.length; i++) {
        // plain decoding: the prefix as one call, then the path token by token
        const pc = m.newCache();
        m.forward(ctx.slice(0, -1), pc);
        let want: Float32Array = new Float32Array(0);
        for (const a of lineage(i)) want = m.forward([a === 0 ? ctx[ctx.length - 1] : tokens[a]], pc, { lastOnly: true });
        expect(same(got.subarray(i * V, (i + 1) * V), want)).toBe(true);
      }
      if (k === 0) {
        // F32 without rowwise: the four-token kernel sums in another order, not bit-identical (the test can tell)
        const c2 = m.newCache();
        m.forward(ctx.slice(0, -1), c2);
        const loose = m.forward(tokens.map((x, i) => (i === 0 ? ctx[ctx.length - 1] : x)), c2, { tree, logitRows: tokens.map((_, i) => i) });
        expect(same(loose, got)).toBe(false);
      }
      // compaction: keep the path root → 1 → 4, then decoding continues exactly as after that path
      c.keep(base, [base, base + 1, base + 4]);
      expect(c.length).toBe(base + 3);
      const after = m.forward([5], c, { lastOnly: true });
      const pc = m.newCache();
      m.forward([...ctx, tokens[1], tokens[4]], pc);
      expect(same(after, m.forward([5], pc, { lastOnly: true }))).toBe(true);
    }
  });
});

describe('speculative decoding = plain greedy decoding', () => {
  let elastic: string;
  let rec: SpecTree;

  it('stories260K drafting with its own 50% level: `llmc run --speculative` gives the reference ids and plain decoding\'s tokens; --json reports tokens per step', async () => {
    elastic = path.join(tmp, 'elastic');
    const c = await llmc('compile', STORIES, '--target', 'ts', '-q', 'F32', '--passes', 'reorder,tree-search', '--levels', '0.5,1', '--importance', 'activation', '--opt', 'reorder.evaluate=false', '--opt', 'reorder.recover=none',
      '--opt', 'tree-search.draftLevel=0.5', '--opt', `tree-search.latency=${PHONE}`, '--opt', 'tree-search.calib=8', '--cache-dir', cache, '-o', elastic, '--json');
    expect(c.code).toBe(0);
    rec = findRecord(JSON.parse(c.stdout).passes, SPEC_TREE)!;
    expect(rec.draft).toMatchObject({ kind: 'level', nominal: 0.5 });
    expect(rec.plans[0].n).toBeGreaterThan(4); // an I/O-bound device: a real tree
    const run = async (...extra: string[]) => JSON.parse((await llmc('run', elastic, '--prompt-ids', '1', '-n', String(REF.length), '--json', ...extra)).stdout);
    const spec = await run('--speculative');
    expect(spec.generated_ids).toEqual(REF);
    expect(spec.generated_ids).toEqual((await run()).generated_ids);
    // Without --json the committed tokens are streamed: the same ids on one line.
    expect((await llmc('run', elastic, '--prompt-ids', '1', '-n', String(REF.length), '--speculative')).stdout).toBe(`${REF.join(' ')}\n`);
    const s = spec.speculative;
    expect(s.accepted_per_step.reduce((a: number, b: number) => a + b, 0)).toBe(REF.length - 1);
    expect(s.target_steps).toBe(s.accepted_per_step.length + 1);
    expect(s.mean_accepted_per_step).toBeGreaterThan(1);
    // longer, from several prompts, through the API
    const model = await loadDir(elastic);
    const drafter = drafterFor(model, rec);
    for (const prompt of [[1], [1, 461, 401], [1, 300, 301, 302, 303]]) {
      const r = new SpeculativeDecoder(model, drafter).generate(prompt, { maxTokens: 150, stopTokens: [], tree: (ctx) => rec.plans[rec.buckets.find((b) => b.ctx >= ctx)?.plan ?? 0] });
      expect(r.tokens).toEqual(await plain(model, prompt, 150));
    }
  });

  it('the record is deterministic; a target that cannot lower the tree refuses the pass; the default latency is measured here with the TS runtime', async () => {
    const again = path.join(tmp, 'elastic-again');
    const hf = path.join(tmp, 'elastic-hf');
    const args = ['--passes', 'reorder,tree-search', '--levels', '0.5,1', '--importance', 'activation', '--opt', 'reorder.evaluate=false', '--opt', 'reorder.recover=none', '--opt', 'tree-search.draftLevel=0.5', '--opt', `tree-search.latency=${PHONE}`, '--opt', 'tree-search.calib=8', '--cache-dir', cache];
    expect((await llmc('compile', STORIES, '--target', 'ts', '-q', 'F32', ...args, '-o', again)).code).toBe(0);
    expect(await fsp.readFile(path.join(again, 'llmc-manifest.json'), 'utf8')).toBe(await fsp.readFile(path.join(elastic, 'llmc-manifest.json'), 'utf8'));
    // hf (and cuda) declare no tree masks: the pass manager refuses tree-search there, before any work.
    const refused = await llmc('compile', STORIES, '--target', 'hf', ...args, '-o', hf);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/^llmc: --target hf does not lower tree attention masks .*, which pass tree-search needs \(targets that do: ts\)\n$/);
    expect(existsSync(hf)).toBe(false);

    const measured = path.join(tmp, 'measured');
    const m = await llmc('compile', STORIES, '--target', 'ts', '--passes', 'tree-search', '--opt', 'tree-search.draftSkip=4', '--opt', 'tree-search.calib=4', '--opt', 'tree-search.budget=16', '--cache-dir', cache, '-o', measured, '--json');
    expect(m.code).toBe(0);
    const mr = findRecord(JSON.parse(m.stdout).passes, SPEC_TREE)!;
    expect(mr.latency.source).toBe('measured-ts');
    expect(mr.latency.ctx).toEqual([64, 256]);
    expect(mr.latency.verifyN[0]).toBe(1);
    for (const row of [...mr.latency.verifyMs, ...mr.latency.draftMs]) for (let i = 1; i < row.length; i++) expect(row[i]).toBeGreaterThanOrEqual(row[i - 1]);
    expect(mr.pareto.length).toBeGreaterThan(0);
    const chosen = mr.plans[mr.buckets[0].plan];
    // the plan of most tokens/s is on the Pareto front of (E[L] up, step time down)
    expect(mr.pareto.some((p) => p.ctx === 64 && p.nodes === chosen.n && p.acceptedPerStep === chosen.predicted.acceptedPerStep && p.stepMs === chosen.predicted.stepMs)).toBe(true);
  });

  it('the simulation the pass predicts with accepts exactly what the target accepts', async () => {
    const model = await loadDir(elastic);
    const drafter = drafterFor(model, rec);
    const tree = rec.plans[0];
    for (const prompt of [[1, 461, 461, 401], [1, 50, 60]]) {
      const real = new SpeculativeDecoder(model, drafter).generate(prompt, { maxTokens: 80, stopTokens: [], tree });
      const seq = [...prompt, ...real.tokens];
      const sim = new SpeculativeDecoder(new OracleVerifier(seq, model.spec.vocabSize), drafter).generate(prompt, { maxTokens: 80, stopTokens: [], tree });
      expect(sim.tokens).toEqual(real.tokens);
      expect(sim.acceptedPerStep).toEqual(real.acceptedPerStep);
      expect(sim.draftCalls).toBe(real.draftCalls);
    }
  });

  it('a fixture pair with a separate draft checkpoint (--draft), and a layer-skipping draft under the LLMCad policy (Q8_0)', async () => {
    const target = path.join(tmp, 'target');
    const draft = path.join(tmp, 'draft');
    // Same seed: the draft is the target's first layer with the same embeddings and head.
    await generateFixture(target, { arch: 'llama', seed: 11, dims: { numLayers: 3 }, branchGain: 0.3 });
    await generateFixture(draft, { arch: 'llama', seed: 11, dims: { numLayers: 1 }, branchGain: 0.3 });
    const out = path.join(tmp, 'pair');
    const c = await llmc('compile', target, '--target', 'ts', '-q', 'F32', '--passes', 'tree-search', '--draft', draft, '--opt', `tree-search.latency=${PHONE}`, '--opt', 'tree-search.calib=6', '--cache-dir', cache, '-o', out, '--json');
    expect(c.code).toBe(0);
    const r = findRecord(JSON.parse(c.stdout).passes, SPEC_TREE)!;
    expect(r.draft).toMatchObject({ kind: 'checkpoint', vocabSize: 512 });
    const draftArt = path.join(tmp, 'draft-ts');
    expect((await llmc('compile', draft, '--target', 'ts', '-q', 'F32', '-o', draftArt)).code).toBe(0);
    const run = async (dir: string, ...extra: string[]) => llmc('run', dir, '--prompt-ids', '1,40,41', '-n', '120', '--json', ...extra);
    const want = JSON.parse((await run(out)).stdout).generated_ids;
    const got = await run(out, '--speculative', '--draft', draftArt);
    expect(got.code).toBe(0);
    expect(JSON.parse(got.stdout).generated_ids).toEqual(want);
    // the record's draft is required, and only that one
    const none = await run(out, '--speculative');
    expect([none.code, none.stderr.trim().split('\n').length]).toEqual([2, 1]);
    expect(none.stderr).toMatch(/give that checkpoint's ts artifact with --draft DIR/);
    const wrong = await run(out, '--speculative', '--draft', elastic);
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toMatch(/--draft: that artifact was compiled from checkpoint .* the tree was searched for draft/);

    const skip = path.join(tmp, 'skip');
    const s = await llmc('compile', target, '--target', 'ts', '-q', 'Q8_0', '--passes', 'tree-search', '--opt', 'tree-search.draftSkip=1,2', '--opt', 'tree-search.search=llmcad', '--opt', `tree-search.latency=${PHONE}`, '--opt', 'tree-search.calib=6', '--cache-dir', cache, '-o', skip, '--json');
    expect(s.code).toBe(0);
    const lr = findRecord(JSON.parse(s.stdout).passes, SPEC_TREE)!;
    expect(lr.fallback).toMatchObject({ branchThresh: 0.3, decay: 0.5, update: 'eq3' });
    expect(lr.comparison['llmcad-simulated'].acceptedPerStep).toBeGreaterThanOrEqual(1);
    const q8 = JSON.parse((await run(skip)).stdout).generated_ids;
    const dyn = await run(skip, '--speculative');
    expect(dyn.code).toBe(0);
    expect(JSON.parse(dyn.stdout).generated_ids).toEqual(q8);
  });
});

describe('the plan holds when measured (stories260K, its 50% level, phone-cpu-llmcad.json)', () => {
  it('the chosen plan beats plain decoding on its cost model; `run --speculative` on fresh prompts accepts within 5% of the record\'s prediction; held-out acceptance is recorded with intervals', async () => {
    const out = path.join(tmp, 'measured-plan');
    const c = await llmc('compile', STORIES, '--target', 'ts', '-q', 'F32', '--passes', 'reorder,tree-search', '--levels', '0.5,1', '--importance', 'activation', '--opt', 'reorder.evaluate=false', '--opt', 'reorder.recover=none',
      '--opt', 'tree-search.draftLevel=0.5', '--opt', `tree-search.latency=${PHONE}`, '--cache-dir', cache, '-o', out, '--json');
    expect(c.code).toBe(0);
    const r = findRecord(JSON.parse(c.stdout).passes, SPEC_TREE)!;
    expect(r.format).toBe('spec-tree/2');
    const plan = r.plans[r.buckets[0].plan];
    // never slower than plain decoding, and at least as fast as every tree of the comparison, on its own cost model
    expect(plan.predicted.tokensPerSecond).toBeGreaterThanOrEqual(r.comparison.plain.tokensPerSecond);
    for (const row of Object.values(r.comparison)) expect(plan.predicted.tokensPerSecond).toBeGreaterThanOrEqual(row.tokensPerSecond * (1 - 1e-6));
    // calibration with a 95% interval; held-out prompts (disjoint) checked and recorded
    const v = r.validation!;
    expect(v.calibration.prompts).toBe(64);
    expect(v.calibration.acceptedPerStep).toBeCloseTo(plan.predicted.acceptedPerStep, 5);
    expect(v.calibration.ci95[0]).toBeLessThan(v.calibration.acceptedPerStep);
    expect(v.calibration.ci95[1] - v.calibration.ci95[0]).toBeLessThan(0.1);
    expect(v.heldOut!.prompts).toBe(16);
    const src = await openCheckpoint(STORIES);
    const set = await calibrationSet(src, { source: 'self-generated', count: 64, length: 16, seed: 42, heldOut: 16 }, { cacheDir: cache });
    // prompts neither calibrated nor held out: the calibration recipe with another seed
    const fresh = (await calibrationSet(src, { source: 'self-generated', count: 16, length: 16, seed: 9001, heldOut: 0 }, { cacheDir: cache })).calib;
    await src.close();
    const seen = new Set([...set.calib, ...set.heldOut].map((p) => p.join(',')));
    const calibKeys = new Set(set.calib.map((p) => p.join(',')));
    expect(set.heldOut.filter((p) => calibKeys.has(p.join(',')))).toEqual([]);
    let tokens = 0;
    let steps = 0;
    for (const p of fresh.filter((q) => !seen.has(q.join(',')))) {
      const run = await llmc('run', out, '--prompt-ids', p.join(','), '-n', '96', '--speculative', '--json');
      expect(run.code).toBe(0);
      const s = JSON.parse(run.stdout);
      tokens += s.speculative.accepted_per_step.reduce((a: number, b: number) => a + b, 0);
      steps += s.speculative.accepted_per_step.length;
      // decoding speed after the first token, beside plain decoding's on this host
      expect(s.tokens_per_second).toBe(s.speculative.tokens_per_second);
      expect(s.speculative.plain_tokens_per_second).toBeGreaterThan(0);
    }
    expect(Math.abs(tokens / steps - plan.predicted.acceptedPerStep) / plan.predicted.acceptedPerStep).toBeLessThan(0.05);
  });
});

describe('bad input: one line, exit 2', () => {
  const oneLine = (r: { code: number; stderr: string }, re: RegExp) => {
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(re);
  };

  it('a draft with another vocabulary, a latency file that falls with tree size, a budget below 1, a level without reorder, no draft', async () => {
    const other = path.join(tmp, 'other-vocab');
    await generateFixture(other, { arch: 'llama', seed: 3, dims: { vocabSize: 300 } });
    const out = path.join(tmp, 'bad');
    const compile = (...opts: string[]) => llmc('compile', STORIES, '--target', 'ts', '--passes', 'tree-search', '--cache-dir', cache, '-o', out, ...opts);
    oneLine(await compile('--draft', other), /--draft .*other-vocab: its vocabulary has 300 tokens, the model's 512/);
    const falling = path.join(tmp, 'falling.json');
    await fsp.writeFile(falling, JSON.stringify({ format: 'llmc-latency/1', ctx: [64], verify: { n: [1, 8, 16], ms: [[3, 9, 7]] }, draft: { batch: [1], ms: [[1]] } }));
    oneLine(await compile('--opt', 'tree-search.draftSkip=1', '--opt', `tree-search.latency=${falling}`), /falling\.json: verify\.ms at ctx 64 falls from 9 ms \(tree size 8\) to 7 ms \(tree size 16\)/);
    oneLine(await compile('--opt', 'tree-search.draftSkip=1', '--opt', 'tree-search.budget=0'), /tree-search\.budget must be at least 1/);
    oneLine(await compile('--opt', 'tree-search.draftLevel=0.5'), /add reorder to --passes/);
    oneLine(await compile(), /tree-search needs a draft/);
    oneLine(await compile('--opt', 'tree-search.draftSkip=9'), /draftSkip: the model has layers 0\.\.4/);
    // options the chosen mode does not read are refused
    oneLine(await compile('--opt', 'tree-search.draftSkip=1', '--opt', 'tree-search.alpha0=0.1'), /tree-search\.alpha0 is an LLMCad policy option; it needs --opt tree-search\.search=llmcad/);
    oneLine(await compile('--opt', 'tree-search.draftSkip=1', '--opt', 'tree-search.search=ghidorah', '--opt', 'tree-search.widths=any'), /search=ghidorah searches its own widths/);
    oneLine(await compile('--opt', 'tree-search.draftSkip=1', '--opt', `tree-search.latency=${PHONE}`, '--opt', 'tree-search.ctx=64'), /a latency file brings its own context buckets/);
    oneLine(await compile('--opt', 'tree-search.draftSkip=1', '--opt', `tree-search.latency=${PHONE}`, '--opt', 'tree-search.calib=4', '--opt', 'tree-search.tile=32'), /tree-search\.tile aligns a split between two units/);
    await expect(fsp.stat(out)).rejects.toThrow();
    const noRecord = path.join(tmp, 'plain-ts');
    expect((await llmc('compile', STORIES, '--target', 'ts', '-o', noRecord)).code).toBe(0);
    const r = await llmc('run', noRecord, '--prompt-ids', '1', '-n', '4', '--speculative');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--speculative needs .*--passes tree-search.*; this is a ts artifact/);
    oneLine(await llmc('run', noRecord, '--prompt-ids', '1', '-n', '4', '--speculative', '--chunk', '4'), /--speculative and --chunk do not combine/);
    oneLine(await llmc('run', noRecord, '--prompt-ids', '1', '-n', '4', '--speculative', '--top-p', '0.5'), /--speculative decodes greedily: leave --top-p at 1/);
  });
});
