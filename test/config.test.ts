/**
 * llmc.config.json (--config, flags over it, --print-config) and compile --dry-run: the dry run's
 * files and sizes against what a real compile then writes, byte for byte.
 */
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { llmcInProcess } from './cli.js';
import { PASSES } from '../passes/index.js';
import { TARGETS } from '../backends/index.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-config-'));
});
afterAll(async () => fsp.rm(tmp, { recursive: true, force: true }));

async function config(name: string, value: unknown): Promise<string> {
  const f = path.join(tmp, name);
  await fsp.writeFile(f, typeof value === 'string' ? value : JSON.stringify(value));
  return f;
}

const printed = async (...args: string[]) => {
  const r = await llmcInProcess('compile', '--print-config', ...args);
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout);
};

describe('llmc.config.json', () => {
  const base = {
    model: STORIES,
    target: { name: 'ts', quant: 'f16', tensorTypes: { 'mlp\\.down_proj': 'F32' } },
    passes: [{ name: 'reorder', options: { levels: [0.5, 0.75, 1], evaluate: false } }],
    out: 'out/model',
  };

  it('--print-config resolves it (paths in the file relative to it, printed relative to the working directory; lists and booleans as option strings) and round-trips', async () => {
    const file = await config('a.json', base);
    const r = await printed('--config', file);
    expect(r).toEqual({
      model: STORIES,
      target: { name: 'ts', quant: 'F16', tensorTypes: { 'mlp\\.down_proj': 'F32' }, options: {} },
      passes: [{ name: 'reorder', options: { levels: '0.5,0.75,1', evaluate: 'false' } }],
      out: path.relative(process.cwd(), path.join(tmp, 'out/model')),
      cacheDir: '.llmc-cache', // the default: relative to the working directory
    });
    const again = await config('b.json', r);
    expect(await printed('--config', again)).toEqual({ ...r, out: path.relative(process.cwd(), path.resolve(tmp, r.out)), cacheDir: path.relative(process.cwd(), path.resolve(tmp, r.cacheDir)) });
  });

  it('flags override it: --quant, --opt and pass flags per option, --tensor-type after the file\'s rules, --passes replaces the list, another --target drops its options', async () => {
    const file = await config('a.json', base);
    const r = await printed('--config', file, '-q', 'Q8_0', '--levels', '0.5,1', '--opt', 'reorder.seed=7', '--tensor-type', 'mlp\\.down_proj=F16', '--tensor-type', 'q_proj=Q4_0', '-o', 'elsewhere');
    expect(r.target).toEqual({ name: 'ts', quant: 'Q8_0', tensorTypes: { q_proj: 'Q4_0', 'mlp\\.down_proj': 'F16' }, options: {} });
    expect(Object.keys(r.target.tensorTypes)).toEqual(['mlp\\.down_proj', 'q_proj']); // flags' rules last, in their order: they win
    expect(r.passes).toEqual([{ name: 'reorder', options: { levels: '0.5,1', evaluate: 'false', seed: '7' } }]);
    expect(r.out).toBe('elsewhere');
    const none = await printed('--config', file, '--passes', '', '-t', 'gguf', STORIES);
    expect(none.passes).toEqual([]);
    expect(none.target.name).toBe('gguf');
    // Options still go through the pass manager: a pass option for a pass that no longer runs is refused.
    const r2 = await llmcInProcess('compile', '--print-config', '--config', file, '--passes', '', '--opt', 'reorder.seed=1');
    expect(r2.code).toBe(2);
    expect(r2.stderr).toBe('llmc: --opt reorder.seed: pass reorder does not run; add it to --passes\n');
  });

  it('./llmc.config.json is read when present', async () => {
    const dir = path.join(tmp, 'cwd');
    await fsp.mkdir(dir);
    await fsp.writeFile(path.join(dir, 'llmc.config.json'), JSON.stringify({ model: STORIES, target: 'gguf', passes: ['reorder'] }));
    const cwd = process.cwd();
    process.chdir(dir);
    try {
      const r = await printed();
      expect(r.target.name).toBe('gguf');
      expect(r.target.quant).toBe('F16'); // the target's default, spelled out
      expect(r.passes).toEqual([{ name: 'reorder', options: {} }]);
    } finally {
      process.chdir(cwd);
    }
  });

  it('a bad config: one line naming the key, exit 2', async () => {
    const cases: [unknown, string][] = [
      ['{"target": ', 'not valid JSON'],
      [{ target: 5 }, 'target: must be a target name or {"name", "quant", "tensorTypes", "options"}'],
      [{ target: { name: 'tss' } }, `target.name: unknown target "tss"; available: ${TARGETS.map((t) => t.name).sort().join(', ')}`],
      [{ target: { name: 'ts', opts: {} } }, 'target.opts: unknown key; valid keys there: name, quant, tensorTypes, options'],
      [{ target: { name: 'ts', options: { x: 1 } } }, 'target.options.x: not an option of target ts (it takes none)'],
      [{ passes: ['nope'] }, `passes[0].name: unknown pass "nope"; available: ${PASSES.map((p) => p.name).sort().join(', ')}`],
      [{ passes: [{ name: 'reorder', options: { levelz: 1 } }] }, 'passes[0].options.levelz: not an option of pass reorder (it takes importance, widths, budget, budgetContext'],
      [{ passes: [{ name: 'reorder', options: { levels: { a: 1 } } }] }, 'passes[0].options.levels: must be a string, number, boolean or list'],
      [{ outt: 'x' }, 'outt: unknown key; valid keys there: model, target, passes, out, cacheDir, check'],
    ];
    for (const [value, line] of cases) {
      const file = await config('bad.json', value);
      const r = await llmcInProcess('compile', '--config', file, '--print-config');
      expect(r.code, line).toBe(2);
      expect(r.stderr.startsWith(`llmc: ${file}: ${line}`), r.stderr).toBe(true);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
    }
    const value = await llmcInProcess('compile', '--config', await config('v.json', { ...base, passes: [{ name: 'reorder', options: { levels: 2.5 } }] }), '--print-config');
    expect(value.code).toBe(2);
    expect(value.stderr).toBe('llmc: reorder.levels must be a count or comma-separated fractions in (0, 1], got "2.5"\n');
    const missing = await llmcInProcess('compile', '--config', path.join(tmp, 'none.json'), '--print-config');
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/none\.json: cannot read the config file: ENOENT/);
    const noTarget = await llmcInProcess('compile', STORIES, '--config', await config('e.json', {}), '--print-config');
    expect(noTarget.stderr).toMatch(/no target: give --target or set "target" in .*e\.json/);
  });

  it('compiles from the config file alone', async () => {
    const file = await config('c.json', { model: STORIES, target: { name: 'ts', quant: 'Q8_0' }, out: 'from-config' });
    const r = await llmcInProcess('compile', '--config', file);
    expect(r.code, r.stderr).toBe(0);
    expect(existsSync(path.join(tmp, 'from-config/weights.bin'))).toBe(true);
  });
});

describe('llmc compile --dry-run', () => {
  for (const [target, quant] of [
    ['ts', 'Q8_0'],
    ['gguf', 'Q4_K_M'],
    ['hf', 'F16'],
  ]) {
    it(`${target} ${quant}: the files and sizes a real compile then writes; nothing written`, async () => {
      const out = path.join(tmp, `dry-${target}`);
      const dry = await llmcInProcess('compile', STORIES, '-t', target, '-q', quant, '-o', out, '--dry-run', '--json');
      expect(dry.code, dry.stderr).toBe(0);
      expect(existsSync(out)).toBe(false);
      const d = JSON.parse(dry.stdout);
      const real = await llmcInProcess('compile', STORIES, '-t', target, '-q', quant, '-o', out, '--json');
      expect(real.code, real.stderr).toBe(0);
      const m = JSON.parse(real.stdout);
      const sizes = (files: { path: string; size?: number; bytes?: number }[]) => Object.fromEntries(files.map((f) => [f.path, f.size ?? f.bytes]));
      expect(sizes(d.files)).toEqual(sizes(m.files));
      expect(d.totalBytes).toBe(m.files.reduce((s: number, f: { size: number }) => s + f.size, 0));
      // Formats per tensor as the artifact records them.
      if (target === 'ts') {
        expect(d.tensors.map((t: { name: string; format: string; bytes: number }) => [t.name, t.format, t.bytes])).toEqual(m.targetInfo.tensors.map((t: { name: string; format: string; bytes: number }) => [t.name, t.format, t.bytes]));
      }
      if (target === 'gguf') expect(d.tensors.map((t: { format: string }) => t.format)).toEqual(m.targetInfo.tensors.map((t: { type: string }) => t.type));
      const groups = new Set(d.groups.map((g: { group: string }) => g.group));
      expect([...groups].sort()).toEqual(['attention', 'embedding', 'mlp', 'norms']);
    });
  }

  it('ts after reorder with recovery: the adapters are in the dry run as the real compile writes them, a group of their own', async () => {
    const out = path.join(tmp, 'dry-adapters');
    const args = ['compile', STORIES, '-t', 'ts', '--passes', 'reorder', '--levels', '0.5,1', '--opt', 'reorder.recoverSteps=4', '--opt', 'reorder.recoverData=16', '--opt', 'reorder.recoverBatch=4', '--opt', 'reorder.recoverLr=1e-2', '--cache-dir', path.join(tmp, 'dry-adapters-cache'), '-o', out, '--json'];
    const dry = await llmcInProcess(...args, '--dry-run');
    expect(dry.code, dry.stderr).toBe(0);
    const real = await llmcInProcess(...args);
    expect(real.code, real.stderr).toBe(0);
    const d = JSON.parse(dry.stdout);
    const m = JSON.parse(real.stdout);
    expect(d.files.find((f: { path: string }) => f.path === 'weights.bin').bytes).toBe(m.files.find((f: { path: string }) => f.path === 'weights.bin').size);
    const adapters = m.targetInfo.tensors.filter((t: { name: string }) => t.name.startsWith('levels.'));
    expect(adapters.length).toBeGreaterThan(0);
    expect(d.groups.find((g: { group: string }) => g.group === 'adapters')).toMatchObject({ tensors: adapters.length, bytes: adapters.reduce((s: number, t: { bytes: number }) => s + t.bytes, 0) });
  }, 120_000);

  it('text output: files, then bytes per group and format', async () => {
    const r = await llmcInProcess('compile', STORIES, '-t', 'ts', '-q', 'Q8_0', '--dry-run');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^dry run: nothing written; target ts\nfiles:\n {2}weights\.bin +330112 +322 KiB\n/);
    expect(r.stdout).toMatch(/\n {2}mlp +F16 +5 tensors +110080 +108 KiB\n/);
  });
});
