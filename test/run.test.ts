/** `llmc run` on checkpoint directories, in-process through the CLI's main(). */
import { promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { loadTokenizer } from '../src/core/tokenizer/index.js';
import { llmcInProcess } from './cli.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
const reference = JSON.parse(readFileSync(path.join(STORIES, 'reference.json'), 'utf8')) as { greedy_ids: number[] };

const llmc = llmcInProcess;

describe('llmc run', () => {
  let tmp: string;
  beforeAll(async () => {
    tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-run-'));
  });
  afterAll(async () => {
    await fsp.rm(tmp, { recursive: true, force: true });
  });

  test('--json greedy from BOS gives reference.json greedy_ids', async () => {
    const r = await llmc('run', STORIES, '--prompt-ids', '1', '--max-tokens', '32', '--json');
    expect(r.code).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j.prompt_ids).toEqual([1]);
    expect(j.generated_ids).toEqual(reference.greedy_ids);
    expect(j.text).toBeUndefined();
    expect(j.tokens_per_second).toBeGreaterThan(0);
  });

  test('plain output is the generated ids on one line', async () => {
    const r = await llmc('run', STORIES, '--prompt-ids', '1,461', '--max-tokens', '4');
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe(reference.greedy_ids.slice(1, 5).join(' '));
  });

  test('sampling is seeded: same seed, same ids; another seed, other ids', async () => {
    const run = async (seed: string) =>
      JSON.parse((await llmc('run', STORIES, '--prompt-ids', '1', '-n', '24', '--temperature', '1', '--top-p', '0.95', '--seed', seed, '--json')).stdout)
        .generated_ids as number[];
    const a = await run('3');
    expect(await run('3')).toEqual(a);
    expect(await run('4')).not.toEqual(a);
  });

  test('stops at EOS (the EOS id is the last generated id)', async () => {
    const dir = path.join(tmp, 'eos');
    await fsp.mkdir(dir);
    await fsp.copyFile(path.join(STORIES, 'model.safetensors'), path.join(dir, 'model.safetensors'));
    const cfg = JSON.parse(await fsp.readFile(path.join(STORIES, 'config.json'), 'utf8'));
    // Make the third greedy token the EOS token.
    await fsp.writeFile(path.join(dir, 'config.json'), JSON.stringify({ ...cfg, eos_token_id: reference.greedy_ids[2] }));
    const r = await llmc('run', dir, '--prompt-ids', '1', '--max-tokens', '20', '--json');
    expect(JSON.parse(r.stdout).generated_ids).toEqual(reference.greedy_ids.slice(0, 3));
  });

  test("generation_config.json's eos_token_id stops too; a malformed one is one line naming the file", async () => {
    const dir = path.join(tmp, 'gen-eos');
    await fsp.mkdir(dir);
    await fsp.copyFile(path.join(STORIES, 'model.safetensors'), path.join(dir, 'model.safetensors'));
    await fsp.copyFile(path.join(STORIES, 'config.json'), path.join(dir, 'config.json'));
    // The first greedy id from the third on that did not come before: generation must stop right there.
    const g = reference.greedy_ids;
    const k = g.findIndex((id, i) => i >= 2 && !g.slice(0, i).includes(id));
    await fsp.writeFile(path.join(dir, 'generation_config.json'), JSON.stringify({ eos_token_id: [g[k]] }));
    const r = await llmc('run', dir, '--prompt-ids', '1', '--max-tokens', '20', '--json');
    const j = JSON.parse(r.stdout);
    expect(j.generated_ids).toEqual(g.slice(0, k + 1));
    expect(j.stop_reason).toBe('eos');
    // Streamed: the ids before the EOS.
    expect((await llmc('run', dir, '--prompt-ids', '1', '--max-tokens', '20')).stdout).toBe(`${g.slice(0, k).join(' ')}\n`);
    await fsp.writeFile(path.join(dir, 'generation_config.json'), JSON.stringify({ eos_token_id: 'two' }));
    const bad = await llmc('run', dir, '--prompt-ids', '1', '--max-tokens', '2');
    expect(bad.code).toBe(1);
    expect(bad.stdout).toBe('');
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
    expect(bad.stderr).toContain(path.join(dir, 'generation_config.json'));
  });

  test('--prompt-file that does not exist: exit 1, one line naming it', async () => {
    const missing = path.join(tmp, 'no-such-prompt.txt');
    const r = await llmc('run', STORIES, '--prompt-file', missing, '--max-tokens', '2');
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(missing);
  });

  test('a non-numeric --prompt-ids is a usage error: exit 2, one line', async () => {
    const r = await llmc('run', STORIES, '--prompt-ids', '1,two,3', '--max-tokens', '3');
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^llmc: --prompt-ids .*"1,two,3"/);
  });

  test('neither or both of --prompt-ids / --prompt: exit 2', async () => {
    expect((await llmc('run', STORIES, '--max-tokens', '3')).code).toBe(2);
    expect((await llmc('run', STORIES, '--prompt-ids', '1', '--prompt', 'hi', '--max-tokens', '3')).code).toBe(2);
  });

  test('an id outside the vocabulary: exit 2 naming it', async () => {
    const r = await llmc('run', STORIES, '--prompt-ids', '1,9999', '--max-tokens', '3');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/9999/);
  });

  test('--prompt on a model without tokenizer.json: exit 1, one line naming the model', async () => {
    const r = await llmc('run', STORIES, '--prompt', 'Once upon a time', '--max-tokens', '3');
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain(STORIES);
    expect(r.stderr).toMatch(/tokenizer/);
  });

  test('--prompt TEXT on a model with tokenizer.json: encoded prompt, decoded text', async () => {
    const dir = path.join(tmp, 'tok');
    await generateFixture(dir, { arch: 'llama', seed: 3 });
    const r = await llmc('run', dir, '--prompt', 'hello world', '--max-tokens', '6', '--json');
    expect(r.code).toBe(0);
    const j = JSON.parse(r.stdout);
    const tok = loadTokenizer(await fsp.readFile(path.join(dir, 'tokenizer.json'), 'utf8'), await fsp.readFile(path.join(dir, 'tokenizer_config.json'), 'utf8').catch(() => undefined));
    expect(tok.decode(j.prompt_ids, { skipSpecial: true })).toBe('hello world');
    expect(j.generated_ids.length).toBeGreaterThan(0);
    expect(j.text).toBe(tok.decode(j.generated_ids, { skipSpecial: true }));
    // The same ids given directly generate the same continuation.
    const byIds = await llmc('run', dir, '--prompt-ids', j.prompt_ids.join(','), '--max-tokens', '6', '--json');
    expect(JSON.parse(byIds.stdout).generated_ids).toEqual(j.generated_ids);
  });

  test('a directory that is not a checkpoint: exit 1, one line', async () => {
    const r = await llmc('run', tmp, '--prompt-ids', '1', '--max-tokens', '3');
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });
});
