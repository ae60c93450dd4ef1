/**
 * `llmc report` on a cuda artifact: bytes per tensor group and format (the compile summary's, from
 * the graph's initializers) and the graph's inputs and outputs, checked against onnxruntime's own
 * reading of the graph and the initializers' bytes decoded from the file.
 */
import { promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onnx } from '../src/exec/onnx/proto.js';
import { llmcInProcess as llmc } from './cli.js';

const STORIES = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;

beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-report-cuda-'));
});
afterAll(() => fsp.rm(tmp, { recursive: true, force: true }));

type Section = { id: string; data: Record<string, unknown> };

describe('llmc report on a cuda artifact', () => {
  it.each([['fp16', []], ['int4', ['--tensor-type', 'down_proj=int8']]] as const)('%s: sizes per tensor group and format, and the graph interface onnxruntime sees', async (quant, extra) => {
    const out = path.join(tmp, quant);
    const c = await llmc('compile', STORIES, '--target', 'cuda', '--quant', quant, ...extra, '-o', out, '--json');
    expect(c.code, c.stderr).toBe(0);
    const r = await llmc('report', out, '--json', '--no-quality');
    expect(r.code, r.stderr).toBe(0);
    const sections = JSON.parse(r.stdout).sections as Section[];
    const sizes = sections.find((s) => s.id === 'sizes')!.data as { totalBytes: number; byGroupAndFormat: { group: string; format: string; bytes: number }[] };
    // Every weight initializer's bytes, decoded from the graph file, are counted once (the lowering's
    // own small constants, const_* and rotate_half_*, are part of the graph, not weights).
    const model = onnx.ModelProto.decode(readFileSync(path.join(out, 'onnx/model.onnx')));
    const weights = model.graph!.initializer!.filter((t) => !/^(const_|rotate_half_)/.test(t.name!));
    expect(weights.length).toBeGreaterThan(40);
    const initBytes = weights.reduce((a, t) => a + (t.rawData?.length ?? 0), 0);
    expect(sizes.totalBytes).toBe(initBytes);
    const groups = new Set(sizes.byGroupAndFormat.map((g) => g.group));
    for (const g of ['attention', 'mlp', 'embedding', 'norms']) expect(groups).toContain(g);
    if (quant === 'int4') {
      expect(sizes.byGroupAndFormat.find((g) => g.group === 'mlp' && g.format === 'int8')).toBeDefined();
      expect(sizes.byGroupAndFormat.find((g) => g.group === 'attention')!.format).toMatch(/^int4/);
    }
    const graph = sections.find((s) => s.id === 'graph')!.data as { inputs: { name: string; type: string; shape: string }[]; outputs: { name: string }[] };
    const session = await ort.InferenceSession.create(path.join(out, 'onnx/model.onnx'));
    try {
      expect(graph.inputs.map((i) => i.name)).toEqual(session.inputNames);
      expect(graph.outputs.map((o) => o.name)).toEqual(session.outputNames);
    } finally {
      await session.release();
    }
    expect(graph.inputs[0]).toEqual({ name: 'input_ids', type: 'int64', shape: '[batch_size, sequence_length]' });
    // The Markdown collapses the per-layer cache tensors into one row each.
    const md = path.join(tmp, `${quant}.md`);
    expect((await llmc('report', out, '-o', md, '--no-quality')).code).toBe(0);
    expect(readFileSync(md, 'utf8')).toMatch(/\| past_key_values\.\{0\.\.4\}\.key \| float(16)? \| \[batch_size, 4, past_sequence_length, 8\] \|/);
  });
});
