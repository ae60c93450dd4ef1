/**
 * `llmc compile --target qnn --dry-run`: the files and sizes the real compile then writes (NPU and CPU
 * graphs, encodings, shadow files, scales/outliers/subgraphs/deps, HTP configs, build script), the
 * tensors it lists, its note (NPU/CPU steps, shadow bytes), under chunk-partition the RoPE and chunk
 * attention graphs too; nothing written.
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { llmcInProcess } from './cli.js';

const STORIES = path.resolve(__dirname, '..', 'fixtures/models/stories260K');
let tmp: string;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-qnndry-'));
  // Device costs for chunk-partition (a host has one processor): NPU static work, CPU attention.
  const subgraphs = { embed: { device: 'CPU', ms: 0.1 }, qkv: { device: 'NPU', ms: 1 }, attention: { device: 'CPU', ms: 0.5, msPerChunk: 0.6 }, mlp: { device: 'NPU', ms: 2 }, head: { device: 'CPU', ms: 1 } };
  await fsp.writeFile(path.join(tmp, 'costs.json'), JSON.stringify({ format: 'llmc-chunk-costs/1', device: 'test', chunks: [{ c: 32, subgraphs }] }));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

describe('llmc compile --target qnn --dry-run', () => {
  for (const [name, opts] of [
    ['default pruning, legacy encodings', []],
    ['shadow on every linear with outliers, aimet1 encodings, chunk 24', ['--opt', 'outliers.mode=threshold', '--opt', 'outliers.tau=1', '--opt', 'qnn.encodings=aimet1', '--opt', 'qnn.chunk=24']],
    ['chunk-partition: chunk 32, its RoPE and chunk attention graphs', ['--passes', 'outliers,chunk-partition', '--opt', 'chunk-partition.chunk=32', '--opt', 'chunk-partition.nMax=2', '--opt', 'chunk-partition.costs=COSTS']],
  ] as const) {
    it(`${name}: the files and sizes the real compile writes; nothing written`, async () => {
      const out = path.join(tmp, name.replace(/\W+/g, '-'));
      const more = opts.map((o) => o.replace('COSTS', path.join(tmp, 'costs.json')));
      const args = ['compile', STORIES, '-t', 'qnn', '--passes', 'outliers', '--opt', 'outliers.calib=4', '--opt', 'outliers.calibLength=32', '--opt', 'outliers.heldOut=0', ...more, '--cache-dir', path.join(tmp, 'cache'), '-o', out, '--json'];
      const dry = await llmcInProcess(...args, '--dry-run');
      expect(dry.code, dry.stderr).toBe(0);
      expect(existsSync(out)).toBe(false);
      const real = await llmcInProcess(...args);
      expect(real.code, real.stderr).toBe(0);
      const d = JSON.parse(dry.stdout);
      const m = JSON.parse(real.stdout);
      const sizes = (files: { path: string; size?: number; bytes?: number }[]) => Object.fromEntries(files.map((f) => [f.path, f.size ?? f.bytes]));
      expect(sizes(d.files)).toEqual(sizes(m.files));
      expect(d.files.filter((f: { path: string }) => f.path.startsWith('npu/')).length).toBe(2 * m.targetInfo.graphs.npu);
      expect(d.files.some((f: { path: string; bytes: number }) => f.path === 'weights/shadow_cold.bin' && f.bytes > 0)).toBe(true);
      if (name.startsWith('chunk-partition')) expect(d.files.filter((f: { path: string }) => f.path.startsWith('cpu/chunk32/')).length).toBeGreaterThan(0);
      expect(d.totalBytes).toBe(m.files.reduce((s: number, f: { size: number }) => s + f.size, 0));
      // Tensors per group and format as the manifest's summary of the written ones.
      expect(d.groups).toEqual(m.summary.groups);
      // The note names the NPU graphs, CPU steps and shadow bytes the real compile reports.
      const note = (xs: string[]) => xs.find((n) => n.startsWith('qnn:'));
      expect(note(d.notes)).toBeDefined();
      expect(note(d.notes)).toBe(note(m.notes));
    }, 120_000);
  }
});
