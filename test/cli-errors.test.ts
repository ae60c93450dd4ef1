/**
 * Bad input through the real CLI: each case gives exactly one line on stderr naming the file and
 * the problem, exit code 1 (2 for usage errors), and no stack trace.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, truncateSync, unlinkSync, writeFileSync, cpSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { ensureBuilt } from './build-once.js';

const ROOT = path.resolve(__dirname, '..');
let tmp: string;
let base: string;
let sharded: string;

beforeAll(async () => {
  ensureBuilt();
  tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-cli-errors-'));
  base = (await generateFixture(path.join(tmp, 'base'), { arch: 'llama', tokenizer: 'none' })).dir;
  sharded = (await generateFixture(path.join(tmp, 'sharded'), { arch: 'llama', tokenizer: 'none', shards: 2 })).dir;
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function copy(from: string, name: string): string {
  const dir = path.join(tmp, name);
  cpSync(from, dir, { recursive: true });
  return dir;
}

type Result = { code: number | null; stderr: string; stdout: string };

/** Run the CLI; the cases start their processes concurrently (node start-up dominates each). */
function llmc(...args: string[]): Promise<Result> {
  return new Promise((resolve) => {
    const child = spawn('node', [path.join(ROOT, 'bin/llmc.js'), ...args]);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stderr, stdout }));
  });
}

/** Exactly one line, `llmc: <file>: <message>`, no stack trace. */
async function expectOneLine(pending: Promise<Result>, code: number, file: string | null, message: RegExp) {
  const res = await pending;
  expect(res.code).toBe(code);
  const lines = res.stderr.split('\n').filter((l) => l !== '');
  expect(lines).toHaveLength(1);
  expect(res.stderr).not.toMatch(/\n\s+at /);
  if (file) expect(lines[0].startsWith(`llmc: ${file}: `)).toBe(true);
  expect(lines[0]).toMatch(message);
}

/** Rewrite a safetensors header in place (data bytes kept), re-padded to 8 bytes. */
function editHeader(file: string, edit: (h: Record<string, any>) => void) {
  const buf = readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  edit(header);
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + json.length) % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  writeFileSync(file, Buffer.concat([len, Buffer.from(json), buf.subarray(8 + n)]));
}

describe('bad input → one line, exit 1', async () => {
  it.concurrent('truncated safetensors file (cut in the data section)', async () => {
    const dir = copy(base, 'trunc');
    const f = path.join(dir, 'model.safetensors');
    truncateSync(f, Math.floor(readFileSync(f).length / 2));
    await expectOneLine(llmc('inspect', dir), 1, f, /runs past the end of the file.*truncated or corrupt/);
  });

  it.concurrent('truncated safetensors file (shorter than its 8-byte length prefix)', async () => {
    const dir = copy(base, 'trunc8');
    const f = path.join(dir, 'model.safetensors');
    truncateSync(f, 5);
    await expectOneLine(llmc('inspect', dir), 1, f, /truncated safetensors file/);
  });

  it.concurrent('truncated safetensors file (cut inside the header)', async () => {
    const dir = copy(base, 'trunchdr');
    const f = path.join(dir, 'model.safetensors');
    truncateSync(f, 100);
    await expectOneLine(llmc('inspect', dir), 1, f, /header length \d+ exceeds the file/);
  });

  it.concurrent('header offsets past the end of the file', async () => {
    const dir = copy(base, 'offsets');
    const f = path.join(dir, 'model.safetensors');
    editHeader(f, (h) => {
      const t = h['model.norm.weight'];
      t.data_offsets = [t.data_offsets[0] + 10_000_000, t.data_offsets[1] + 10_000_000];
    });
    await expectOneLine(llmc('inspect', dir), 1, f, /"model\.norm\.weight" runs past the end of the file/);
  });

  it.concurrent('a shard index naming a missing file', async () => {
    const dir = copy(sharded, 'missing-shard');
    unlinkSync(path.join(dir, 'model-00002-of-00002.safetensors'));
    await expectOneLine(llmc('inspect', dir), 1, path.join(dir, 'model.safetensors.index.json'), /model-00002-of-00002\.safetensors, which does not exist/);
  });

  it.concurrent('unknown model_type lists the supported ones', async () => {
    const dir = copy(base, 'unknown-type');
    const cfgFile = path.join(dir, 'config.json');
    const cfg = JSON.parse(readFileSync(cfgFile, 'utf8'));
    cfg.model_type = 'gpt_neox';
    writeFileSync(cfgFile, JSON.stringify(cfg));
    await expectOneLine(llmc('inspect', dir), 1, cfgFile, /unknown model_type "gpt_neox"; supported: llama, mistral, qwen2, mixtral, qwen2_moe/);
  });

  it.concurrent('architectures naming no causal LM of the model_type (a classifier head) is refused', async () => {
    const dir = copy(base, 'classifier');
    const cfgFile = path.join(dir, 'config.json');
    const cfg = JSON.parse(readFileSync(cfgFile, 'utf8'));
    cfg.architectures = ['LlamaForSequenceClassification'];
    writeFileSync(cfgFile, JSON.stringify(cfg));
    await expectOneLine(llmc('inspect', dir), 1, cfgFile, /architectures \["LlamaForSequenceClassification"\] names no causal LM of model_type "llama" \(llmc compiles LlamaForCausalLM/);
  });

  it.concurrent('a tensor shape that disagrees with config.json', async () => {
    const dir = copy(base, 'shape');
    const cfgFile = path.join(dir, 'config.json');
    const cfg = JSON.parse(readFileSync(cfgFile, 'utf8'));
    cfg.intermediate_size = 96; // the tensors have 128
    writeFileSync(cfgFile, JSON.stringify(cfg));
    await expectOneLine(llmc('inspect', dir), 1, path.join(dir, 'model.safetensors'), /has shape \[128,64\] but config\.json implies \[96,64\]/);
  });

  it.concurrent('missing config.json', async () => {
    const dir = copy(base, 'no-config');
    unlinkSync(path.join(dir, 'config.json'));
    await expectOneLine(llmc('inspect', dir), 1, dir, /missing config\.json/);
  });

  it.concurrent('an output path that is a file, or under one', async () => {
    const file = path.join(tmp, 'a-file');
    writeFileSync(file, 'x');
    await expectOneLine(llmc('compile', base, '--target', 'gguf', '-o', file), 1, file, /exists and is not a directory/);
    await expectOneLine(llmc('compile', base, '--target', 'gguf', '-o', path.join(file, 'out')), 1, path.join(file, 'out'), /a parent is not a directory/);
  });

  // Node's mkdir({ recursive: true }) spins forever here; the CLI must fail instead of hanging.
  it.skipIf(process.platform !== 'linux').concurrent('an output path the kernel refuses to create (/proc)', async () => {
    await expectOneLine(llmc('compile', base, '--target', 'gguf', '-o', '/proc/llmc-out/x'), 1, '/proc/llmc-out/x', /cannot write to output directory/);
  }, 20_000);

  it.concurrent('a model directory that does not exist', async () => {
    const dir = path.join(tmp, 'nope');
    await expectOneLine(llmc('inspect', dir), 1, dir, /no such file or directory/);
  });

  it.concurrent('overlapping tensors in the header', async () => {
    const dir = copy(base, 'overlap');
    const f = path.join(dir, 'model.safetensors');
    editHeader(f, (h) => {
      // Two same-size tensors sharing the same bytes.
      h['model.layers.1.input_layernorm.weight'].data_offsets = h['model.layers.0.input_layernorm.weight'].data_offsets;
    });
    await expectOneLine(llmc('inspect', dir), 1, f, /overlap/);
  });
});

describe('usage errors → one line, exit 2', async () => {
  it.concurrent('llmc run with a non-numeric --prompt-ids', async () => {
    await expectOneLine(llmc('run', base, '--prompt-ids', '1,x,3', '--max-tokens', '2'), 2, null, /--prompt-ids must be comma-separated non-negative integers.*"1,x,3"/);
  });
});
