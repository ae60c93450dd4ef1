/**
 * docs/ci.md's GitHub Actions and GitLab CI examples run the same commands; this runs them, exactly
 * as written there (`npx llmc` being this checkout's bin/llmc.js), with the page's budget file, on
 * the shipped stories260K, in a fresh directory.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt } from './build-once.js';
import { linkSharedCache } from './shared-cache.js';

const ROOT = path.resolve(__dirname, '..');
const DOC = path.join(ROOT, 'docs/ci.md');

/** The fenced block whose opening line starts with "```" + `info`. */
function fenced(text: string, info: string): string {
  const start = text.indexOf('```' + info);
  if (start < 0) throw new Error(`docs/ci.md has no \`\`\`${info} block`);
  const body = text.indexOf('\n', start) + 1;
  return text.slice(body, text.indexOf('\n```', body));
}

/** The shell lines of a CI example, without the install step. */
const commands = (yaml: string, re: RegExp) =>
  yaml
    .split('\n')
    .map((l) => l.match(re)?.[1])
    .filter((c): c is string => c !== undefined && !c.startsWith('npm install'));

let tmp: string;
beforeAll(async () => {
  ensureBuilt();
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-ci-'));
});
afterAll(async () => fsp.rm(tmp, { recursive: true, force: true }));

describe('docs/ci.md', () => {
  it('the GitHub Actions and GitLab CI examples run as written: compile with --check, check --json, report', async () => {
    const doc = await fsp.readFile(DOC, 'utf8');
    const github = commands(fenced(doc, 'yaml\n# .github/workflows/model.yml'), /^\s+- run: (.+)$/);
    const gitlab = commands(fenced(doc, 'yaml\n# .gitlab-ci.yml'), /^\s{4}- (.+)$/);
    expect(github.length).toBeGreaterThanOrEqual(4);
    expect(gitlab).toEqual(github);
    expect(github.filter((c) => c.startsWith('npx llmc ')).map((c) => c.split(' ')[2])).toEqual(['compile', 'check', 'report']);

    await fsp.writeFile(path.join(tmp, 'budgets.json'), fenced(doc, 'json budgets.json'));
    await fsp.symlink(path.join(ROOT, 'fixtures'), path.join(tmp, 'fixtures'));
    // The run's cache: the page's compile trains the same levels as `llmc compile --help`'s example (test/first-hour).
    linkSharedCache(tmp);
    const llmc = `node ${JSON.stringify(path.join(ROOT, 'bin/llmc.js'))}`;
    for (const c of github) {
      const line = c.replace(/^npx llmc /, `${llmc} `);
      try {
        // Asynchronous: a long synchronous child blocks the test worker past vitest's 60 s RPC timeout.
        await promisify(execFile)('bash', ['-euo', 'pipefail', '-c', line], { cwd: tmp, env: { ...process.env, CI: 'true' } });
      } catch (e) {
        throw new Error(`${c}: exit ${(e as { code: number }).code}: ${String((e as { stderr: string }).stderr)}`);
      }
    }
    const check = JSON.parse(await fsp.readFile(path.join(tmp, 'out/check.json'), 'utf8'));
    expect(check).toMatchObject({ schema: 'llmc-check/1', ok: true, target: 'ts' });
    expect(Object.keys(check.metrics).sort()).toEqual(['bytes', 'greedy_agreement', 'kl_delta', 'kl_p99', 'ppl_delta', 'ppl_ratio', 'tokens_per_s']);
    const html = await fsp.readFile(path.join(tmp, 'out/report.html'), 'utf8');
    expect(html).toContain('data-section="quality"');
    expect(existsSync(path.join(tmp, 'out/model/llmc-manifest.json'))).toBe(true);
  }, 300_000); // the compile trains a LoRA for two levels (recovery; unless first-hour's examples did) and measures quality
});
