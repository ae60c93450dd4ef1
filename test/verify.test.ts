/** `llmc verify`: every bad file reported, one line each, exit 1; `--json` prints its object on failure too. */
import { appendFileSync, promises as fsp, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { llmcInProcess as llmc } from './cli.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
let art: string;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-verify-'));
  art = path.join(tmp, 'hf');
  const r = await llmc('compile', STORIES, '--target', 'hf', '-o', art);
  expect(r.code, r.stderr).toBe(0);
}, 60_000);
afterAll(() => fsp.rm(tmp, { recursive: true, force: true }));

describe('llmc verify', () => {
  it('a whole artifact: exit 0; --json {artifact, files, ok: true, problems: []}', async () => {
    const files = JSON.parse(readFileSync(path.join(art, 'llmc-manifest.json'), 'utf8')).files as { path: string; sha256: string }[];
    // The manifest's hashes are the files' own (computed here, independently of llmc).
    for (const f of files) expect(createHash('sha256').update(readFileSync(path.join(art, f.path))).digest('hex')).toBe(f.sha256);
    const r = await llmc('verify', art, '--json');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ artifact: art, files: files.length, ok: true, problems: [] });
  });

  it('every bad file, one line each (not only the first), exit 1; --json prints them all', async () => {
    const d = path.join(tmp, 'damaged');
    await fsp.cp(art, d, { recursive: true });
    appendFileSync(path.join(d, 'config.json'), ' ');
    rmSync(path.join(d, 'model.safetensors'));
    const r = await llmc('verify', d);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    const lines = r.stderr.trim().split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^llmc: .*damaged\/config\.json: \d+ bytes, the manifest says \d+/);
    expect(lines[1]).toMatch(/^llmc: .*damaged\/model\.safetensors: missing/);
    const j = await llmc('verify', d, '--json');
    expect(j.code).toBe(1);
    const out = JSON.parse(j.stdout);
    expect(out).toMatchObject({ artifact: d, files: 2, ok: false });
    expect(out.problems.map((p: { file: string }) => path.basename(p.file))).toEqual(['config.json', 'model.safetensors']);
    // Same size, other bytes: the sha256 names it.
    const same = path.join(tmp, 'flipped');
    await fsp.cp(art, same, { recursive: true });
    const w = readFileSync(path.join(same, 'model.safetensors'));
    w[w.length - 1] ^= 1;
    writeFileSync(path.join(same, 'model.safetensors'), w);
    const f = await llmc('verify', same, '--json');
    expect(f.code).toBe(1);
    expect(JSON.parse(f.stdout).problems[0].problem).toMatch(/^sha256 [0-9a-f]{64} differs from the manifest's/);
  });

  it('not an artifact: --json still prints its object (ok false, the reason), exit 1', async () => {
    const r = await llmc('verify', STORIES, '--json');
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout)).toMatchObject({ artifact: STORIES, files: 0, ok: false, problems: [{ file: STORIES, problem: expect.stringMatching(/^not an llmc artifact/) }] });
    const plain = await llmc('verify', STORIES);
    expect(plain.code).toBe(1);
    expect(plain.stderr).toMatch(/^llmc: .*stories260K: not an llmc artifact/);
  });

  it('llmc run names the first bad file and how many more, pointing to llmc verify', async () => {
    const d = path.join(tmp, 'damaged');
    const r = await llmc('run', d, '--prompt-ids', '1', '-n', '1');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/config\.json: \d+ bytes, the manifest says \d+: .* \(and 1 more file: llmc verify .*damaged lists them\)\n$/);
  });
});

describe('warnings once', () => {
  it('a warning raised per level is printed once (gguf-levels without a tokenizer: one placeholder-vocabulary line)', async () => {
    const r = await llmc('compile', STORIES, '--target', 'gguf-levels', '--passes', 'reorder', '--levels', '0.25,0.5,1', '--opt', 'reorder.recover=none', '-o', path.join(tmp, 'levels'));
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr.match(/placeholder vocabulary/g)).toHaveLength(1);
    const j = await llmc('compile', STORIES, '--target', 'gguf-levels', '--passes', 'reorder', '--levels', '0.25,0.5,1', '--opt', 'reorder.recover=none', '-o', path.join(tmp, 'levels'), '--json');
    expect(JSON.parse(j.stdout).notes.filter((n: string) => n.includes('placeholder vocabulary'))).toHaveLength(1);
  }, 120_000);
});
