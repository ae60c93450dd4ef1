import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { TARGETS } from '../backends/index.js';
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
    expect(help).toMatch(/LLMC_DIGEST_CACHE .*\n.*\n.*off: hash the checkpoint every time/);
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

  it('an unknown command is a usage error (exit 2)', () => {
    const r = llmc('frobnicate');
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/unknown command/);
  });
});
