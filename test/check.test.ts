/**
 * The CI step: budgets (`llmc check`, `llmc compile --check`) and the evaluation module behind them,
 * on the shipped stories260K. References are independent of src/app/evaluate: the reorder pass's
 * held-out perplexities (onnxruntime over the source with masks), and argmax counts done here.
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { ELASTIC_LEVELS, findRecord } from '../src/core/records/index.js';
import { readManifest } from '../src/app/compile/manifest.js';
import { heldOutSet } from '../src/app/evaluate/artifact.js';
import { EVAL_DRAW_SEED } from '../src/app/evaluate/defaults.js';
import { Engine } from '../src/exec/engine/index.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { llmcInProcess, llmcWithEval } from './cli.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
let cache: string;
const ALL = { bytes: { max: 3e8 }, ppl_delta: { max: 0.5 }, kl_delta: { max: 0.01 }, greedy_agreement: { min: 0.9 }, tokens_per_s: { min: 1 } };

async function budgetFile(name: string, content: unknown): Promise<string> {
  const f = path.join(tmp, name);
  await fsp.writeFile(f, typeof content === 'string' ? content : JSON.stringify(content));
  return f;
}

async function compileTo(name: string, ...args: string[]): Promise<string> {
  const out = path.join(tmp, name);
  const r = await llmcInProcess('compile', STORIES, '-o', out, '--cache-dir', cache, ...args);
  expect(r.code, r.stderr).toBe(0);
  return out;
}

async function check(dir: string, budgets: unknown, ...args: string[]) {
  // 630 tokens: 10 sequences of 64, the held-out draw the elastic artifact's reorder pass was given (its perplexities are references here).
  const r = await llmcInProcess('check', dir, await budgetFile(`b${Math.random().toString(36).slice(2)}.json`, budgets), '--cache-dir', cache, '--json', '--eval-tokens', '630', ...args);
  return { ...r, summary: r.stdout ? JSON.parse(r.stdout) : null };
}

/**
 * Greedy choices of the source (onnxruntime) and of an artifact (the TS runtime) over the held-out
 * draw, counted here: how many agree, and the source's top-two margin where they do not.
 */
async function argmaxes(dir: string): Promise<{ same: number; n: number; disagreementMargins: number[] }> {
  const source = await openCheckpoint(STORIES);
  const engine = await Engine.open(source);
  const model = await loadDir(dir);
  try {
    const { sequences } = await heldOutSet(source, { cacheDir: cache, tokens: 630 });
    const V = source.spec.vocabSize;
    const top2 = (a: Float32Array, t: number) => {
      let [b, c] = [-1, -1];
      for (let i = 0; i < V; i++) {
        const v = a[t * V + i];
        if (b < 0 || v > a[t * V + b]) [b, c] = [i, b];
        else if (c < 0 || v > a[t * V + c]) c = i;
      }
      return { best: b, margin: a[t * V + b] - a[t * V + c] };
    };
    let same = 0;
    let n = 0;
    const disagreementMargins: number[] = [];
    for (const seq of sequences) {
      const [a, b] = [await engine.logits(seq), model.forward(seq)];
      for (let t = 0; t + 1 < seq.length; t++, n++) {
        const src = top2(a, t);
        if (src.best === top2(b, t).best) same++;
        else disagreementMargins.push(src.margin);
      }
    }
    return { same, n, disagreementMargins };
  } finally {
    await engine.close();
    await source.close();
  }
}

let elastic: string;
let q8: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-check-'));
  cache = path.join(tmp, 'cache');
  // The evaluation draws from a seed of its own, disjoint from every pass's (test/eval-disjoint). Here
  // the reorder pass is given that seed on purpose, so its held-out perplexities are references.
  elastic = await compileTo('elastic', '--target', 'ts', '--passes', 'reorder', '--opt', 'reorder.recover=none', '--opt', `reorder.seed=${EVAL_DRAW_SEED}`);
  q8 = await compileTo('q8', '--target', 'ts', '--quant', 'Q8_0');
});
afterAll(async () => fsp.rm(tmp, { recursive: true, force: true }));

describe('llmc check', () => {
  it('an F32 artifact matches its source: every budget holds, exit 0; source perplexity = the reorder pass\'s', async () => {
    const r = await check(elastic, ALL);
    expect(r.code, r.stderr).toBe(0);
    const s = r.summary;
    expect(s.schema).toBe('llmc-check/1');
    expect(s.ok).toBe(true);
    expect(s.results).toHaveLength(5);
    expect(Math.abs(s.metrics.ppl_delta)).toBeLessThan(1e-4);
    expect(s.metrics.kl_delta).toBeLessThan(1e-8);
    // Every greedy choice agrees, except where the source's two best logits are a float32 tie (the
    // runtime's SIMD silu and onnxruntime round differently in the last bit: one position here, 1 ulp).
    const cmp = await argmaxes(elastic);
    expect(s.metrics.greedy_agreement).toBeCloseTo(cmp.same / cmp.n, 12);
    for (const margin of cmp.disagreementMargins) expect(margin).toBeLessThanOrEqual(4e-6);
    expect(cmp.same).toBeGreaterThanOrEqual(cmp.n - 2);
    expect(s.metrics.tokens_per_s).toBeGreaterThan(1);
    expect(s.metrics.bytes).toBe((await fsp.stat(path.join(elastic, 'weights.bin'))).size);
    expect(s.evaluation.positions).toBe(10 * 63);
    // Engine.perplexity (the reorder pass's figure) over the same held-out draw.
    const rec = findRecord((await readManifest(elastic))!.passes, ELASTIC_LEVELS)!;
    expect(s.evaluation.heldOut.profile).toBe(rec.calibration.profile);
    expect(s.evaluation.sourcePpl).toBeCloseTo(rec.heldOutPpl!, 9);
  });

  it('--level runs the prefix sub-model: its perplexity is the one the reorder pass measured with masks; failed budgets exit 1, one line each', async () => {
    const r = await check(elastic, ALL, '--level', 'L3');
    expect(r.code).toBe(1);
    const rec = findRecord((await readManifest(elastic))!.passes, ELASTIC_LEVELS)!;
    const L3 = rec.levels.find((l) => l.id === 'L3')!;
    expect(r.summary.evaluation.level).toBe('L3');
    expect(Math.abs(r.summary.evaluation.artifactPpl / L3.heldOutPpl! - 1)).toBeLessThan(1e-5);
    const failed = r.summary.results.filter((x: { ok: boolean }) => !x.ok).map((x: { metric: string }) => x.metric);
    expect(failed).toEqual(['ppl_delta', 'kl_delta', 'greedy_agreement']);
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatch(/^budget failed: ppl_delta = [\d.]+, max 0\.5$/);
    expect(lines[2]).toMatch(/^budget failed: greedy_agreement = 0\.\d+, min 0\.9$/);
  });

  it('a Q8_0 artifact: greedy agreement equals argmax counts of the two executors, KL > 0', async () => {
    const r = await check(q8, { kl_delta: { max: 1 }, greedy_agreement: { min: 0 } });
    expect(r.code, r.stderr).toBe(0);
    const cmp = await argmaxes(q8);
    expect(r.summary.metrics.greedy_agreement).toBeCloseTo(cmp.same / cmp.n, 12);
    expect(cmp.same).toBeLessThan(cmp.n);
    expect(r.summary.metrics.kl_delta).toBeGreaterThan(1e-4);
  });

  it('bytes alone reads only the manifest; other artifacts: hf quality on onnxruntime, gguf in llama.cpp, tensorrt-llm bytes only', async () => {
    const gguf = await compileTo('gguf', '--target', 'gguf', '--quant', 'Q8_0');
    const ok = await check(gguf, { bytes: { max: 1e7 } });
    expect(ok.code).toBe(0);
    expect(ok.summary.evaluation).toBeNull();
    const inLlama = await check(gguf, { ppl_delta: { max: 1.5, min: 0 } });
    expect(inLlama.code, inLlama.stderr).toBe(0);
    expect(inLlama.summary.evaluation.executor).toBe('llama.cpp');
    const trt = await compileTo('trt', '--target', 'tensorrt-llm');
    // A budget llmc cannot measure for the artifact fails with the reason (exit 1); bytes are still judged.
    const bad = await check(trt, { bytes: { max: 1e7 }, ppl_delta: { max: 1 }, tokens_per_s: { min: 1 } });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toBe(
      'budget failed: ppl_delta (max 1) cannot be measured: llmc does not run tensorrt-llm artifacts (it runs gguf, gguf-levels, hf, ts, cuda, qnn)\n' +
        'budget failed: tokens_per_s (min 1) cannot be measured: llmc does not run tensorrt-llm artifacts (it runs gguf, gguf-levels, hf, ts, cuda, qnn)\n',
    );
    expect(bad.summary).toMatchObject({ ok: false, metrics: { bytes: expect.any(Number) }, evaluation: null });
    expect(bad.summary.results.map((r: { metric: string; ok: boolean; value: unknown }) => [r.metric, r.ok, r.value])).toEqual([
      ['bytes', true, bad.summary.metrics.bytes],
      ['ppl_delta', false, null],
      ['tokens_per_s', false, null],
    ]);
    const hf = await compileTo('hf', '--target', 'hf', '--passes', 'reorder', '--opt', 'reorder.recover=none');
    const q = await check(hf, { ppl_delta: { max: 1e-4, min: -1e-4 }, greedy_agreement: { min: 1 } });
    expect(q.code, q.stderr).toBe(0);
    expect(q.summary.evaluation.executor).toBe('onnxruntime');
    // Decode speed on the artifact's own engine (onnxruntime for hf).
    const speed = await check(hf, { tokens_per_s: { min: 1 } });
    expect(speed.code, speed.stderr).toBe(0);
    expect(speed.summary.metrics.tokens_per_s).toBeGreaterThan(1);
  });

  it('a bad budget file: one line naming the key, exit 2', async () => {
    const cases: [unknown, RegExp][] = [
      ['{"bytes": {"max": 1}', /: not valid JSON/],
      [{ ppl: { max: 1 } }, /: ppl: unknown key; metrics are bytes, ppl_delta, ppl_ratio, kl_delta, kl_p99, greedy_agreement, tokens_per_s$/],
      [{ bytes: { maxx: 1 } }, /: bytes\.maxx: unknown key; a budget takes "min" and "max"$/],
      [{ ppl_delta: { max: '0.5' } }, /: ppl_delta\.max: expected number, received string$/],
      [{ ppl_delta: {} }, /: ppl_delta: needs "min" or "max"$/],
      [{ ppl_delta: { min: 2, max: 1 } }, /: ppl_delta: "min" is above "max"$/],
      [{}, /: no budget: give at least one of bytes/],
      [[1], /: expected object, received array$/],
    ];
    for (const [content, re] of cases) {
      const r = await llmcInProcess('check', q8, await budgetFile('bad.json', content));
      expect(r.code, JSON.stringify(content)).toBe(2);
      expect(r.stderr.trim().split('\n'), JSON.stringify(content)).toHaveLength(1);
      expect(r.stderr.trim(), JSON.stringify(content)).toMatch(re);
    }
    const missing = await llmcInProcess('check', q8, path.join(tmp, 'nope.json'));
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/nope\.json: cannot read the budget file: ENOENT/);
  });

  it('not an artifact, another checkpoint as --source: one line, exit 1', async () => {
    const b = await budgetFile('b.json', ALL);
    const notArtifact = await llmcInProcess('check', STORIES, b);
    expect(notArtifact.code).toBe(1);
    expect(notArtifact.stderr).toMatch(/stories260K: not an llmc artifact \(no llmc-manifest\.json\); compile it first\n$/);
    const other = path.join(tmp, 'other');
    await fsp.cp(STORIES, other, { recursive: true });
    const config = JSON.parse(await fsp.readFile(path.join(other, 'config.json'), 'utf8'));
    await fsp.writeFile(path.join(other, 'config.json'), JSON.stringify({ ...config, rms_norm_eps: 1e-6 }));
    const r = await llmcInProcess('check', q8, b, '--source', other, '--cache-dir', cache);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/other: is not the checkpoint .* was compiled from \(sha256 [0-9a-f]{12}… ≠ the manifest's [0-9a-f]{12}…\)\n$/);
  });
});

describe('llmc compile --check', () => {
  it('a failed budget exits 1 and keeps the artifact; a bad budget file exits 2 before anything is written', async () => {
    const out = path.join(tmp, 'checked');
    // --eval-tokens 630, as checkArtifact's: these checks need a measured KL, not the default 16384 tokens'.
    const r = await llmcWithEval('compile', STORIES, '--target', 'ts', '--quant', 'Q8_0', '-o', out, '--cache-dir', cache, '--eval-tokens', '630', '--check', await budgetFile('tight.json', { kl_delta: { max: 1e-9 } }));
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/budget failed: kl_delta = [\d.e-]+, max 1e-9\n$/);
    expect(existsSync(path.join(out, 'weights.bin'))).toBe(true);
    const json = await llmcInProcess('compile', STORIES, '--target', 'ts', '-o', path.join(tmp, 'checked2'), '--cache-dir', cache, '--json', '--check', await budgetFile('ok.json', { bytes: { max: 2e6 } }));
    expect(json.code, json.stderr).toBe(0);
    const m = JSON.parse(json.stdout);
    expect(m.format).toBe('llmc-artifact');
    expect(m.check).toMatchObject({ schema: 'llmc-check/1', ok: true, metrics: { bytes: m.files[0].size } });
    // A quality budget is judged on the compile's own evaluation: the same figures on the same held-out set.
    const withQ = await llmcWithEval('compile', STORIES, '--target', 'ts', '-o', path.join(tmp, 'checked3'), '--cache-dir', cache, '--eval-tokens', '630', '--json', '--check', await budgetFile('okq.json', { kl_delta: { max: 1 } }));
    expect(withQ.code, withQ.stderr).toBe(0);
    const mq = JSON.parse(withQ.stdout);
    expect(mq.quality.measured).toBe(true);
    expect(mq.check.metrics.kl_delta).toBe(mq.quality.quality.kl);
    expect(mq.check.evaluation.heldOut).toEqual(mq.quality.heldOut);
    expect(mq.check.evaluation.positions).toBe(mq.quality.quality.positions);

    const never = path.join(tmp, 'never');
    const bad = await llmcInProcess('compile', STORIES, '--target', 'ts', '-o', never, '--check', await budgetFile('bad.json', { greedy: { min: 0.9 } }));
    expect(bad.code).toBe(2);
    expect(existsSync(never)).toBe(false);
  });

  it('quality budgets on a compile that measured no quality fail saying why (exit 1): --no-eval, a target llmc does not run', async () => {
    const q = await budgetFile('q.json', { bytes: { max: 1e7 }, greedy_agreement: { min: 0.9 } });
    const noEval = await llmcInProcess('compile', STORIES, '--target', 'ts', '-o', path.join(tmp, 'no-eval'), '--cache-dir', cache, '--no-eval', '--check', q);
    expect(noEval.code).toBe(1);
    expect(noEval.stdout).toMatch(/^ok {3}bytes = \d+ \(max 10000000\)\nFAIL greedy_agreement = not measured \(min 0\.9\)\n$/);
    expect(noEval.stderr).toMatch(/\nbudget failed: greedy_agreement \(min 0\.9\) cannot be measured: the compile ran with --no-eval\n$/);
    const trt = await llmcWithEval('compile', STORIES, '--target', 'tensorrt-llm', '-o', path.join(tmp, 'trt-checked'), '--json', '--check', q);
    expect(trt.code).toBe(1);
    expect(trt.stderr).toMatch(/^budget failed: greedy_agreement \(min 0\.9\) cannot be measured: the compile's evaluation was skipped: llmc does not run tensorrt-llm artifacts/);
    expect(JSON.parse(trt.stdout).check).toMatchObject({ ok: false, results: [{ metric: 'bytes', ok: true }, { metric: 'greedy_agreement', ok: false, value: null }] });
  });
});
