/**
 * build-qnn.sh against a stand-in QNN SDK 2.x (test/qnn-standin-sdk.ts: the three host tools check
 * their documented arguments): every tool runs on the x86_64 host, the context-binary generator gets
 * the host model libraries and the host libQnnHtp.so, and one call puts every graph in one context
 * with weight sharing; aarch64-android adds the device's runtime libraries beside that binary.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildScript, CONTEXT_BINARY, HTP_CONFIG, HTP_EXT, htpExtJson, htpJson, qnnGraphName, type ScriptGraph } from '../backends/qnn/build-plan.js';
import { standInSdk } from './qnn-standin-sdk.js';

let tmp: string;
const graphs: ScriptGraph[] = [
  { id: 'l0.qkv', onnx: 'npu/l0.qkv.onnx', encodings: 'npu/l0.qkv.encodings.json', inputs: [{ name: 'x', shape: [1, 4, 4, 64] }] },
  { id: 'l0.mlp', onnx: 'npu/l0.mlp.onnx', encodings: 'npu/l0.mlp.encodings.json', inputs: [{ name: 'h', shape: [1, 4, 4, 64] }, { name: 'r', shape: [1, 4, 4, 64] }] },
  { id: 'l1.qkv', onnx: 'npu/l1.qkv.onnx', encodings: 'npu/l1.qkv.encodings.json', inputs: [{ name: 'x', shape: [1, 4, 4, 64] }] },
];

async function artifact(name: string): Promise<string> {
  const dir = path.join(tmp, name);
  await fsp.mkdir(path.join(dir, 'npu'), { recursive: true });
  for (const g of graphs) {
    await fsp.writeFile(path.join(dir, g.onnx), 'onnx');
    await fsp.writeFile(path.join(dir, g.encodings), '{}');
  }
  await fsp.writeFile(path.join(dir, HTP_EXT), htpExtJson());
  await fsp.writeFile(path.join(dir, HTP_CONFIG), htpJson('SM8650', graphs.map((g) => g.id)));
  await fsp.writeFile(path.join(dir, 'build-qnn.sh'), buildScript(graphs, 'SM8650'), { mode: 0o755 });
  return dir;
}

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-qnn-build-'));
});
afterAll(() => fsp.rm(tmp, { recursive: true, force: true }));

describe('build-qnn.sh against a stand-in QNN SDK', () => {
  it('x86_64-linux-clang: host tools, host model libraries, one context with weight sharing', async () => {
    const { execa } = await import('execa');
    const sdk = path.join(tmp, 'sdk-host');
    const tools = await standInSdk(sdk, 'v75');
    const dir = await artifact('host');
    const r = await execa('bash', ['build-qnn.sh'], { cwd: dir, reject: false, env: { QNN_SDK_ROOT: sdk } });
    expect(r.exitCode, r.stderr).toBe(0);
    const calls = await tools.calls();
    expect(calls.map((c) => c.tool)).toEqual([...graphs.flatMap(() => ['qnn-onnx-converter', 'qnn-model-lib-generator']), 'qnn-context-binary-generator']);
    for (const c of calls.filter((x) => x.tool === 'qnn-model-lib-generator')) expect(c.argv[c.argv.indexOf('-t') + 1]).toBe('x86_64-linux-clang');
    const ctx = JSON.parse(await fsp.readFile(path.join(dir, CONTEXT_BINARY), 'utf8'));
    expect(ctx).toEqual({ graphs: graphs.map((g) => qnnGraphName(g.id)), weightSharing: true });
    expect(graphs.map((g) => qnnGraphName(g.id))).toEqual(['l0_qkv', 'l0_mlp', 'l1_qkv']);
    expect(r.stdout.trim()).toBe(`build-qnn.sh: ${CONTEXT_BINARY}: one context, 3 graphs, weights shared`);
  });

  it('aarch64-android: the same host build, then the context binary and the device libraries in device/', async () => {
    const { execa } = await import('execa');
    const sdk = path.join(tmp, 'sdk-android');
    const tools = await standInSdk(sdk, 'v75');
    const dir = await artifact('android');
    const r = await execa('bash', ['build-qnn.sh', 'aarch64-android'], { cwd: dir, reject: false, env: { QNN_SDK_ROOT: sdk } });
    expect(r.exitCode, r.stderr).toBe(0);
    const ctxCall = (await tools.calls()).find((c) => c.tool === 'qnn-context-binary-generator')!;
    expect(ctxCall.argv[ctxCall.argv.indexOf('--backend') + 1]).toBe(path.join(sdk, 'lib/x86_64-linux-clang/libQnnHtp.so'));
    expect((await fsp.readdir(path.join(dir, 'device'))).sort()).toEqual(['libQnnHtp.so', 'libQnnHtpV75Skel.so', 'libQnnHtpV75Stub.so', 'llmc.bin']);
    expect(await fsp.readFile(path.join(dir, 'device/libQnnHtp.so'), 'utf8')).toBe('arch=aarch64-android\n');
  });

  it('refuses an unknown target (exit 2) and names a missing device library (exit 127)', async () => {
    const { execa } = await import('execa');
    const sdk = path.join(tmp, 'sdk-bad');
    await standInSdk(sdk, 'v75');
    const dir = await artifact('bad');
    const target = await execa('bash', ['build-qnn.sh', 'arm64'], { cwd: dir, reject: false, env: { QNN_SDK_ROOT: sdk } });
    expect(target.exitCode).toBe(2);
    expect(target.stderr).toMatch(/unknown target arm64/);
    await fsp.rm(path.join(sdk, 'lib/hexagon-v75'), { recursive: true });
    const skel = await execa('bash', ['build-qnn.sh', 'aarch64-android'], { cwd: dir, reject: false, env: { QNN_SDK_ROOT: sdk } });
    expect(skel.exitCode).toBe(127);
    expect(skel.stderr).toMatch(/libQnnHtpV75Skel\.so is missing from .*hexagon-v75\/unsigned/);
  });
});
