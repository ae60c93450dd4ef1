/**
 * The TS runtime on the real stories260K model: exact greedy ids from reference.json, logits against
 * the onnxruntime engine, KV-cache consistency, seeded sampling, and `llmc run` on the artifact dir.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import http from 'node:http';
import { promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../src/exec/engine/engine.js';
import { Sampler } from '../src/core/sampling.js';
import { urlSource } from '../src/exec/runtime/bytes.js';
import { load } from '../src/exec/runtime/load.js';
import { loadDir } from '../src/exec/runtime/node.js';
import type { Model } from '../src/exec/runtime/model.js';
import { relErr } from './numeric.js';
import { ensureBuilt } from './build-once.js';
import { compileTs } from './ts-artifact.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';

const ROOT = path.resolve(__dirname, '..');
const STORIES = path.resolve(ROOT, 'fixtures/models/stories260K');
const ref = JSON.parse(readFileSync(path.join(STORIES, 'reference.json'), 'utf8')) as { prompt_ids: number[]; greedy_ids: number[] };

let tmp: string;
let dir: string;
let model: Model;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-runtime-'));
  dir = path.join(tmp, 'ts-f32');
  await compileTs(STORIES, dir);
  model = await loadDir(dir, { verifyChecksums: true });
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

describe('TS runtime on stories260K (f32)', () => {
  it("reproduces reference.json's greedy ids exactly", async () => {
    const out: number[] = [];
    for await (const id of model.generate(ref.prompt_ids, { maxTokens: ref.greedy_ids.length, stopTokens: [] })) out.push(id);
    expect(out).toEqual(ref.greedy_ids);
  });

  it('the plain-JS kernels (no WebAssembly) give the same greedy ids and logits', async () => {
    const js = await loadDir(dir, { wasm: false });
    const out: number[] = [];
    for await (const id of js.generate(ref.prompt_ids, { maxTokens: ref.greedy_ids.length, stopTokens: [] })) out.push(id);
    expect(out).toEqual(ref.greedy_ids);
    const seq = [...ref.prompt_ids, ...ref.greedy_ids];
    expect(relErr(js.forward(seq), model.forward(seq))).toBeLessThan(1e-5);
  });

  it('loads tensor by tensor (large-file path) and over HTTP Range requests (urlSource) to the same model', async () => {
    const seq = [...ref.prompt_ids, ...ref.greedy_ids];
    const want = model.forward(seq);
    for (const wasm of [true, false]) {
      const perTensor = await loadDir(dir, { singleReadLimit: 0, wasm });
      expect(relErr(perTensor.forward(seq), want)).toBeLessThan(1e-5);
    }
    // A real HTTP server that honours Range (what a browser fetching the artifact sees).
    const bin = readFileSync(path.join(dir, 'weights.bin'));
    let ranges = 0;
    const server = http.createServer((req, res) => {
      const m = /bytes=(\d+)-(\d+)/.exec(req.headers.range ?? '');
      if (req.method === 'HEAD' || !m) {
        res.writeHead(200, { 'content-length': bin.length });
        res.end(req.method === 'HEAD' ? undefined : bin);
        return;
      }
      ranges++;
      const part = bin.subarray(Number(m[1]), Number(m[2]) + 1);
      res.writeHead(206, { 'content-length': part.length, 'content-range': `bytes ${m[1]}-${m[2]}/${bin.length}` });
      res.end(part);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const port = (server.address() as { port: number }).port;
      const manifest = readFileSync(path.join(dir, 'llmc-manifest.json'), 'utf8');
      const remote = await load({ manifest, weights: urlSource(`http://127.0.0.1:${port}/weights.bin`) }, { verifyChecksums: true, singleReadLimit: 0 });
      expect(ranges).toBeGreaterThan(10);
      expect(relErr(remote.forward(seq), want)).toBeLessThan(1e-5);
    } finally {
      server.close();
    }
  });

  it('prefill over the whole sequence agrees with token-by-token decode through the KV cache', () => {
    const seq = [...ref.prompt_ids, ...ref.greedy_ids.slice(0, 15)];
    const V = model.spec.vocabSize;
    const all = model.forward(seq); // [T, V], fresh cache
    const cache = model.newCache();
    model.forward(seq.slice(0, 4), cache); // a multi-token prefill, then single steps
    for (let t = 4; t < seq.length; t++) {
      const step = model.forward([seq[t]], cache);
      expect(relErr(step, all.subarray(t * V, (t + 1) * V))).toBeLessThan(1e-5);
    }
    expect(cache.length).toBe(seq.length);
    // Teacher forcing: each position's argmax is the next greedy id.
    for (let t = 0; t + 1 < seq.length; t++) {
      const row = all.subarray(t * V, (t + 1) * V);
      expect(row.indexOf(Math.max(...row))).toBe(seq[t + 1]);
    }
  });

  it("logits agree with the onnxruntime engine's to 1e-4 relative", async () => {
    const ck = await openCheckpoint(STORIES);
    const engine = await Engine.open(ck, { threads: 1 });
    try {
      const seq = [...ref.prompt_ids, ...ref.greedy_ids];
      const want = await engine.logits(seq);
      const got = model.forward(seq);
      expect(got.length).toBe(want.length);
      const err = relErr(got, want);
      expect(err).toBeLessThan(1e-4);
    } finally {
      await engine.close();
      await ck.close();
    }
  });

  it('temperature / top-p sampling is seeded and follows the shared Sampler on the same logits', async () => {
    const opts = { temperature: 0.9, topP: 0.8, seed: 42, maxTokens: 20, stopTokens: [] };
    const a: number[] = [];
    for await (const id of model.generate([1], opts)) a.push(id);
    const b: number[] = [];
    for await (const id of model.generate([1], opts)) b.push(id);
    expect(a).toEqual(b);
    // The same choice made by hand: full-sequence logits (no cache) + Sampler.
    const sampler = new Sampler(opts);
    const seq = [1];
    const V = model.spec.vocabSize;
    for (let i = 0; i < opts.maxTokens; i++) {
      const logits = model.forward(seq);
      seq.push(sampler.next(logits.subarray(logits.length - V)));
    }
    expect(a).toEqual(seq.slice(1));
    expect(a).not.toEqual(ref.greedy_ids.slice(0, 20));
    // A nucleus so small that only the argmax survives is greedy, whatever the temperature.
    const nucleus: number[] = [];
    for await (const id of model.generate([1], { temperature: 0.9, topP: 1e-9, seed: 7, maxTokens: 20, stopTokens: [] })) nucleus.push(id);
    expect(nucleus).toEqual(ref.greedy_ids.slice(0, 20));
  });

  it('stops at a given stop token (the stop id included)', async () => {
    // The stop set is the third greedy token.
    const out: number[] = [];
    for await (const id of model.generate([1], { maxTokens: 10, stopTokens: [ref.greedy_ids[2]] })) out.push(id);
    expect(out).toEqual(ref.greedy_ids.slice(0, 3));
  });

  it('`llmc run DIR --prompt-ids 1 --max-tokens 32` runs the artifact', () => {
    const bin = path.join(ROOT, 'bin/llmc.js');
    ensureBuilt();
    const out = execFileSync('node', [bin, 'run', dir, '--prompt-ids', '1', '--max-tokens', '32', '--json'], { encoding: 'utf8' });
    expect(JSON.parse(out).generated_ids).toEqual(ref.greedy_ids);
    // A setting that is neither on nor off is named, not silently read as one of them.
    const typo = spawnSync('node', [bin, 'run', dir, '--prompt-ids', '1', '--max-tokens', '4'], { encoding: 'utf8', env: { ...process.env, LLMC_RELAXED_SIMD: 'yes' } });
    expect(typo.stderr).toContain('LLMC_RELAXED_SIMD=yes is neither on nor off');
    expect(typo.stdout).toBe(`${ref.greedy_ids.slice(0, 4).join(' ')}\n`);
  });

  it('`llmc run` starts from its one-file bundle (scripts/bundle-run.mjs) and prints what dist/ prints', async () => {
    ensureBuilt();
    // A module hook that names every file the process loads.
    await fsp.writeFile(path.join(tmp, 'hooks.mjs'), "export async function load(url, c, next) { if (url.startsWith('file:')) console.error('loaded ' + url); return next(url, c); }\n");
    await fsp.writeFile(path.join(tmp, 'register.mjs'), "import { register } from 'node:module'; register('./hooks.mjs', import.meta.url);\n");
    const run = (env: Record<string, string>) =>
      spawnSync('node', ['--import', path.join(tmp, 'register.mjs'), path.join(ROOT, 'bin/llmc.js'), 'run', dir, '--prompt-ids', '1', '--max-tokens', '8'], { encoding: 'utf8', env: { ...process.env, ...env } });
    const bundled = run({});
    const plain = run({ LLMC_RUN_BUNDLE: 'off' });
    const loaded = (r: typeof bundled) => r.stderr.split('\n').filter((l) => l.startsWith('loaded ')).map((l) => path.relative(ROOT, fileURLToPath(l.slice(7))));
    expect(loaded(bundled)).toContain('dist/llmc-run.mjs');
    expect(loaded(bundled)).not.toContain('dist/src/exec/runtime/load.js');
    expect(loaded(plain)).toContain('dist/src/exec/runtime/load.js');
    expect([bundled.status, plain.status]).toEqual([0, 0]);
    expect(bundled.stdout).toBe(plain.stdout);
    expect(bundled.stdout).toBe(`${ref.greedy_ids.slice(0, 8).join(' ')}\n`);
  });
});
