/**
 * build-engine.sh and `--opt cuda.build=true`. TensorRT does not run here (no GPU, no trtexec), so
 * these check what the script does around it: the message when trtexec is missing, and the command
 * line it gives trtexec — through a stand-in `trtexec` on PATH (test/trtexec-standin.mjs) that
 * enforces trtexec's documented argument contract (flags per version, `name:AxB` specs, one
 * --profile=N per min/opt/max group, static shapes for DLA, no precision flags when strongly typed,
 * every graph input in every profile) and records what it parsed. The ranges are checked against the
 * model's own dimensions.
 */
import { execFile } from 'node:child_process';
import { existsSync, promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compile } from '../src/app/compile/compile.js';
import { openCheckpoint, type Checkpoint } from '../src/core/checkpoint/index.js';
import { silentProgress } from '../src/core/util/progress.js';
import { llmcInProcess } from './cli.js';

const MODEL = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
let src: Checkpoint;
let bin: string;

/** The stand-in trtexec: the contract checker run by this Node (TRT=8 plays TensorRT 8, else 10). */
const SHIM = `#!/usr/bin/env bash
exec '${process.execPath}' '${path.resolve(__dirname, 'trtexec-standin.mjs')}' "$@"
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

  /** Runs build-engine.sh against the stand-in; what it parsed. */
  async function build(dir: string, device: string, env: Record<string, string> = {}) {
    const argsFile = path.join(tmp, `args-${path.basename(dir)}-${device}`);
    const session = await ort.InferenceSession.create(path.join(dir, 'onnx/model.onnx'));
    const inputs = [...session.inputNames];
    await session.release();
    const r = await sh(dir, [device], { PATH: `${bin}:/usr/bin:/bin`, ARGS_FILE: argsFile, INPUTS: inputs.join(','), ...env });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe(`engine/model.${device}.plan`);
    const rec = JSON.parse(await fsp.readFile(argsFile, 'utf8')) as { argv: string[]; flags: string[]; profiles: Record<string, { min: number[]; opt: number[]; max: number[] }>[] };
    return { ...rec, stderr: r.stderr, inputs };
  }
  // stories260K: 5 layers of 4 KV heads × head_dim 8, max_position_embeddings 512 (under every device's cap).
  const past = (rec: Awaited<ReturnType<typeof build>>, p: number, k: 'min' | 'opt' | 'max') => rec.profiles[p]['past_key_values.4.value'][k];

  it('TensorRT 10: a prefill and a decode profile, strongly typed, workspace, the shapes of every input', async () => {
    const dir = path.join(tmp, 'fp16');
    const rec = await build(dir, 'orin');
    expect(rec.profiles).toHaveLength(2);
    const [prefill, decode] = rec.profiles;
    expect(Object.keys(prefill).sort()).toEqual([...rec.inputs].sort());
    // Prefill: chunks up to 512 − 1 tokens (Orin's 512 capped by the 512-token context), tuned at a whole chunk on an empty cache.
    expect(prefill.input_ids).toEqual({ min: [1, 1], opt: [1, 511], max: [4, 511] });
    expect(prefill.attention_mask).toEqual({ min: [1, 1], opt: [1, 511], max: [4, 512] });
    expect(past(rec, 0, 'opt')).toEqual([1, 4, 0, 8]);
    // Decode: one token, tuned at half the context cached.
    expect(decode.input_ids).toEqual({ min: [1, 1], opt: [1, 1], max: [4, 1] });
    expect(decode.attention_mask).toEqual({ min: [1, 1], opt: [1, 257], max: [4, 512] });
    expect(past(rec, 1, 'max')).toEqual([4, 4, 511, 8]);
    expect(rec.argv).toEqual(expect.arrayContaining(['--onnx=onnx/model.onnx', '--memPoolSize=workspace:4096M', '--stronglyTyped', '--saveEngine=engine/model.orin.plan']));
    expect(rec.flags).not.toContain('fp16');
  });

  it('orin-dla: static shapes (min = opt = max) per profile, DLA core 0 with GPU fallback; a float32 graph is refused for DLA', async () => {
    const rec = await build(path.join(tmp, 'fp16'), 'orin-dla');
    const [prefill, decode] = rec.profiles;
    expect(prefill.input_ids).toEqual({ min: [1, 511], opt: [1, 511], max: [1, 511] });
    expect(past(rec, 0, 'min')).toEqual([1, 4, 1, 8]);
    expect(decode.attention_mask).toEqual({ min: [1, 512], opt: [1, 512], max: [1, 512] });
    expect(past(rec, 1, 'max')).toEqual([1, 4, 511, 8]);
    expect(rec.argv).toEqual(expect.arrayContaining(['--useDLACore=0', '--allowGPUFallback', '--stronglyTyped']));
    const fp32 = await artifact('fp32', 'fp32');
    const r = await sh(fp32, ['orin-dla'], { PATH: `${bin}:/usr/bin:/bin`, ARGS_FILE: path.join(tmp, 'a') });
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/DLA runs float16 and int8 layers only.*--quant fp16/);
  });

  it('precision per quantization: int8 with fp32 or fp16 compute on TensorRT 10, and the flags TensorRT 8 needs', async () => {
    const int8 = await artifact('int8', 'int8');
    const ten = await build(int8, 'desktop');
    expect(ten.flags).toContain('stronglyTyped');
    expect(ten.flags).not.toContain('int8');
    expect(ten.stderr).toMatch(/note: onnx\/model\.onnx dequantizes its weights to float32.*cuda\.compute=fp16/);
    const int8h = await artifact('int8-fp16', 'int8', { 'cuda.compute': 'fp16' });
    const half = await build(int8h, 'orin-dla');
    expect(half.stderr).not.toMatch(/note:/);
    expect(half.flags).toEqual(expect.arrayContaining(['useDLACore', 'allowGPUFallback']));
    // TensorRT 8 (Xavier): one profile spanning prefill and decode, --int8 for the DequantizeLinear graph, --workspace in MiB.
    const eight = await build(int8, 'xavier', { TRT: '8' });
    expect(eight.profiles).toHaveLength(1);
    expect(eight.profiles[0].input_ids).toEqual({ min: [1, 1], opt: [1, 1], max: [1, 256] });
    expect(eight.argv).toEqual(expect.arrayContaining(['--int8', '--workspace=2048']));
    expect(eight.flags).not.toContain('fp16');
    const fp16 = await build(path.join(tmp, 'fp16'), 'xavier', { TRT: '8' });
    expect(fp16.flags).toContain('fp16');
    expect(fp16.flags).not.toContain('stronglyTyped');
  }, 60_000);

  it('the stand-in is strict: it refuses what trtexec refuses', async () => {
    const run = (args: string[], env: Record<string, string> = {}) =>
      new Promise<number>((resolve) => execFile(process.execPath, [path.resolve(__dirname, 'trtexec-standin.mjs'), ...args], { env: { ...env } }, (err) => resolve(err ? 1 : 0)));
    const onnx = path.join(tmp, 'fp16/onnx/model.onnx');
    const save = `--saveEngine=${path.join(tmp, 'x.plan')}`;
    expect(await run([`--onnx=${onnx}`, '--minShapes=input_ids:1x1', '--optShapes=input_ids:1x1', '--maxShapes=input_ids:1x2', save])).toBe(0);
    expect(await run([`--onnx=${onnx}`, '--minShapes=input_ids:1x1', '--optShapes=input_ids:1x1', '--maxShapes=input_ids:1x2', '--minShapes=input_ids:1x1', save])).toBe(1);
    expect(await run([`--onnx=${onnx}`, '--profile=1', '--minShapes=a:1', '--optShapes=a:1', '--maxShapes=a:1', save])).toBe(1);
    expect(await run([`--onnx=${onnx}`, '--minShapes=input_ids:1,1', '--optShapes=input_ids:1x1', '--maxShapes=input_ids:1x1', save])).toBe(1);
    expect(await run([`--onnx=${onnx}`, '--stronglyTyped', '--fp16', save])).toBe(1);
    expect(await run([`--onnx=${onnx}`, '--useDLACore=0', '--minShapes=a:1', '--optShapes=a:1', '--maxShapes=a:2', save])).toBe(1);
    expect(await run([`--onnx=${onnx}`, '--allowGPUFallback', save])).toBe(1);
    expect(await run([`--onnx=${onnx}`, '--stronglyTyped', save], { TRT: '8' })).toBe(1);
  });

  it('refuses graphs TensorRT cannot parse: MatMulNBits, and opset 21 on TensorRT 8', async () => {
    const nb = await artifact('int4nb', 'int4', {}, [{ pattern: /down_proj/, type: 'int8' }]);
    const r = await sh(nb, [], { PATH: `${bin}:/usr/bin:/bin`, ARGS_FILE: path.join(tmp, 'a') });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/MatMulNBits.*--opt cuda\.int4=dequantizelinear/);
    const dq = await artifact('int4dq', 'int4', { 'cuda.int4': 'dequantizelinear' }, [{ pattern: /down_proj/, type: 'int8' }]);
    const old = await sh(dq, ['xavier'], { PATH: `${bin}:/usr/bin:/bin`, ARGS_FILE: path.join(tmp, 'a'), TRT: '8' });
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
