import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { PASSES } from '../passes/index.js';
import { TARGETS } from '../backends/index.js';
import { buildProgram } from '../src/app/cli/main.js';
import { ensureBuilt } from './build-once.js';

const ROOT = path.resolve(__dirname, '..');
const llmc = (...args: string[]) => spawnSync('node', [path.join(ROOT, 'bin/llmc.js'), ...args], { encoding: 'utf8' });

describe('llmc --help / --version', () => {
  beforeAll(() => ensureBuilt());

  it('the target list shown in --help is the backend registry', () => {
    const help = llmc('compile', '--help').stdout.replace(/\s+/g, ' ');
    expect(help).toContain(`output target: ${TARGETS.map((t) => t.name).sort().join(', ')}`);
  });

  it('compile --help names the environment it reads (the source digest cache and how to turn it off)', () => {
    const help = llmc('compile', '--help').stdout;
    expect(help).toMatch(/LLMC_DIGEST_CACHE .*\n.*off: hash the checkpoint every time/);
  });

  it('--version prints package.json version', async () => {
    const pkg = (await import('../package.json', { with: { type: 'json' } })).default as { version: string };
    const r = llmc('--version');
    expect(r.status).toBe(0);
    expect(r.stdout.trim()).toBe(pkg.version);
  });

  it.each(['compile', 'run', 'inspect'])('`llmc %s --help` explains the command and exits 0', (cmd) => {
    const r = llmc(cmd, '--help');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain(`Usage: llmc ${cmd}`);
    expect(r.stdout).toMatch(/Options:/);
  });

  it('a reader that stops early (llmc compile --help | head -1) ends it quietly: exit 0, no stack trace', () => {
    const r = spawnSync('sh', ['-c', `node ${JSON.stringify(path.join(ROOT, "bin/llmc.js"))} compile --help | head -c 1 >/dev/null`], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
  });

  it('an unknown command is a usage error (exit 2)', () => {
    const r = llmc('frobnicate');
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/unknown command/);
  });
});

describe('help is short and true; every flag is documented; every suggestion exists', () => {
  beforeAll(() => ensureBuilt());

  it.each(['compile', 'run', 'inspect', 'list', 'verify', 'check', 'profile', 'report'])('`llmc %s --help` fits in 60 lines', (cmd) => {
    const r = llmc(cmd, '--help');
    expect(r.status).toBe(0);
    expect(r.stdout.split('\n').length, r.stdout).toBeLessThanOrEqual(60);
  });

  it('compile --help points to llmc list, which holds the catalogue: every target and pass with every option and its default', () => {
    const help = llmc('compile', '--help').stdout;
    expect(help).toMatch(/llmc list targets \| passes \| formats/);
    expect(help).not.toMatch(/--opt cuda\.int4/);
    const list = llmc('list');
    expect(list.status).toBe(0);
    const flat = list.stdout.replace(/\s+/g, ' ');
    for (const owner of [...TARGETS, ...PASSES]) {
      expect(list.stdout).toContain(`  ${owner.name}: `);
      for (const o of owner.options.specs) {
        expect(flat).toContain(`--opt ${owner.name}.${o.key}: ${o.help.replace(/\s+/g, ' ')}${o.default !== undefined ? ` (default: ${o.default.replace(/\s+/g, ' ')})` : ''}`);
      }
    }
    for (const t of TARGETS) expect(flat).toContain(`${t.name}: ${t.formats.quant.join(', ')}`);
  });

  it('every flag of every command is in the README', async () => {
    const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    const missing = (await buildProgram()).commands.flatMap((c) => c.options.filter((o) => o.long && !readme.includes(o.long)).map((o) => `${c.name()} ${o.long}`));
    expect(missing).toEqual([]);
  });

  it('every flag, --opt key and command an error or note suggests exists', async () => {
    const program = await buildProgram();
    const flags = new Set(['--help', '--version', '--debug', ...program.commands.flatMap((c) => c.options.map((o) => o.long!))]);
    const commands = new Set(program.commands.map((c) => c.name()));
    const owners = new Map([...TARGETS, ...PASSES].map((o) => [o.name, new Set(o.options.specs.map((s) => s.key))]));
    const files: string[] = [];
    const walk = (d: string) => {
      for (const e of readdirSync(d)) {
        const f = path.join(d, e);
        if (statSync(f).isDirectory()) walk(f);
        else if (f.endsWith('.ts') && !f.endsWith('.d.ts')) files.push(f);
      }
    };
    for (const d of ['src', 'backends', 'passes']) walk(path.join(ROOT, d));
    // The arguments of every error, refusal, note and warning (balanced parentheses).
    const call = /(?:new \w*Error|\bnote|notes\.push|\bwarn|\brefuse)\(/g;
    const bad: string[] = [];
    let messages = 0;
    for (const f of files) {
      const src = readFileSync(f, 'utf8');
      for (const m of src.matchAll(call)) {
        let depth = 1;
        let j = m.index! + m[0].length;
        for (; j < src.length && depth; j++) depth += src[j] === '(' ? 1 : src[j] === ')' ? -1 : 0;
        const text = src.slice(m.index! + m[0].length, j);
        const where = `${path.relative(ROOT, f)}:${src.slice(0, m.index).split('\n').length}`;
        messages++;
        for (const [, flag] of text.matchAll(/(?<![\w-])(--[a-z][a-z0-9-]*)/g)) if (!flags.has(flag)) bad.push(`${where}: ${flag}`);
        for (const [, owner, key] of text.matchAll(/--opt ([a-z][a-z0-9-]*)\.([a-zA-Z]+)/g)) {
          if (!owners.get(owner)?.has(key)) bad.push(`${where}: --opt ${owner}.${key}`);
        }
        // `llmc <command>` followed by what a command line holds next (not prose such as "llmc runs ts artifacts").
        for (const [, cmd] of text.matchAll(/\bllmc ([a-z]+)(?=$|[\s][-<A-Z./]|[)'`;,])/gm)) if (!commands.has(cmd)) bad.push(`${where}: llmc ${cmd}`);
      }
    }
    expect(messages).toBeGreaterThan(300);
    expect(bad).toEqual([]);
  });

  it('format names are one spelling everywhere, any case: --target cuda --quant F16 is fp16, q4_k_m is Q4_K_M', () => {
    const dry = (...a: string[]) => llmc('compile', path.join(ROOT, 'fixtures/models/stories260K'), '--print-config', ...a);
    const cuda = dry('--target', 'cuda', '--quant', 'F16', '--opt', 'cuda.lmHead=FP32');
    expect(cuda.status, cuda.stderr).toBe(0);
    expect(JSON.parse(cuda.stdout).target.quant).toBe('fp16');
    const gguf = dry('--target', 'gguf', '--quant', 'q4_k_m');
    expect(gguf.status, gguf.stderr).toBe(0);
    expect(JSON.parse(gguf.stdout).target.quant).toBe('Q4_K_M');
    const ts = dry('--target', 'ts', '--quant', 'fp16');
    expect(JSON.parse(ts.stdout).target.quant).toBe('F16');
    const refused = dry('--target', 'cuda', '--quant', 'Q8_0');
    expect(refused.status).toBe(2);
    expect(refused.stderr).toMatch(/unknown quant type "Q8_0" for target cuda; valid: fp32, fp16/);
  });
});
