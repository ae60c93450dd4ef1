/**
 * Reliability of inputs and outputs: the inputs a mutation run found crashing or hanging llmc, each
 * now one line; property-based fuzzing of every reader (seeded; the long run is bench/fuzz); paths that
 * cannot leave the artifact; one compile per output at a time; leftovers of dead compiles removed;
 * kills mid-compile never leave an artifact a loader accepts; `llmc verify`.
 */
import { execFileSync, spawn } from 'node:child_process';
import fc from 'fast-check';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FUZZ_CORPUS, fuzzTargets, REGRESSIONS_DIR, regressions, replayRegressions, type FuzzTarget } from '../bench/fuzz-targets.js';
import { buildTokenizer } from '../fixtures/tokenizer.js';
import { FIXTURE_PRESETS, generateFixture } from '../fixtures/generate.js';
import { ensureBuilt } from './build-once.js';
import { llmcInProcess } from './cli.js';

const ROOT = path.resolve(__dirname, '..');
const STORIES = path.join(ROOT, 'fixtures/models/stories260K');
let tmp: string;
let art: string;
beforeAll(async () => {
  ensureBuilt();
  tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-reliability-'));
  art = path.join(tmp, 'art');
  expect((await llmcInProcess('compile', STORIES, '--target', 'ts', '--quant', 'Q8_0', '-o', art)).code).toBe(0);
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const llmc = (...a: string[]) => llmcInProcess(...a);
let n = 0;
/** stories260K with config.json (or another file) replaced. */
function model(files: Record<string, string>): string {
  const d = path.join(tmp, `m${n++}`);
  cpSync(STORIES, d, { recursive: true });
  for (const [f, c] of Object.entries(files)) writeFileSync(path.join(d, f), c);
  return d;
}
const config = JSON.parse(readFileSync(path.join(STORIES, 'config.json'), 'utf8'));

/** One line on stderr, exit 1 or 2, within a second. */
async function oneLine(args: string[], match: RegExp) {
  const t0 = performance.now();
  const r = await llmc(...args);
  const ms = performance.now() - t0;
  expect(r.code, r.stderr).toBeGreaterThan(0);
  const lines = r.stderr.trim().split('\n');
  expect(lines, r.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(match);
  expect(lines[0]).not.toMatch(/internal error/);
  expect(ms).toBeLessThan(1000);
}

describe('config.json: sizes that made llmc hang or die are refused at once', () => {
  it.each([
    ['num_hidden_layers 1e308', { num_hidden_layers: 1e308 }, /num_hidden_layers" must be a positive integer below 2\^31/],
    ['a million layers', { num_hidden_layers: 1_000_000 }, /describes a model of 9000002 tensors/],
    ['10^7 Mixtral experts', { model_type: 'mixtral', architectures: ['MixtralForCausalLM'], num_local_experts: 1e7, num_experts_per_tok: 2 }, /tensors \(5 layers, 10000000 experts each\)/],
    ['a huge qwen2_moe', { model_type: 'qwen2_moe', architectures: ['Qwen2MoeForCausalLM'], num_experts: 2 ** 30, num_experts_per_tok: 2, moe_intermediate_size: 4 }, /describes a model of/],
    ['rope_scaling factor 0', { rope_scaling: { rope_type: 'linear', factor: 0 } }, /rope_scaling\.factor" must be a positive number/],
  ])('%s', async (_w, patch, match) => {
    await oneLine(['inspect', model({ 'config.json': JSON.stringify({ ...config, ...patch }) })], match);
  });
});

describe('tokenizer files', () => {
  const tok = buildTokenizer('byte-level', 512, 256);
  const base = JSON.parse(tok.tokenizerJson);
  // llmc loads a command's modules (and the tokenizer's) on first use: load them here, so the timed cases measure the input's handling
  beforeAll(async () => {
    const d = model({ 'tokenizer.json': tok.tokenizerJson, 'tokenizer_config.json': tok.tokenizerConfigJson });
    const r = await llmc('run', d, '--prompt', 'a', '-n', '1');
    expect(r.code, r.stderr).toBe(0);
  });
  const cases: [string, (t: Record<string, unknown>) => void, string | null, RegExp][] = [
    ['added_tokens: {}', (t) => (t.added_tokens = {}), null, /tokenizer\.json: unexpected content at added_tokens/],
    ['added_tokens: [null]', (t) => (t.added_tokens = [null]), null, /at added_tokens\[0\]/],
    ['a Sequence whose decoders is a number', (t) => (t.decoder = { type: 'Sequence', decoders: 5 }), null, /at decoder/],
    ['TemplateProcessing with numbers', (t) => (t.post_processor = { type: 'TemplateProcessing', single: [1, 2] }), null, /at post_processor/],
    ['merges as an object', (t) => ((t.model as Record<string, unknown>).merges = { a: 'b' }), null, /at model\.merges/],
    ['tokenizer_config.json = null', () => {}, 'null', /tokenizer_config\.json: unexpected content/],
    ['a Split regex that backtracks exponentially', (t) => (t.pre_tokenizer = { type: 'Split', pattern: { Regex: '(a+)+$' }, behavior: 'Isolated' }), null, /nests repetitions/],
  ];
  it.each(cases)('%s: one line, no hang', async (_w, edit, cfg, match) => {
    const t = structuredClone(base);
    edit(t);
    const dir = model({ 'tokenizer.json': JSON.stringify(t), 'tokenizer_config.json': cfg ?? tok.tokenizerConfigJson });
    await oneLine(['run', dir, '--prompt', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!', '-n', '1'], match);
  });
});

describe('artifact manifests', () => {
  const manifest = () => JSON.parse(readFileSync(path.join(art, 'llmc-manifest.json'), 'utf8'));
  const broken = (edit: (m: Record<string, any>) => void) => { // eslint-disable-line @typescript-eslint/no-explicit-any
    const d = path.join(tmp, `art${n++}`);
    cpSync(art, d, { recursive: true });
    const m = manifest();
    edit(m);
    writeFileSync(path.join(d, 'llmc-manifest.json'), JSON.stringify(m));
    return d;
  };
  it.each([
    ['files: [null]', (m: Record<string, any>) => (m.files = [null]), /files\[0\]: must be an object/], // eslint-disable-line @typescript-eslint/no-explicit-any
    ['arch.eosTokenIds: 2', (m: Record<string, any>) => (m.arch.eosTokenIds = 2), /arch\.eosTokenIds: must be an array/], // eslint-disable-line @typescript-eslint/no-explicit-any
    ['arch.numLayers: 2.5', (m: Record<string, any>) => (m.arch.numLayers = 2.5), /arch\.numLayers: must be an integer/], // eslint-disable-line @typescript-eslint/no-explicit-any
    ['passes: [null]', (m: Record<string, any>) => (m.passes = [null]), /passes\[0\]: must be an object/], // eslint-disable-line @typescript-eslint/no-explicit-any
    ['passes: 5', (m: Record<string, any>) => (m.passes = 5), /passes: must be an array/], // eslint-disable-line @typescript-eslint/no-explicit-any
    ['a reorder record of null', (m: Record<string, any>) => (m.passes = [{ name: 'reorder', options: {}, metadata: null }]), /passes\[0\]\.metadata: must be an object/], // eslint-disable-line @typescript-eslint/no-explicit-any
    ['elastic levels "x"', (m: Record<string, any>) => (m.passes = [{ name: 'reorder', options: {}, metadata: { format: 'elastic-prefix/1', levels: 'x' } }]), /levels: must be an array/], // eslint-disable-line @typescript-eslint/no-explicit-any
    ['targetInfo.weights ../../x', (m: Record<string, any>) => (m.targetInfo.weights = '../../x'), /is not a file of the artifact/], // eslint-disable-line @typescript-eslint/no-explicit-any
    ['files[].path out of the artifact', (m: Record<string, any>) => (m.files[0].path = '../x'), /leaves the artifact/], // eslint-disable-line @typescript-eslint/no-explicit-any
  ])('%s: one line', async (_w, edit, match) => {
    // --level makes the runner read the elastic record; the other cases fail before it matters.
    const level = String(match).includes('levels') || String(match).includes('metadata') ? ['--level', '0.5'] : [];
    await oneLine(['run', broken(edit), '--prompt-ids', '1', '-n', '1', ...level], match);
  });

  it('a FIFO as weights.bin: refused, not waited on', async () => {
    const d = path.join(tmp, 'fifo');
    cpSync(art, d, { recursive: true });
    rmSync(path.join(d, 'weights.bin'));
    execFileSync('mkfifo', [path.join(d, 'weights.bin')]);
    await oneLine(['run', d, '--prompt-ids', '1', '-n', '1'], /weights\.bin: missing|not a regular file/);
  });
});

describe('checkpoint paths and names', () => {
  it('a shard index naming ".." is one line', async () => {
    const d = model({});
    writeFileSync(path.join(d, 'model.safetensors.index.json'), JSON.stringify({ weight_map: { 'model.embed_tokens.weight': '..' } }));
    await oneLine(['inspect', d], /bad shard file name "\.\."/);
  });

  it('escape sequences in names reach the terminal escaped', async () => {
    const d = model({ 'config.json': JSON.stringify({ ...config, model_type: 'llama\u001b[2K\nllmc: fake' }) });
    const r = await llmc('inspect', d);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).not.toContain('\u001b');
    expect(r.stderr).toContain('\\u001b');
  });
});

describe('property-based fuzzing of every reader (seeded)', () => {
  let targets: FuzzTarget[];
  beforeAll(async () => {
    const gguf = path.join(tmp, 'fuzz-gguf');
    const cuda = path.join(tmp, 'fuzz-cuda');
    expect((await llmcInProcess('compile', STORIES, '--target', 'gguf', '--quant', 'Q8_0', '-o', gguf)).code).toBe(0);
    expect((await llmcInProcess('compile', STORIES, '--target', 'cuda', '--quant', 'fp32', '-o', cuda)).code).toBe(0);
    targets = await fuzzTargets(STORIES, {
      ts: { manifest: readFileSync(path.join(art, 'llmc-manifest.json'), 'utf8'), weights: new Uint8Array(readFileSync(path.join(art, 'weights.bin'))) },
      gguf: new Uint8Array(readFileSync(path.join(gguf, 'model.gguf'))),
      onnx: new Uint8Array(readFileSync(path.join(cuda, 'onnx/model.onnx'))),
    });
  });
  afterAll(() => targets?.[0]?.close());

  // Every reader the long run (bench/fuzz) covers but the artifact JSON files (test/artifact-files.test.ts): CI's bounded sample.
  it.each(['model.safetensors', 'config.json', 'tokenizer.json', 'ts llmc-manifest.json', 'ts weights.bin', '.gguf', 'cuda onnx/model.onnx', 'budgets.json', 'llmc.config.json', 'calibration file', 'tree-search latency file', 'profile cache entry'])('%s: only acceptance or one LlmcError of one line, each input < 5 s', async (name) => {
    const t = targets.find((x) => x.name === name)!;
    let accepted = 0;
    let slowest = 0;
    await fc.assert(
      fc.asyncProperty(t.input, async (input) => {
        const t0 = performance.now();
        if (await t.run(input)) accepted++;
        slowest = Math.max(slowest, performance.now() - t0);
      }),
      { seed: 20261123, numRuns: name.includes('onnx') ? 60 : 150 },
    );
    // A 1 MB word tokenized (calibration) takes ~3 s on a loaded machine; a hang is unbounded.
    expect(slowest).toBeLessThan(5000);
    // Mutations must reach past the first check, or the fuzzing proves little (a byte changed in weights.bin never passes its sha256).
    if (name !== 'ts weights.bin') expect(accepted).toBeGreaterThan(0);
  }, 60_000);

  it('the seed corpus\'s regressions (mutants the long run found crashing): each is acceptance or one LlmcError now', async () => {
    // Each mutant's bytes are a file of bench/fuzz-corpus/regressions/: a crash, or over 10 s, throws naming it.
    const { replayed } = await replayRegressions(targets);
    expect(replayed).toBeGreaterThan(0);
  }, 60_000);

  it('every regression file is listed, replayed by a reader of this test or of test/artifact-files.test.ts, and the corpus stays small', () => {
    const listed = regressions();
    const artifactReaders = ['qnn graph/subgraphs.json', 'qnn weights/shadow_index.json', 'qnn config.json', 'cuda config.json'];
    for (const r of listed) expect(targets.some((t) => t.name === r.reader) || artifactReaders.includes(r.reader), r.file).toBe(true);
    expect(readdirSync(REGRESSIONS_DIR).sort()).toEqual(listed.map((r) => r.file).sort());
    const size = (d: string): number => readdirSync(d, { withFileTypes: true }).reduce((a, e) => a + (e.isDirectory() ? size(path.join(d, e.name)) : statSync(path.join(d, e.name)).size), 0);
    expect(size(FUZZ_CORPUS)).toBeLessThan(2 << 20);
  });
});

describe('outputs under concurrency and kills', () => {
  let big: string;
  beforeAll(async () => {
    big = (await generateFixture(path.join(tmp, 'big'), { arch: 'llama', tokenizer: 'none', planted: false, dims: FIXTURE_PRESETS['llama-30M'] })).dir;
  }, 60_000);

  /** `llmc` in a child process; a compile skips its quality evaluation, as llmcInProcess's do (this is about the output, not quality). */
  const start = (args: string[]) => {
    const child = spawn('node', [path.join(ROOT, 'bin/llmc.js'), ...args, ...(args[0] === 'compile' ? ['--no-eval'] : [])]);
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    const done = new Promise<{ code: number | null; stderr: string; signal: NodeJS.Signals | null }>((r) => child.on('close', (code, signal) => r({ code, stderr, signal })));
    return { child, done };
  };

  it('two compiles into one output: one wins, the other is told it is busy', async () => {
    const out = path.join(tmp, 'race');
    const a = start(['compile', big, '--target', 'gguf', '--quant', 'Q8_0', '-o', out]);
    // The second starts once the first holds the lock.
    for (let i = 0; i < 400 && !existsSync(path.join(tmp, '.race.llmc-lock')); i++) await new Promise((r) => setTimeout(r, 10));
    const b = await llmc('compile', big, '--target', 'gguf', '--quant', 'Q8_0', '-o', out);
    expect(b.code).toBe(1);
    expect(b.stderr).toMatch(/race: busy: another llmc \(pid \d+\) is compiling into it/);
    expect((await a.done).code).toBe(0);
    expect((await llmc('verify', out)).code).toBe(0);
  }, 60_000);

  it('SIGKILL at points through a compile: no artifact a loader accepts as whole; a re-run removes the leftovers and gives the same bytes', async () => {
    const ref = path.join(tmp, 'kill-ref');
    expect((await llmc('compile', big, '--target', 'ts', '--quant', 'Q8_0', '-o', ref)).code).toBe(0);
    const refBytes = readFileSync(path.join(ref, 'weights.bin'));
    for (const delay of [150, 400, 700, 1000, 1400, 1800]) {
      const out = path.join(tmp, `kill-${delay}`);
      const run = start(['compile', big, '--target', 'ts', '--quant', 'Q8_0', '-o', out]);
      await new Promise((r) => setTimeout(r, delay));
      run.child.kill('SIGKILL');
      const r = await run.done;
      if (r.code === 0) continue; // finished before the kill
      // Whatever is there is no artifact: no manifest, or a manifest the files fail.
      if (existsSync(path.join(out, 'llmc-manifest.json'))) expect((await llmc('verify', out)).code).toBe(0);
      expect((await llmc('compile', big, '--target', 'ts', '--quant', 'Q8_0', '-o', out)).code).toBe(0);
      expect(readFileSync(path.join(out, 'weights.bin')).equals(refBytes)).toBe(true);
      expect(readdirSync(out).filter((f) => f.endsWith('.tmp'))).toEqual([]);
      expect(readdirSync(tmp).filter((f) => f.startsWith(`.kill-${delay}.`))).toEqual([]);
    }
  }, 120_000);

  it('leftovers of compiles that died are removed by the next one', async () => {
    const out = path.join(tmp, 'left');
    mkdirSync(out);
    writeFileSync(path.join(out, '.weights.bin.999999999.0.tmp'), 'half');
    mkdirSync(path.join(tmp, '.left.llmc-999999999'));
    writeFileSync(path.join(tmp, '.left.llmc-lock'), '999999999');
    expect((await llmc('compile', STORIES, '--target', 'ts', '-o', out)).code).toBe(0);
    expect(readdirSync(out).sort()).toEqual(['llmc-manifest.json', 'weights.bin']);
    expect(readdirSync(tmp).filter((f) => f.startsWith('.left.'))).toEqual([]);
  });
});

describe('disk full, for every target', () => {
  const mounts: string[] = [];
  afterAll(() => {
    for (const m of mounts) execFileSync('umount', [m]);
  });
  /** A 64 KiB tmpfs (root only); null where mounting is not allowed. */
  const small = (name: string) => {
    const dir = path.join(tmp, name);
    mkdirSync(dir);
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', dir], { stdio: 'pipe' });
      mounts.push(dir);
      return dir;
    } catch {
      return null;
    }
  };
  it.each([
    ['ts', /weights\.bin: cannot write: no space left on device/],
    ['hf', /model\.safetensors: cannot write: no space left on device/],
  ])('%s: one line naming the file, nothing left behind', async (target, match) => {
    const dir = small(`full-${target}`);
    if (!dir) return console.warn(`skipped: mounting a tmpfs is not permitted here (disk-full case of ${target})`);
    await oneLine(['compile', STORIES, '--target', target, '-o', dir], match);
    expect(readdirSync(dir)).toEqual([]);
  });
});

describe('llmc verify', () => {
  it('passes a whole artifact and names the first file that differs', async () => {
    const d = path.join(tmp, 'verify');
    cpSync(art, d, { recursive: true });
    expect((await llmc('verify', d)).code).toBe(0);
    const w = readFileSync(path.join(d, 'weights.bin'));
    w[5000] ^= 1;
    writeFileSync(path.join(d, 'weights.bin'), w);
    await oneLine(['verify', d], /weights\.bin: sha256 [0-9a-f]+ differs from the manifest's/);
  });
});
