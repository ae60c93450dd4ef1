/**
 * The ts target after `--passes reorder`: the TS runtime runs level L by slicing weight prefixes
 * (widths from the manifest). Its output must equal the ORIGINAL model with the dropped units
 * masked (o_proj / down_proj columns zeroed), compiled independently to its own ts artifact; the
 * full level must reproduce the reference greedy ids.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { compile } from '../src/app/compile/compile.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { silentProgress } from '../src/core/util/progress.js';
import type { ReorderMetadata } from '../passes/reorder/analyze.js';
import { ELASTIC_LEVELS, findRecord, levelWidths, selectLevel as selectLevelOf, type PassRecord } from '../src/core/records/index.js';

const selectLevel = (passes: PassRecord[] | undefined, request: string) => selectLevelOf(findRecord(passes, ELASTIC_LEVELS)?.levels ?? null, request);
import { levelMasks, maskSource } from '../passes/reorder/masks.js';
import type { ModelSource } from '../src/core/checkpoint/source.js';
import { relErr } from './numeric.js';
import { llmcInProcess } from './cli.js';

const MODEL = path.resolve(__dirname, '../fixtures/models/stories260K');
const PROMPT = [1, 461, 461, 401, 401, 401, 461, 378, 455, 473, 456, 435, 299, 362, 409, 283, 264];
let tmp: string;
let src: Checkpoint;

const emit = (source: ModelSource, out: string, passes: { name: string; options: Record<string, string> }[]) =>
  compile({ source, target: 'ts', outDir: out, passes, quant: 'F32', progress: silentProgress, note: () => {}, cacheDir: path.join(tmp, 'cache') });

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-reorder-rt-'));
  src = await openCheckpoint(MODEL);
});
afterAll(async () => {
  await src?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

describe('ts runtime levels', () => {
  it('level L of the reordered artifact equals the original with the dropped units masked; full level = reference', async () => {
    const out = path.join(tmp, 'elastic');
    const manifest = await emit(src, out, [{ name: 'reorder', options: { importance: 'activation', levels: '0.5,0.75,1', evaluate: 'false', recover: 'none' } }]);
    const md = manifest.passes[0].metadata as unknown as ReorderMetadata;
    const model = await loadDir(out);
    const ref = JSON.parse(await fsp.readFile(path.join(MODEL, 'reference.json'), 'utf8')).greedy_ids as number[];
    const full = selectLevel(manifest.passes, '1');
    const ids: number[] = [];
    for await (const id of model.generate([1], { maxTokens: ref.length, stopTokens: [], widths: levelWidths(full) })) ids.push(id);
    expect(ids).toEqual(ref);
    for (const req of ['0.5', '0.75']) {
      const lv = selectLevel(manifest.passes, req);
      expect(lv.nominal).toBe(Number(req));
      const masked = path.join(tmp, `masked-${req}`);
      await emit(maskSource(src, levelMasks(src.spec, md.orders, lv.layers), `mask-${req}`), masked, []);
      const ref2 = await loadDir(masked);
      const want = ref2.forward(PROMPT);
      const got = model.forward(PROMPT, model.newCache(), { widths: levelWidths(lv) });
      const err = relErr(got, want);
      expect(err).toBeLessThan(1e-5);
      // Not vacuous: the level differs from the full model.
      expect(relErr(model.forward(PROMPT), want)).toBeGreaterThan(1e-2);
    }
  });
});

const llmc = llmcInProcess;

describe('CLI: compile --passes reorder, run --level', () => {
  it('ts artifact: --level 1 gives the reference ids, --level 0.5 runs the smaller model, bad levels are usage errors; hf output runs', async () => {
    const ref = JSON.parse(await fsp.readFile(path.join(MODEL, 'reference.json'), 'utf8')).greedy_ids as number[];
    const cache = path.join(tmp, 'cli-cache');
    const ts = path.join(tmp, 'cli-ts');
    const c = await llmc('compile', MODEL, '--target', 'ts', '-q', 'F32', '--passes', 'reorder', '--importance', 'activation', '--levels', '0.5,1', '--opt', 'reorder.evaluate=false', '--opt', 'reorder.recover=none', '--cache-dir', cache, '-o', ts);
    expect(c.code).toBe(0);
    const run = async (dir: string, ...extra: string[]) => llmc('run', dir, '--prompt-ids', '1', '-n', String(ref.length), '--json', ...extra);
    const full = await run(ts, '--level', '1');
    expect(full.code).toBe(0);
    expect(JSON.parse(full.stdout).generated_ids).toEqual(ref);
    const half = await run(ts, '--level', '0.5');
    expect(half.code).toBe(0);
    expect(JSON.parse(half.stdout).generated_ids).not.toEqual(ref);
    const bad = await run(ts, '--level', '0.1');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/no level is as small as 0.1/);
    const hf = path.join(tmp, 'cli-hf');
    expect((await llmc('compile', MODEL, '--target', 'hf', '--passes', 'reorder', '--importance', 'activation', '--opt', 'reorder.evaluate=false', '--opt', 'reorder.recover=none', '--cache-dir', cache, '-o', hf)).code).toBe(0);
    const hfRun = await run(hf);
    expect(hfRun.code).toBe(0);
    expect(JSON.parse(hfRun.stdout).generated_ids).toEqual(ref);
    expect((await llmc('compile', MODEL, '--target', 'hf', '--importance', 'taylor', '-o', path.join(tmp, 'x'))).code).toBe(2);
  });
});
