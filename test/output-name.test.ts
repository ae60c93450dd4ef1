/** An -o whose extension names another target's file (or a model file) is refused, never made a directory of that name. */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint } from '../src/core/checkpoint/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { llmcInProcess } from './cli.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
const tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-output-name-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('-o named like another target\'s file', () => {
  it('a directory target given x.gguf, or any target given x.onnx / x.safetensors: one line, exit 2, nothing written', async () => {
    const cases: [string, string, RegExp][] = [
      ['ts', 'x.gguf', /\.gguf names a gguf file, but --target ts writes a directory; give -o .*\/x \(or --target gguf\)$/],
      ['hf', 'x.gguf', /--target hf writes a directory/],
      ['cuda', 'x.GGUF', /\.gguf names a gguf file, but --target cuda writes a directory/],
      ['tensorrt-llm', 'x.gguf', /--target tensorrt-llm writes a directory/],
      ['ts', 'x.onnx', /\.onnx names an ONNX graph, but --target ts writes a directory; give -o .*\/x$/],
      ['gguf', 'x.safetensors', /names a safetensors file, but --target gguf writes a directory, or one \.gguf file/],
    ];
    for (const [target, name, msg] of cases) {
      const out = path.join(tmp, name);
      const r = await llmcInProcess('compile', STORIES, '--target', target, '-o', out);
      expect(r.code, `${target} ${name}: ${r.stderr}`).toBe(2);
      const lines = r.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(msg);
      expect(lines[0]).not.toMatch(/ {2}/);
      expect(existsSync(out)).toBe(false);
    }
  });

  it('the driver refuses it too (compile() called directly), and a .gguf for gguf is still a file', async () => {
    const source = await openCheckpoint(STORIES);
    try {
      const req = { source, passes: [], tensorTypes: [], progress: silentProgress, note: () => {} };
      await expect(compile({ ...req, target: 'ts', outDir: path.join(tmp, 'y.gguf') })).rejects.toThrow(/--target ts writes a directory/);
      expect(existsSync(path.join(tmp, 'y.gguf'))).toBe(false);
    } finally {
      await source.close();
    }
    const r = await llmcInProcess('compile', STORIES, '--target', 'gguf', '--quant', 'Q8_0', '-o', path.join(tmp, 'z.gguf'));
    expect(r.code, r.stderr).toBe(0);
    expect(existsSync(path.join(tmp, 'z.gguf.llmc-manifest.json'))).toBe(true);
  });
});
