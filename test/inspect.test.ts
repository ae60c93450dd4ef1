/**
 * `llmc inspect`: parameter counts per component against closed forms computed here from the
 * fixture dimensions, bytes per dtype, shard files, --tensors and the human-readable summary.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateFixture } from '../fixtures/generate.js';
import { ensureBuilt } from './build-once.js';

const ROOT = path.resolve(__dirname, '..');
const STORIES = path.resolve(ROOT, 'fixtures/models/stories260K');
let tmp: string;

beforeAll(async () => {
  ensureBuilt();
  tmp = mkdtempSync(path.join(os.tmpdir(), 'llmc-inspect-'));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function inspectJson(dir: string, ...flags: string[]) {
  const out = execFileSync('node', [path.join(ROOT, 'bin/llmc.js'), 'inspect', dir, '--json', ...flags], { encoding: 'utf8' });
  return JSON.parse(out);
}

describe('llmc inspect', () => {
  it('stories260K: 260,032 parameters (llama2.c stories260K), tied, all F32', () => {
    const r = inspectJson(STORIES);
    // dim 64, hidden 172, 5 layers, 8 heads, 4 kv heads, vocab 512, tied.
    const D = 64, L = 5, kv = 32, I = 172, V = 512;
    expect(r.parameters.embedding).toBe(V * D);
    expect(r.parameters.attention).toBe(L * (2 * D * D + 2 * D * kv));
    expect(r.parameters.mlp).toBe(L * 3 * D * I);
    expect(r.parameters.norms).toBe((2 * L + 1) * D);
    expect(r.parameters.lm_head).toBe(0);
    expect(r.parameters.total).toBe(260032);
    expect(r.dtypes).toEqual({ F32: { tensors: 47, parameters: 260032, bytes: 4 * 260032 } });
    expect(r.files).toEqual([{ file: 'model.safetensors', bytes: statSync(path.join(STORIES, 'model.safetensors')).size, tensors: 47 }]);
    expect(r.architecture.tieEmbeddings).toBe(true);
    expect(r.tensors).toBeUndefined();
  });

  it('sharded bf16 qwen2_moe: components, bytes, shards, --tensors', async () => {
    const dims = { hiddenSize: 32, numHeads: 4, numKvHeads: 2, numLayers: 3, intermediateSize: 48, vocabSize: 300, numExperts: 6, topK: 2, expertIntermediateSize: 16, sharedExpertIntermediateSize: 40 };
    const { dir } = await generateFixture(path.join(tmp, 'qm'), { arch: 'qwen2_moe', dtype: 'BF16', shards: 2, dims, tokenizer: 'none' });
    const r = inspectJson(dir, '--tensors');
    const { hiddenSize: D, numLayers: L, vocabSize: V, numExperts: E } = dims;
    const hd = D / dims.numHeads;
    const q = dims.numHeads * hd;
    const kv = dims.numKvHeads * hd;
    const expect_ = {
      embedding: V * D,
      attention: L * (D * q + 2 * D * kv + q * D + q + 2 * kv), // q/k/v biases
      mlp: 0,
      experts: L * E * 3 * D * dims.expertIntermediateSize,
      shared_expert: L * (3 * D * dims.sharedExpertIntermediateSize + D), // + shared_expert_gate [1, D]
      router: L * E * D,
      norms: (2 * L + 1) * D,
      lm_head: V * D,
      other: 0,
    };
    const total = Object.values(expect_).reduce((a, b) => a + b, 0);
    expect(r.parameters).toEqual({ total, ...expect_ });
    expect(r.bytes).toBe(2 * total);
    expect(Object.keys(r.dtypes)).toEqual(['BF16']);
    expect(r.files.map((f: { file: string }) => f.file)).toEqual(['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']);
    for (const f of r.files) expect(f.bytes).toBe(statSync(path.join(dir, f.file)).size);
    const nTensors = 1 + L * (2 + 4 + 3 + 1 + 3 * E + 3 + 1) + 1 + 1;
    expect(r.tensors).toHaveLength(nTensors);
    expect(r.files.reduce((a: number, f: { tensors: number }) => a + f.tensors, 0)).toBe(nTensors);
    const router = r.tensors.find((t: { name: string }) => t.name === 'model.layers.1.mlp.gate.weight');
    expect(router).toMatchObject({ shape: [E, D], dtype: 'BF16', bytes: 2 * E * D, component: 'router' });
    expect(r.assets.tokenizer).toBe(false);
  });

  it('prints a readable summary with --help-documented flags', async () => {
    const { dir } = await generateFixture(path.join(tmp, 'mx'), { arch: 'mixtral' });
    const res = spawnSync('node', [path.join(ROOT, 'bin/llmc.js'), 'inspect', dir, '--tensors'], { encoding: 'utf8' });
    expect(res.status).toBe(0);
    expect(res.stdout).toMatch(/architecture: mixtral/);
    expect(res.stdout).toMatch(/MoE: 4 experts, top-2/);
    expect(res.stdout).toMatch(/model\.layers\.0\.block_sparse_moe\.experts\.3\.w2\.weight {2}\[64, 64\] {2}F32/);
    const help = spawnSync('node', [path.join(ROOT, 'bin/llmc.js'), 'inspect', '--help'], { encoding: 'utf8' });
    expect(help.stdout).toMatch(/--tensors/);
    expect(help.stdout).toMatch(/--json/);
  });
});
