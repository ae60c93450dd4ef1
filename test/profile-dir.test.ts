/**
 * llmc profile: every measurement a pass needs, once, into a profile directory (per-stage atomic
 * files, resumable, cache policies), reused by compile --profile (same bytes, nothing recomputed)
 * and read by llmc report; a profile of another checkpoint is refused.
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findProfiles } from '../src/measure/store.js';
import { llmcInProcess } from './cli.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
let prof: string;
let first: { code: number; stdout: string; stderr: string };
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-profile-'));
  prof = path.join(tmp, 'profile');
  first = await llmcInProcess('profile', STORIES, '-o', prof, '--passes', 'reorder');
});
afterAll(async () => fsp.rm(tmp, { recursive: true, force: true }));

const stageLines = (stderr: string) => stderr.split('\n').filter((l) => l.startsWith('stage '));
const mtimes = async (dir: string) => Object.fromEntries(await Promise.all((await fsp.readdir(dir)).filter((f) => f !== 'llmc-profile.json').map(async (f) => [f, (await fsp.stat(path.join(dir, f))).mtimeMs])));

describe('llmc profile', () => {
  it('measures each stage once into the directory; a second run reads them all', async () => {
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toBe(`wrote ${prof}: 3 stage(s) for reorder\n`);
    expect(stageLines(first.stderr).map((l) => l.replace(/: [\d.]+ s$/, ': computed'))).toEqual([
      'stage 1 reorder/calibration: computed',
      'stage 2 reorder/layer-loss: computed',
      'stage 3 reorder/unit-importance: computed',
    ]);
    const index = JSON.parse(await fsp.readFile(path.join(prof, 'llmc-profile.json'), 'utf8'));
    expect(index).toMatchObject({ format: 'llmc-profile-dir', version: 1, complete: true, passes: [{ name: 'reorder', options: {}, record: 'elastic-prefix/2' }] });
    expect(index.stages.map((s: { kind: string }) => s.kind)).toEqual(['calibration', 'layer-loss', 'unit-importance']);
    const before = await mtimes(prof);
    const again = await llmcInProcess('profile', STORIES, '-o', prof, '--passes', 'reorder', '--json');
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout).stages).toEqual(index.stages);
    expect(await mtimes(prof)).toEqual(before);
  });

  it('compile --profile reuses it: nothing is computed into the cache, and the artifact is byte-identical to a plain compile', async () => {
    const cache = path.join(tmp, 'empty-cache');
    const a = await llmcInProcess('compile', STORIES, '-t', 'ts', '--passes', 'reorder', '--opt', 'reorder.recover=none', '--profile', prof, '--cache-dir', cache, '-o', path.join(tmp, 'a'));
    expect(a.code, a.stderr).toBe(0);
    expect(existsSync(cache)).toBe(false);
    const b = await llmcInProcess('compile', STORIES, '-t', 'ts', '--passes', 'reorder', '--opt', 'reorder.recover=none', '--cache-dir', path.join(tmp, 'other-cache'), '-o', path.join(tmp, 'b'));
    expect(b.code, b.stderr).toBe(0);
    for (const f of ['weights.bin', 'llmc-manifest.json']) {
      expect((await fsp.readFile(path.join(tmp, 'a', f))).equals(await fsp.readFile(path.join(tmp, 'b', f))), f).toBe(true);
    }
  });

  it('an interrupted profile resumes: finished stages are read, the missing one is computed', async () => {
    const dir = path.join(tmp, 'resume');
    await fsp.cp(prof, dir, { recursive: true });
    // As a run stopped during the importance stage leaves it: no importance files, the index incomplete.
    for (const f of await fsp.readdir(dir)) if (f.startsWith('unit-importance-')) await fsp.rm(path.join(dir, f));
    const index = JSON.parse(await fsp.readFile(path.join(dir, 'llmc-profile.json'), 'utf8'));
    await fsp.writeFile(path.join(dir, 'llmc-profile.json'), JSON.stringify({ ...index, complete: false, stages: index.stages.slice(0, 2) }));
    const r = await llmcInProcess('profile', STORIES, '-o', dir, '--passes', 'reorder');
    expect(r.code, r.stderr).toBe(0);
    const lines = stageLines(r.stderr);
    expect(lines.slice(0, 2)).toEqual(['stage 1 reorder/calibration: from the profile', 'stage 2 reorder/layer-loss: from the profile']);
    expect(lines[2]).toMatch(/^stage 3 reorder\/unit-importance: [\d.]+ s$/);
    expect(JSON.parse(await fsp.readFile(path.join(dir, 'llmc-profile.json'), 'utf8')).complete).toBe(true);
    // The recomputed stage has the same bytes (deterministic measurement).
    const name = (await fsp.readdir(prof)).find((f) => f.startsWith('unit-importance-') && f.endsWith('.bin'))!;
    expect((await fsp.readFile(path.join(dir, name))).equals(await fsp.readFile(path.join(prof, name)))).toBe(true);
  });

  it('--cache policies: redo recomputes and rewrites, readonly and off write nothing', async () => {
    // A cheap profile (no anchors to find, magnitude importance): these runs compute everything.
    const cheap = ['--passes', 'reorder', '--opt', 'reorder.anchors=0', '--opt', 'reorder.importance=magnitude', '--opt', 'reorder.calib=2', '--opt', 'reorder.heldOut=1'];
    const dir = path.join(tmp, 'redo');
    expect((await llmcInProcess('profile', STORIES, '-o', dir, ...cheap)).code).toBe(0);
    const before = await mtimes(dir);
    const redo = await llmcInProcess('profile', STORIES, '-o', dir, ...cheap, '--cache', 'redo');
    expect(redo.code, redo.stderr).toBe(0);
    expect(stageLines(redo.stderr).every((l) => / [\d.]+ s$/.test(l))).toBe(true);
    const after = await mtimes(dir);
    for (const f of Object.keys(before)) expect(after[f], f).toBeGreaterThan(before[f]);
    for (const policy of ['readonly', 'off']) {
      const out = path.join(tmp, `never-${policy}`);
      const r = await llmcInProcess('profile', STORIES, '-o', out, ...cheap, '--cache', policy);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toBe(`measured (not stored) ${out}: 2 stage(s) for reorder\n`);
      expect(stageLines(r.stderr).every((l) => l.endsWith(', not stored'))).toBe(true);
      expect(existsSync(out)).toBe(false);
    }
    const bad = await llmcInProcess('profile', STORIES, '-o', dir, '--cache', 'sometimes');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toBe('llmc: --cache must be one of on, off, redo, readonly, got "sometimes"\n');
  });

  it('a profile of another checkpoint is refused by compile --profile and by profile -o; a non-profile directory too', async () => {
    const other = path.join(tmp, 'other');
    await fsp.cp(STORIES, other, { recursive: true });
    const config = JSON.parse(await fsp.readFile(path.join(other, 'config.json'), 'utf8'));
    await fsp.writeFile(path.join(other, 'config.json'), JSON.stringify({ ...config, rms_norm_eps: 1e-6 }));
    const out = path.join(tmp, 'refused');
    const r = await llmcInProcess('compile', other, '-t', 'ts', '--passes', 'reorder', '--profile', prof, '-o', out);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(new RegExp(`^llmc: ${prof}: is a profile of another checkpoint \\(.*stories260K, sha256 [0-9a-f]{12}…\\), not of ${other} \\(sha256 [0-9a-f]{12}…\\); profile this model with llmc profile\\n$`));
    expect(existsSync(out)).toBe(false);
    const p = await llmcInProcess('profile', other, '-o', prof, '--passes', 'reorder');
    expect(p.code).toBe(1);
    expect(p.stderr).toMatch(/is a profile of another checkpoint/);
    const notProfile = await llmcInProcess('compile', STORIES, '-t', 'ts', '--profile', STORIES, '-o', out);
    expect(notProfile.code).toBe(1);
    expect(notProfile.stderr).toBe(`llmc: ${STORIES}: not a profile directory (no llmc-profile.json; make one with llmc profile)\n`);
  });

  it('--calib FILE of token ids (a model without a tokenizer): the calibration windows are the file\'s; ids outside the vocabulary are refused', async () => {
    const ids = Array.from({ length: 3 }, (_, i) => [1, ...Array.from({ length: 40 }, (_, t) => 3 + ((37 * i + 101 * t) % 509))]);
    const file = path.join(tmp, 'ids.json');
    await fsp.writeFile(file, JSON.stringify(ids));
    const dir = path.join(tmp, 'ids-profile');
    const r = await llmcInProcess('profile', STORIES, '-o', dir, '--passes', 'reorder', '--calib', file, '--opt', 'reorder.calib=2', '--opt', 'reorder.heldOut=1', '--opt', 'reorder.calibLength=16', '--opt', 'reorder.anchors=0', '--opt', 'reorder.importance=magnitude');
    expect(r.code, r.stderr).toBe(0);
    const [calib] = await findProfiles(dir, 'calibration');
    // Windows of 16 over each sequence in turn: the first two calibrate, the third is held out.
    expect(Array.from(calib.arrays.calib)).toEqual([...ids[0].slice(0, 16), ...ids[0].slice(16, 32)]);
    expect(Array.from(calib.arrays.heldOut)).toEqual(ids[1].slice(0, 16));
    expect(calib.keyParts.source).toMatchObject({ text: file });
    await fsp.writeFile(file, JSON.stringify([[1, 2, 512]]));
    const bad = await llmcInProcess('profile', STORIES, '-o', path.join(tmp, 'bad-ids'), '--calib', file);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toBe(`llmc: ${file}: [0][2]: token id 512 is outside the vocabulary [0, 512)\n`);
  });

  it('llmc report of a profile: the checkpoint\'s sizes and the reorder measurements, no quality table', async () => {
    const r = await llmcInProcess('report', prof, '--json');
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.input.kind).toBe('profile');
    expect(report.sections.map((s: { id: string }) => s.id)).toEqual(['summary', 'sizes', 'reorder']);
    const reorder = report.sections[2].data;
    expect(reorder.layerLoss).toHaveLength(5);
    expect(reorder.cumulativeImportance.mlp).toHaveLength(5);
    expect(reorder.cumulativeImportance.mlp[1].at(-1)).toEqual([1, 1]);
    expect(reorder.levels).toEqual([]);
    expect(report.sections[1].data.totalBytes).toBe(260_032 * 4);
  });
});
