/**
 * `llmc run` streams, through the real CLI (a child process, stdout read as it arrives): text as
 * tokens are chosen on onnxruntime (checkpoint) and the TS runtime (ts artifact), equal to an
 * independent decode (transformers' reference text, @huggingface/tokenizers); whole UTF-8
 * characters only; --json one object; EOS from generation_config.json ends generation and is not
 * printed; --chat renders tokenizer_config.json's template. Uses ../shared's dense-28M.
 */
import { spawn } from 'node:child_process';
import { existsSync, promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt } from './build-once.js';

const ROOT = path.resolve(__dirname, '..');
const DENSE = path.resolve(ROOT, '../shared/models/trained/dense-28M');
const STORIES = path.join(ROOT, 'fixtures/models/stories260K');
const HAS_SHARED = existsSync(path.join(DENSE, 'config.json'));
if (!HAS_SHARED) console.warn(`run-stream: ${DENSE} is absent; the dense-28M streaming tests are skipped`);

interface Spawned {
  code: number | null;
  stdout: string;
  stderr: string;
  /** stdout's chunks as they arrived, raw, each with whether the process was still running then and when (ms). */
  chunks: { bytes: Buffer; running: boolean; at: number }[];
  /** When the process exited (ms, same clock). */
  exitAt: number;
}

function llmc(args: string[], stdin?: string): Promise<Spawned> {
  return new Promise((resolve) => {
    const child = spawn('node', [path.join(ROOT, 'bin/llmc.js'), ...args], { cwd: ROOT });
    const chunks: Spawned['chunks'] = [];
    let exited = false;
    let exitAt = 0;
    let stderr = '';
    child.on('exit', () => ((exited = true), (exitAt = performance.now())));
    child.stdout.on('data', (d: Buffer) => chunks.push({ bytes: d, running: !exited, at: performance.now() }));
    child.stderr.on('data', (d) => (stderr += d));
    if (stdin !== undefined) child.stdin.end(stdin);
    child.on('close', (code) => resolve({ code, stdout: Buffer.concat(chunks.map((c) => c.bytes)).toString('utf8'), stderr, chunks, exitAt }));
  });
}

const json = (r: Spawned) => JSON.parse(r.stdout) as { prompt_ids: number[]; generated_ids: number[]; text?: string; stop_reason: string; timings: Record<string, number | null> };

let tmp: string;
let hf: HfTokenizer;
/** dense-28M compiled for the TS runtime (F32). */
let tsArtifact: string;
const reference = HAS_SHARED
  ? (JSON.parse(readFileSync(path.join(DENSE, 'reference.json'), 'utf8')) as { references: Record<string, { prompt_ids: number[]; greedy: number[]; text: string }> }).references
  : {};

/** A copy of dense-28M (weights linked) with some files replaced. */
async function denseWith(name: string, files: Record<string, string>): Promise<string> {
  const dir = path.join(tmp, name);
  await fsp.mkdir(dir);
  for (const f of await fsp.readdir(DENSE)) if (!(f in files)) await fsp.symlink(path.join(DENSE, f), path.join(dir, f));
  for (const [f, text] of Object.entries(files)) await fsp.writeFile(path.join(dir, f), text);
  return dir;
}

beforeAll(async () => {
  ensureBuilt();
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-run-stream-'));
  if (!HAS_SHARED) return;
  hf = new HfTokenizer(JSON.parse(readFileSync(path.join(DENSE, 'tokenizer.json'), 'utf8')), JSON.parse(readFileSync(path.join(DENSE, 'tokenizer_config.json'), 'utf8')));
  tsArtifact = path.join(tmp, 'dense-ts');
  const c = await llmc(['compile', DENSE, '--target', 'ts', '--no-eval', '-o', tsArtifact]);
  expect(c.code, c.stderr).toBe(0);
}, 120_000);
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

describe.skipIf(!HAS_SHARED)('llmc run streams text (dense-28M)', () => {
  const prompt = 'The function returns';

  it.each([
    ['checkpoint (onnxruntime)', () => DENSE],
    ['ts artifact (TS runtime)', () => tsArtifact],
  ])('%s: the streamed text is transformers\' reference text, no ids line; the first text arrives while it still runs', async (_, model) => {
    const ref = reference[prompt];
    const r = await llmc(['run', model(), '--prompt', prompt, '-n', String(ref.greedy.length)]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(`${ref.text}\n`);
    expect(r.stdout).toBe(`${hf.decode(ref.greedy, { skip_special_tokens: true })}\n`);
    // Written token by token: a first piece of the text came before the process ended.
    expect(r.chunks[0].running).toBe(true);
    expect(r.chunks[0].bytes.length).toBeLessThan(Buffer.byteLength(r.stdout));
    expect(r.stderr).toMatch(/48 tokens \(length limit\): prefill 4 tokens in [\d.]+ ms, decode [\d.]+ tokens\/s/);
  }, 60_000);

  it('a long generation is read in many pieces as it is produced (not one write at the end)', async () => {
    const r = await llmc(['run', tsArtifact, '--prompt', prompt, '-n', '200', '--ignore-eos']);
    expect(r.code, r.stderr).toBe(0);
    const early = r.chunks.filter((c) => c.running);
    expect(early.length).toBeGreaterThan(3);
    expect(Buffer.concat(early.slice(0, 2).map((c) => c.bytes)).length).toBeLessThan(Buffer.byteLength(r.stdout) / 2);
    // The first text came while most of the decoding was still ahead (199 steps at the rate it reports).
    const rate = Number(/decode ([\d.]+) tokens\/s/.exec(r.stderr)![1]);
    expect(r.exitAt - r.chunks[0].at).toBeGreaterThan((0.5 * 1000 * 199) / rate);
  }, 60_000);

  it('a reader that goes away (`| head`): generation stops, exit 0, no error', async () => {
    const child = spawn('node', [path.join(ROOT, 'bin/llmc.js'), 'run', tsArtifact, '--prompt', prompt, '-n', '1000', '--ignore-eos'], { cwd: ROOT });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    child.stdout.once('data', () => child.stdout.destroy());
    const code = await new Promise((resolve) => child.on('close', resolve));
    expect(stderr).not.toMatch(/EPIPE|Error/);
    expect(stderr).not.toMatch(/1000 tokens/); // it stopped early
    expect(code).toBe(0);
  }, 60_000);

  it('a character split across byte-level tokens is printed whole: every chunk of stdout is valid UTF-8', async () => {
    // Greedy after this prompt is "вс…": each Cyrillic letter is two byte tokens.
    const j = json(await llmc(['run', DENSE, '--prompt', 'Привет, мир', '-n', '8', '--json']));
    expect(j.generated_ids.slice(0, 4)).toEqual([143, 113, 144, 226]);
    expect(hf.decode([143], { skip_special_tokens: true })).toContain('\uFFFD'); // precondition: a half character
    for (const model of [DENSE, tsArtifact]) {
      const r = await llmc(['run', model, '--prompt', 'Привет, мир', '-n', '8']);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toBe(`${hf.decode(j.generated_ids, { skip_special_tokens: true })}\n`);
      expect(r.stdout.startsWith('вс')).toBe(true);
      const strict = new TextDecoder('utf-8', { fatal: true });
      for (const c of r.chunks) expect(() => strict.decode(c.bytes)).not.toThrow();
    }
  }, 60_000);

  it('--ids prints the ids on one line; --json is one object with ids, text, stop reason and timings', async () => {
    const ref = reference['A dictionary is'];
    const ids = await llmc(['run', tsArtifact, '--prompt', 'A dictionary is', '-n', '12', '--ids']);
    expect(ids.stdout).toBe(`${ref.greedy.slice(0, 12).join(' ')}\n`);
    const r = await llmc(['run', tsArtifact, '--prompt', 'A dictionary is', '-n', '12', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const j = json(r); // the whole of stdout parses as one JSON value
    expect(j.prompt_ids).toEqual(ref.prompt_ids);
    expect(j.generated_ids).toEqual(ref.greedy.slice(0, 12));
    expect(j.text).toBe(hf.decode(ref.greedy.slice(0, 12), { skip_special_tokens: true }));
    expect(j.stop_reason).toBe('length');
    expect(j.timings.prefill_ms).toBeGreaterThan(0);
    expect(j.timings.decode_ms).toBeGreaterThan(0);
    expect(j.timings.decode_tokens_per_second).toBeGreaterThan(0);
    expect(r.stderr).toBe('');
  }, 60_000);

  it("stops at generation_config.json's eos_token_id (a list) without printing it; --ignore-eos runs on", async () => {
    const ref = reference[prompt];
    // Make the 6th greedy token an EOS id, as transformers' generate would stop on it.
    const gen = JSON.parse(readFileSync(path.join(DENSE, 'generation_config.json'), 'utf8'));
    const dir = await denseWith('eos', { 'generation_config.json': JSON.stringify({ ...gen, eos_token_id: [1, ref.greedy[5]] }) });
    for (const model of [dir, path.join(tmp, 'eos-ts')]) {
      if (model !== dir) expect((await llmc(['compile', dir, '--target', 'ts', '--no-eval', '-o', model])).code).toBe(0);
      const j = json(await llmc(['run', model, '--prompt', prompt, '-n', '20', '--json']));
      expect(j.generated_ids).toEqual(ref.greedy.slice(0, 6));
      expect(j.stop_reason).toBe('eos');
      expect(j.text).toBe(hf.decode(ref.greedy.slice(0, 5), { skip_special_tokens: true }));
      const text = await llmc(['run', model, '--prompt', prompt, '-n', '20']);
      expect(text.stdout).toBe(`${j.text}\n`);
      expect(text.stderr).toMatch(/6 tokens \(stopped at EOS\)/);
      const ids = await llmc(['run', model, '--prompt', prompt, '-n', '20', '--ids']);
      expect(ids.stdout).toBe(`${ref.greedy.slice(0, 5).join(' ')}\n`);
      const on = json(await llmc(['run', model, '--prompt', prompt, '-n', '20', '--ignore-eos', '--json']));
      expect(on.generated_ids).toEqual(ref.greedy.slice(0, 20));
      expect(on.stop_reason).toBe('length');
    }
  }, 90_000);

  describe('--chat', () => {
    const TEMPLATE =
      "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}";
    let chatModel: string;
    beforeAll(async () => {
      const cfg = JSON.parse(readFileSync(path.join(DENSE, 'tokenizer_config.json'), 'utf8'));
      chatModel = await denseWith('chat', { 'tokenizer_config.json': JSON.stringify({ ...cfg, chat_template: TEMPLATE }) });
    });

    it('renders the template (system + user, generation prompt) and tokenizes it without a second BOS', async () => {
      const r = await llmc(['run', chatModel, '--chat', '--system', 'Be brief.', '--prompt', 'What is a vector?', '-n', '4', '--json']);
      expect(r.code, r.stderr).toBe(0);
      const expected = '<|bos|><|system|>Be brief.\n<|user|>What is a vector?\n<|assistant|>';
      const ids = hf.encode(expected, { add_special_tokens: false }).ids;
      expect(ids[0]).toBe(0); // the template's BOS, once
      expect(ids[1]).not.toBe(0);
      expect(json(r).prompt_ids).toEqual(ids);
    }, 60_000);

    it('a list of named templates uses "default"; the prompt from stdin (--prompt-file -)', async () => {
      const cfg = JSON.parse(readFileSync(path.join(DENSE, 'tokenizer_config.json'), 'utf8'));
      const named = await denseWith('chat-named', {
        'tokenizer_config.json': JSON.stringify({ ...cfg, chat_template: [{ name: 'tool_use', template: 'x' }, { name: 'default', template: 'Q: {{ messages[0].content }}\nA:' }] }),
      });
      const r = await llmc(['run', named, '--chat', '--prompt-file', '-', '-n', '2', '--json'], 'Why?\n');
      expect(r.code, r.stderr).toBe(0);
      // No bos_token in this template: none is added (as transformers' apply_chat_template).
      expect(json(r).prompt_ids).toEqual(hf.encode('Q: Why?\nA:', { add_special_tokens: false }).ids);
    }, 60_000);

    it('chat_template.jinja (as current transformers saves it) wins over tokenizer_config.json, and a ts artifact carries it', async () => {
      const cfg = JSON.parse(readFileSync(path.join(DENSE, 'tokenizer_config.json'), 'utf8'));
      const dir = await denseWith('chat-jinja', {
        'tokenizer_config.json': JSON.stringify({ ...cfg, chat_template: 'not this one' }),
        'chat_template.jinja': '{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}\n',
      });
      const art = path.join(tmp, 'chat-jinja-ts');
      expect((await llmc(['compile', dir, '--target', 'ts', '--no-eval', '-o', art])).code).toBe(0);
      // Jinja drops the template's one trailing newline.
      const ids = hf.encode('<|bos|>[user] Hello<|eos|>[assistant]', { add_special_tokens: false }).ids;
      for (const model of [dir, art]) {
        const r = await llmc(['run', model, '--chat', '--prompt', 'Hello', '-n', '2', '--json']);
        expect(r.code, r.stderr).toBe(0);
        expect(json(r).prompt_ids).toEqual(ids);
      }
    }, 60_000);

    it('a model without a chat template: exit 2, one line saying so', async () => {
      const r = await llmc(['run', DENSE, '--chat', '--prompt', 'hi', '-n', '2']);
      expect(r.code).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(/no chat template/);
    }, 60_000);
  });
});

describe('llmc run streams ids without a tokenizer (stories260K)', () => {
  const greedy = (JSON.parse(readFileSync(path.join(STORIES, 'reference.json'), 'utf8')) as { greedy_ids: number[] }).greedy_ids;

  it.each([
    ['checkpoint', () => STORIES],
    ['gguf (llama.cpp)', () => path.join(tmp, 'stories-gguf')],
  ])('%s: the ids space-separated on one line, nothing else on stdout', async (kind, model) => {
    if (kind.startsWith('gguf')) {
      if (!existsSync(path.join(ROOT, 'node_modules/node-llama-cpp'))) return console.warn('run-stream: node-llama-cpp is absent; the gguf case is skipped');
      expect((await llmc(['compile', STORIES, '--target', 'gguf', '--quant', 'F32', '--no-eval', '-o', model()])).code).toBe(0);
    }
    const r = await llmc(['run', model(), '--prompt-ids', '1', '-n', '32']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe(`${greedy.join(' ')}\n`);
  }, 60_000);

  it('--prompt-file with a model that has no tokenizer: exit 1, one line', async () => {
    const file = path.join(tmp, 'prompt.txt');
    await fsp.writeFile(file, 'Once upon a time\n');
    const r = await llmc(['run', STORIES, '--prompt-file', file, '-n', '2']);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/--prompt-file needs a tokenizer\.json/);
  });

  it('usage: one prompt source; --chat needs text; --system needs --chat', async () => {
    for (const args of [
      ['--prompt', 'a', '--prompt-ids', '1'],
      ['--prompt-file', '-', '--prompt', 'a'],
      ['--chat', '--prompt-ids', '1'],
      ['--system', 'x', '--prompt-ids', '1'],
    ]) {
      const r = await llmc(['run', STORIES, ...args, '-n', '2']);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
    }
  });
});
