/**
 * Quality on real held-out text, end to end on the trained dense-28M (../shared/models/trained): the
 * built-in held-out set (its windows checked against an independent tokenizer, @huggingface/tokenizers,
 * and its text against calibration.txt), `llmc compile --eval-text/--eval-tokens`, and `llmc check`
 * with `ppl_ratio` / `kl_p99` budgets. The statistics themselves: quality-stats.test.ts.
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Tokenizer } from '@huggingface/tokenizers';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { builtInEvalText, DEFAULT_EVAL_TOKENS, heldOutSet } from '../src/app/evaluate/artifact.js';
import { llmcInProcess, llmcWithEval } from './cli.js';

const TRAINED = path.resolve(__dirname, '../../shared/models/trained');
const MODEL = path.join(TRAINED, 'dense-28M');
const BUILT_IN = path.resolve(__dirname, '../data/eval/heldout.txt');
const have = existsSync(path.join(MODEL, 'config.json'));
if (!have) console.warn(`quality-text.test.ts: skipped, ${MODEL} is absent (../shared)`);

let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-quality-text-'));
});
afterAll(async () => fsp.rm(tmp, { recursive: true, force: true }));

describe.skipIf(!have)('held-out text on dense-28M', () => {
  it('the built-in set by default: ≥ 16K tokens in windows of BOS + 511 consecutive tokens of data/eval/heldout.txt, spread over it', async () => {
    expect(builtInEvalText()).toBe(BUILT_IN);
    const source = await openCheckpoint(MODEL);
    const held = await heldOutSet(source);
    await source.close();
    expect(held.source).toMatchObject({ text: BUILT_IN, builtIn: true });
    expect(held.tokens).toBeGreaterThanOrEqual(16384);
    expect(held.tokens).toBe(held.sequences.length * 511);
    expect(DEFAULT_EVAL_TOKENS).toBe(16384);
    // The file tokenized by an independent tokenizer; every window is BOS + a run of it at a multiple of 511.
    const json = JSON.parse(await fsp.readFile(path.join(MODEL, 'tokenizer.json'), 'utf8'));
    const config = JSON.parse(await fsp.readFile(path.join(MODEL, 'tokenizer_config.json'), 'utf8'));
    const ids = new Tokenizer(json, config).encode(await fsp.readFile(BUILT_IN, 'utf8')).ids;
    expect(ids[0]).toBe(0);
    const body = ids.slice(1);
    const starts: number[] = [];
    for (const w of held.sequences) {
      expect(w).toHaveLength(512);
      expect(w[0]).toBe(0);
      const at = starts.length ? body.indexOf(w[1], starts[starts.length - 1] + 1) : body.indexOf(w[1]);
      let k = at;
      while (k >= 0 && (k % 511 !== 0 || body.slice(k, k + 511).join() !== w.slice(1).join())) k = body.indexOf(w[1], k + 1);
      expect(k, `window ${starts.length}`).toBeGreaterThanOrEqual(0);
      starts.push(k);
    }
    // Spread over the whole text, in order, not its first 16K tokens.
    expect(starts[starts.length - 1]).toBeGreaterThan(body.length * 0.9);
    expect([...starts].sort((a, b) => a - b)).toEqual(starts);
  });

  it('data/eval/heldout.txt is disjoint from calibration.txt: no paragraph shares a 64-character run with it', async () => {
    const calib = await fsp.readFile(path.join(TRAINED, 'text/calibration.txt'), 'utf8');
    const runs = new Set<string>();
    for (let i = 0; i + 64 <= calib.length; i++) runs.add(calib.slice(i, i + 64));
    const text = await fsp.readFile(BUILT_IN, 'utf8');
    let shared = 0;
    for (const para of text.split('\n\n')) for (let i = 0; i + 64 <= para.length; i++) if (runs.has(para.slice(i, i + 64))) shared++;
    expect(shared).toBe(0);
    expect(Buffer.byteLength(text)).toBeGreaterThan(90_000);
  });

  let artifact: string;
  it('compile --eval-text --eval-tokens: the figures with their token count and 95% intervals, on stderr and in --json', async () => {
    artifact = path.join(tmp, 'q4');
    const r = await llmcWithEval('compile', MODEL, '--target', 'ts', '--quant', 'Q4_0', '-o', artifact, '--eval-text', BUILT_IN, '--eval-tokens', '1000', '--json');
    expect(r.code, r.stderr).toBe(0);
    const e = JSON.parse(r.stdout).quality;
    expect(e.measured).toBe(true);
    expect(e.heldOut).toMatchObject({ tokens: 1022, sequences: 2, length: 512, seed: null, source: { text: BUILT_IN } });
    const q = e.quality;
    expect(q.positions).toBe(1022);
    expect(q.executor).toBe('ts-runtime');
    expect(q.pplRatio).toBeCloseTo(q.candidatePpl / q.referencePpl, 12);
    expect(q.pplDelta).toBeCloseTo(q.candidatePpl - q.referencePpl, 12);
    for (const k of ['referencePpl', 'candidatePpl', 'pplDelta', 'pplRatio', 'kl', 'klP99', 'greedyAgreement'] as const) {
      expect(q.ci95[k][0], k).toBeLessThanOrEqual(q[k]);
      expect(q.ci95[k][1], k).toBeGreaterThanOrEqual(q[k]);
    }
    expect(q.kl).toBeGreaterThan(1e-3);
    expect(q.klP99).toBeGreaterThan(q.kl);
    expect(q.greedyAgreement).toBeGreaterThan(0.7);
    expect(q.greedyAgreement).toBeLessThan(1);
    const text = await llmcWithEval('compile', MODEL, '--target', 'ts', '--quant', 'Q4_0', '-o', path.join(tmp, 'q4-text'), '--eval-tokens', '511');
    expect(text.code, text.stderr).toBe(0);
    expect(text.stderr).toMatch(/^ {2}quality against the source on 511 tokens of llmc's built-in held-out text \(1 window of 512\); the artifact on ts-runtime, the source on onnxruntime; ± 95% intervals:$/m);
    expect(text.stderr).toMatch(/^ {4}perplexity [\d.]+ ± [\d.]+ → [\d.]+ ± [\d.]+ \(Δ [+-][\d.]+ ± [\d.]+, ratio [\d.]+ ± [\d.]+\)$/m);
  });

  it('a held-out text that is missing or too short: one line naming it, exit 1, nothing written; --eval-text with --no-eval: exit 2', async () => {
    const short = path.join(tmp, 'short.txt');
    await fsp.writeFile(short, 'def f(x):\n    return x\n');
    const out = path.join(tmp, 'never');
    const r = await llmcWithEval('compile', MODEL, '--target', 'ts', '-o', out, '--eval-text', short);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/short\.txt: is shorter than one window of 512 tokens: give a longer held-out text\n$/);
    const few = await llmcWithEval('compile', MODEL, '--target', 'ts', '-o', out, '--eval-text', BUILT_IN, '--eval-tokens', '100000');
    expect(few.code).toBe(1);
    expect(few.stderr).toMatch(/heldout\.txt: gives 63 whole windows of 512 tokens, 196 needed to score 100000 tokens: give a longer text, or fewer with --eval-tokens 32193\n$/);
    expect(existsSync(out)).toBe(false);
    const missing = await llmcWithEval('compile', MODEL, '--target', 'ts', '-o', out, '--eval-text', path.join(tmp, 'nope.txt'));
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/nope\.txt: cannot read the held-out text: ENOENT\n$/);
    const usage = await llmcInProcess('compile', MODEL, '--target', 'ts', '-o', out, '--eval-text', short);
    expect(usage.code).toBe(2);
    expect(existsSync(out)).toBe(false);
  });

  it('llmc check: ppl_ratio and kl_p99 budgets hold or fail against the measured figures', async () => {
    const budgets = path.join(tmp, 'ratio.json');
    await fsp.writeFile(budgets, JSON.stringify({ ppl_ratio: { max: 2 }, kl_p99: { max: 10 } }));
    const ok = await llmcInProcess('check', artifact, budgets, '--json', '--eval-tokens', '511');
    expect(ok.code, ok.stderr).toBe(0);
    const s = JSON.parse(ok.stdout);
    expect(s.evaluation.heldOut).toMatchObject({ tokens: 511, sequences: 1, source: { builtIn: true } });
    expect(s.metrics.ppl_ratio).toBeCloseTo(s.evaluation.artifactPpl / s.evaluation.sourcePpl, 12);
    expect(s.metrics.kl_p99).toBe(s.evaluation.figures.klP99);
    expect(s.evaluation.figures.ci95.pplRatio[0]).toBeLessThan(s.metrics.ppl_ratio);
    await fsp.writeFile(budgets, JSON.stringify({ ppl_ratio: { max: s.metrics.ppl_ratio * (1 - 1e-9) } }));
    const bad = await llmcInProcess('check', artifact, budgets, '--eval-tokens', '511');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^budget failed: ppl_ratio = [\d.]+, max [\d.]+\n$/);
  });
});
