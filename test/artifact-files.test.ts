/**
 * Every file an artifact reader opens is checked before use: a qnn artifact's graph/subgraphs.json,
 * weights/shadow_index.json (against its binary files too) and config.json, a cuda artifact's
 * config.json, and the targetInfo keys that name other files. The cases the mutation campaign found
 * crashing (`biases` missing, `entries: false`, `chunk` missing, `c: null`, a value nested 100,000
 * levels) are one line naming the file and the key; fast-check mutations of each file (seeded) end
 * in acceptance or one LlmcError.
 */
import fc from 'fast-check';
import { createHash } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { artifactJsonTargets, replayRegressions, type FuzzTarget } from '../bench/fuzz-targets.js';
import { ensureBuilt } from './build-once.js';
import { llmcInProcess } from './cli.js';

const ROOT = path.resolve(__dirname, '..');
const STORIES = path.join(ROOT, 'fixtures/models/stories260K');
let tmp: string;
let qnn: string;
let cuda: string;
let targets: FuzzTarget[];
beforeAll(async () => {
  ensureBuilt();
  tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-artifact-files-'));
  qnn = path.join(tmp, 'qnn');
  cuda = path.join(tmp, 'cuda');
  expect((await llmcInProcess('compile', STORIES, '--target', 'qnn', '--passes', 'outliers', '-o', qnn)).code).toBe(0);
  expect((await llmcInProcess('compile', STORIES, '--target', 'cuda', '--quant', 'fp32', '-o', cuda)).code).toBe(0);
  targets = artifactJsonTargets({ qnn, cuda }, () => {});
}, 120_000);
afterAll(() => {
  targets?.[0]?.close();
  rmSync(tmp, { recursive: true, force: true });
});

/** The manifest made to list `file` as it is now (a damaged file the manifest agrees with reaches the reader). */
function relist(dir: string, file: string) {
  const mf = path.join(dir, 'llmc-manifest.json');
  const m = JSON.parse(readFileSync(mf, 'utf8'));
  const e = m.files.find((x: { path: string }) => x.path === file);
  e.size = statSync(path.join(dir, file)).size;
  e.sha256 = createHash('sha256').update(readFileSync(path.join(dir, file))).digest('hex');
  writeFileSync(mf, JSON.stringify(m));
}

let n = 0;
/** A copy of `dir` with `file`'s JSON edited; `llmc run` on it must fail with one line matching `match`. */
async function refused(dir: string, file: string, edit: (v: any) => unknown, match: RegExp) {
  const d = path.join(tmp, `e${n++}`);
  cpSync(dir, d, { recursive: true });
  const f = path.join(d, file);
  const v = JSON.parse(readFileSync(f, 'utf8'));
  const out = edit(v);
  writeFileSync(f, typeof out === 'string' ? out : JSON.stringify(out ?? v));
  relist(d, file);
  const r = await llmcInProcess('run', d, '--prompt-ids', '1,2', '-n', '2');
  expect(r.code, r.stderr).toBe(1);
  const lines = r.stderr.trim().split('\n');
  expect(lines, r.stderr).toHaveLength(1);
  expect(lines[0]).not.toMatch(/internal error/);
  expect(lines[0]).toMatch(match);
}

describe('qnn artifact files', () => {
  it('shadow_index.json without biases, with entries: false, rows past the file', async () => {
    await refused(qnn, 'weights/shadow_index.json', (v) => void delete v.biases, /shadow_index\.json: biases: expected record/);
    await refused(qnn, 'weights/shadow_index.json', (v) => void (v.entries = false), /shadow_index\.json: entries: expected array/);
    await refused(qnn, 'weights/shadow_index.json', (v) => void (v.entries[1].coldOffset = 1e9), /shadow_index\.json: entries\[1\]\.coldOffset: its rows run past coldBytes/);
    await refused(qnn, 'weights/shadow_index.json', (v) => void (v.entries[0].hot[0] = 9999), /entries\[0\]\.hot: hot channels must be distinct and below rows/);
  });
  it('a shadow file shorter than the index says', async () => {
    const d = path.join(tmp, 'short');
    cpSync(qnn, d, { recursive: true });
    truncateSync(path.join(d, 'weights/shadow_cold.bin'), 10);
    relist(d, 'weights/shadow_cold.bin');
    const r = await llmcInProcess('run', d, '--prompt-ids', '1,2', '-n', '2');
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr.trim()).toMatch(/shadow_cold\.bin: is 10 bytes, weights\/shadow_index\.json says \d+: the artifact is damaged/);
  });
  it('subgraphs.json without chunk, with c: null, a NaN-making shape, a file outside the artifact, nested 100,000 levels', async () => {
    await refused(qnn, 'graph/subgraphs.json', (v) => void delete v.chunk, /subgraphs\.json: chunk: expected object/);
    await refused(qnn, 'graph/subgraphs.json', (v) => void (v.chunk.c = null), /subgraphs\.json: chunk\.c: expected number/);
    await refused(qnn, 'graph/subgraphs.json', (v) => void (v.subgraphs.find((s: any) => s.kind === 'attention').inputs.find((i: any) => /past_key_values\.\d+\.key/.test(i.name)).shape[1] = 'heads'), /subgraphs\.json: subgraphs\[\d+\] \(l0_attn\)\.inputs \(past_key_values\.0\.key\): has shape \[1, "heads", .*config\.json says \[1, 4, past, 8\]/);
    // a past shape of another size (fuzz: 93e9 heads), and no subgraph writing a layer's present K/V (the runner reads both)
    await refused(qnn, 'graph/subgraphs.json', (v) => void (v.subgraphs.find((s: any) => s.kind === 'attention').inputs.find((i: any) => /past_key_values\.\d+\.value/.test(i.name)).shape[1] = 93099585216), /past_key_values\.0\.value\): has shape \[1, 93099585216, .*config\.json says/);
    await refused(qnn, 'graph/subgraphs.json', (v) => void v.subgraphs.forEach((s: any) => (s.outputs = s.outputs.filter((o: any) => o.name !== 'present.1.value'))), /subgraphs\.json: subgraphs: no subgraph lists present\.1\.value among its outputs/);
    await refused(qnn, 'graph/subgraphs.json', (v) => void (v.subgraphs[1].file = '../../etc/passwd'), /subgraphs\[1\]\.file: is not a file of the artifact/);
    await refused(qnn, 'graph/subgraphs.json', (v) => `{"x": ${'['.repeat(100_000)}${']'.repeat(100_000)}, ${JSON.stringify(v).slice(1)}`, /subgraphs\.json: not valid JSON for llmc: nested deeper than 64 levels/);
  });
  it('config.json nested deep', async () => {
    await refused(qnn, 'config.json', (v) => `{"x": ${'['.repeat(100_000)}${']'.repeat(100_000)}, ${JSON.stringify(v).slice(1)}`, /config\.json: not valid JSON for llmc: nested deeper than 64 levels/);
  });
});

describe('targetInfo keys that name files', () => {
  it("a level's file outside the artifact is refused by key (each target's declared targetInfo)", async () => {
    // targetInfo.levels is read only with --level; a gguf artifact's targetInfo.file always.
    const { GGUF_LEVELS_INFO } = await import('../backends/gguf/levels/info.js');
    const { GGUF_INFO } = await import('../backends/gguf/info.js');
    const level = { id: '1', nominal: 0.5, paramFrac: 0.5, file: '/etc/passwd', kvGroups: 1, heads: 2, ffn: 8, adaptersMerged: false };
    expect(() => GGUF_LEVELS_INFO.read({ format: 'gguf-levels', widths: 'uniform', levels: [level] }, 'm.json')).toThrow(/^targetInfo\.levels\[0\]\.file: is not a file of the artifact/);
    expect(() => GGUF_INFO.read({ file: 7 }, 'm.json')).toThrow(/targetInfo\.file: expected string/);
  });
});

describe('property-based: mutated artifact JSON files end in acceptance or one LlmcError (seeded)', () => {
  it.each(['qnn graph/subgraphs.json', 'qnn weights/shadow_index.json', 'qnn config.json', 'cuda config.json'])('%s', async (name) => {
    const t = targets.find((x) => x.name === name)!;
    expect(t).toBeDefined();
    let accepted = 0;
    await fc.assert(
      fc.asyncProperty(t.input, async (input) => {
        if (await t.run(input)) accepted++;
      }),
      // Most mutants are refused before the qnn simulation (~0.3 s a run) starts: a small sample here, the long run is bench/fuzz.
      { seed: 36, numRuns: 60 },
    );
    // Most nodes of shadow_index.json are row indices and offsets that must be exact: a small sample may accept none.
    if (!name.includes('shadow')) expect(accepted).toBeGreaterThan(0);
  }, 120_000);

  it('the seed corpus\'s regressions of these files (an output shape of letters, a float input fed more values than its shape lists): acceptance or one LlmcError now', async () => {
    // Each mutant's bytes are a file of bench/fuzz-corpus/regressions/: a crash, or over 10 s, throws naming it.
    const { replayed } = await replayRegressions(targets);
    expect(replayed).toBeGreaterThan(0);
  }, 60_000);
});

describe('llmc run checks every file\'s sha256 in the background (no --verify needed)', () => {
  it('a flipped byte in weights.bin (size kept): one line naming it, nothing on stdout', async () => {
    const d = path.join(tmp, 'flip');
    expect((await llmcInProcess('compile', STORIES, '--target', 'ts', '--quant', 'Q8_0', '-o', d)).code).toBe(0);
    const ok = await llmcInProcess('run', d, '--prompt-ids', '1', '-n', '2');
    expect(ok.code, ok.stderr).toBe(0);
    const w = path.join(d, 'weights.bin');
    const b = readFileSync(w);
    b[b.length >> 1] ^= 0x10;
    writeFileSync(w, b);
    const r = await llmcInProcess('run', d, '--prompt-ids', '1', '-n', '2');
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/weights\.bin: sha256 [0-9a-f]{64} differs from the manifest's [0-9a-f]{64}: the file was changed; compile again/);
  });
});
