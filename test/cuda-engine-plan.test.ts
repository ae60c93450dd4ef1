/**
 * build-engine.sh and `--opt cuda.build=true`. TensorRT does not run here (no GPU, no trtexec), so
 * these check what the script does around it: the message when trtexec is missing, and the command
 * line it gives trtexec — through a stand-in `trtexec` on PATH that records its arguments and writes
 * the plan file it is asked for. The shape ranges are checked against the model's own dimensions.
 */
import { execFile } from 'node:child_process';
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { llmcInProcess } from './cli.js';

const MODEL = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
let src: Checkpoint;
let bin: string;

/** A stand-in trtexec: `--help` lists the flags of TensorRT 10 (or 8.x with OLD=1); a build records its arguments. */
const SHIM = `#!/usr/bin/env bash
if [ "$1" = --help ]; then
  if [ -n "\${OLD:-}" ]; then echo "--fp16 --int8 --workspace=N"; else echo "--stronglyTyped --memPoolSize=spec --fp16"; fi
  exit 0
fi
printf '%s\\n' "$@" > "$ARGS_FILE"
for a in "$@"; do case "$a" in --saveEngine=*) echo plan > "\${a#--saveEngine=}" ;; esac; done
`;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-cuda-plan-'));
  src = await openCheckpoint(MODEL);
  bin = path.join(tmp, 'bin');
  await fsp.mkdir(bin);
  await fsp.writeFile(path.join(bin, 'trtexec'), SHIM, { mode: 0o755 });
});
afterAll(async () => {
  await src?.close();
  await fsp.rm(tmp, { recursive: true, force: true });
});

const sh = (cwd: string, args: string[], env: Record<string, string>) =>
  new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile('bash', ['build-engine.sh', ...args], { cwd, env: { PATH: '/usr/bin:/bin', ...env } }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });

async function artifact(name: string, quant: string, opts: Record<string, string> = {}, tensorTypes: { pattern: RegExp; type: string }[] = []) {
  const dir = path.join(tmp, name);
  await compile({ source: src, target: 'cuda', outDir: dir, passes: [], quant, opts, tensorTypes, progress: silentProgress, note: () => {} });
  return dir;
}

describe('build-engine.sh', () => {
  it('says what is missing when trtexec is not there', async () => {
    const dir = await artifact('fp16', 'fp16');
    const r = await sh(dir, ['orin'], {});
    expect(r.code).toBe(127);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/trtexec \(TensorRT's command-line builder\) is not on PATH nor at \/usr\/src\/tensorrt\/bin\/trtexec.*JetPack/);
  });

  it('gives trtexec the profile\'s shape ranges, workspace and precision flags', async () => {
    const dir = path.join(tmp, 'fp16');
    const argsFile = path.join(tmp, 'args');
    const r = await sh(dir, ['orin'], { PATH: `${bin}:/usr/bin:/bin`, ARGS_FILE: argsFile });
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe('engine/model.orin.plan');
    const args = (await fsp.readFile(argsFile, 'utf8')).trim().split('\n');
    // stories260K: 5 layers of 4 KV heads × head_dim 8, max_position_embeddings 512 (under Orin's 4096 cap).
    const past = (b: number, p: number) => Array.from({ length: 5 }, (_, l) => `past_key_values.${l}.key:${b}x4x${p}x8,past_key_values.${l}.value:${b}x4x${p}x8`).join(',');
    expect(args).toContain(`--minShapes=input_ids:1x1,attention_mask:1x1,position_ids:1x1,${past(1, 0)}`);
    expect(args).toContain(`--optShapes=input_ids:1x1,attention_mask:1x257,position_ids:1x1,${past(1, 256)}`);
    expect(args).toContain(`--maxShapes=input_ids:4x512,attention_mask:4x512,position_ids:4x512,${past(4, 511)}`);
    expect(args).toEqual(expect.arrayContaining(['--onnx=onnx/model.onnx', '--memPoolSize=workspace:4096M', '--stronglyTyped', '--saveEngine=engine/model.orin.plan']));
    // TensorRT 8 (Xavier): no strongly typed mode, the precision flag instead; 2048-token cap → 512 here.
    const old = await sh(dir, ['xavier'], { PATH: `${bin}:/usr/bin:/bin`, ARGS_FILE: argsFile, OLD: '1' });
    expect(old.code).toBe(0);
    const oldArgs = (await fsp.readFile(argsFile, 'utf8')).trim().split('\n');
    expect(oldArgs).toEqual(expect.arrayContaining(['--fp16', '--workspace=2048', `--maxShapes=input_ids:1x256,attention_mask:1x512,position_ids:1x256,${past(1, 511)}`]));
    expect(oldArgs).not.toContain('--stronglyTyped');
  });

  it('refuses graphs TensorRT cannot parse: MatMulNBits, and opset 21 on TensorRT 8', async () => {
    const nb = await artifact('int4nb', 'int4', {}, [{ pattern: /down_proj/, type: 'int8' }]);
    const r = await sh(nb, [], { PATH: `${bin}:/usr/bin:/bin`, ARGS_FILE: path.join(tmp, 'a') });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/MatMulNBits.*--opt cuda\.int4=dequantizelinear/);
    const dq = await artifact('int4dq', 'int4', { 'cuda.int4': 'dequantizelinear' }, [{ pattern: /down_proj/, type: 'int8' }]);
    const old = await sh(dq, ['xavier'], { PATH: `${bin}:/usr/bin:/bin`, ARGS_FILE: path.join(tmp, 'a'), OLD: '1' });
    expect(old.code).toBe(1);
    expect(old.stderr).toMatch(/opset 21 \(int4 DequantizeLinear\), which needs TensorRT 10/);
    const now = await sh(dq, ['orin'], { PATH: `${bin}:/usr/bin:/bin`, ARGS_FILE: path.join(tmp, 'a') });
    expect(now.code).toBe(0);
  }, 60_000);
});

describe('--opt cuda.build=true', () => {
  it('runs build-engine.sh and lists the plan in the manifest; without trtexec it stops before writing', async () => {
    const out = path.join(tmp, 'built');
    const saved = process.env.PATH;
    process.env.PATH = `${bin}:${saved}`;
    process.env.ARGS_FILE = path.join(tmp, 'args-built');
    try {
      const ok = await llmcInProcess('compile', MODEL, '--target', 'cuda', '--opt', 'cuda.build=true', '--opt', 'cuda.profile=orin', '-o', out, '--json');
      expect(ok.code).toBe(0);
      expect(JSON.parse(ok.stdout).files.map((f: { path: string }) => f.path)).toContain('engine/model.orin.plan');
    } finally {
      process.env.PATH = saved;
    }
    const none = path.join(tmp, 'not-built');
    process.env.PATH = '/usr/bin:/bin';
    try {
      const r = await llmcInProcess('compile', MODEL, '--target', 'cuda', '--opt', 'cuda.build=true', '-o', none);
      expect(r.code).toBe(1);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).toMatch(/cuda\.build=true needs TensorRT's trtexec/);
      expect(existsSync(none)).toBe(false);
    } finally {
      process.env.PATH = saved;
      delete process.env.ARGS_FILE;
    }
  });
});
