/**
 * What the gemma2 / gemma3_text / phi3 references under ../shared cannot show by themselves:
 * gemma3's per-layer-type rope (full layers on rope_parameters.full_attention, sliding ones on their
 * own base: a transformers-written gemma3 has both, the fixture only sliding layers), gemma2's attention
 * soft-capping (transformers' default attention drops it, so the references carry none), and phi3's fused
 * tensors checked at ingestion. Every executor must compute the same model.
 */
import { existsSync, promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { worstRowError } from './numeric.js';
import { normalizeConfig, openCheckpoint } from '../src/core/checkpoint/index.js';
import { transformSource, type ModelSource } from '../src/core/checkpoint/source.js';
import { Engine } from '../src/exec/engine/index.js';
import { modelFromTensors } from '../src/exec/runtime/memory.js';
import { TfModel } from '../src/exec/autodiff/lower.js';
import { compile } from '../src/app/compile/compile.js';
import { silentProgress } from '../src/core/util/progress.js';
import { OnnxDecoder } from '../src/exec/engine/decoder-dir.js';
import { compileGguf } from './gguf-helpers.js';
import { permuteSource, randomOrders } from '../passes/reorder/permute.js';
import { partitionGraph } from '../src/core/chunks/partition.js';
import { ChunkedPrefill } from '../src/exec/runtime/chunked.js';
import { llmcInProcess } from './cli.js';

type Json = Record<string, unknown>;
const ARCHS = path.resolve(__dirname, '../../shared/models/archs');
const HAVE = existsSync(ARCHS);
if (!HAVE) console.log(`gemma-phi3: ${ARCHS} is absent; its tests are skipped`);

let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-gemma-phi3-'));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

const readJson = (f: string) => JSON.parse(readFileSync(f, 'utf8')) as Json;
const ids = () => (readJson(path.join(ARCHS, 'gemma3_text/reference.json')).prompt_ids as number[]).slice();

/** A copy of a fixture with config.json patched (the weights linked). */
async function variant(family: string, name: string, patch: Json): Promise<string> {
  const dir = path.join(tmp, name);
  await fsp.mkdir(dir, { recursive: true });
  await fsp.symlink(path.join(ARCHS, family, 'model.safetensors'), path.join(dir, 'model.safetensors'));
  await fsp.writeFile(path.join(dir, 'config.json'), JSON.stringify({ ...readJson(path.join(ARCHS, family, 'config.json')), ...patch }));
  return dir;
}

/** Logits at every position on onnxruntime, the TS runtime, tfjs (and the cuda fp32 decoder graph when `dir` is given). */
async function everyExecutor(source: ModelSource, tokens: number[], dir?: string): Promise<Record<string, Float32Array>> {
  const engine = await Engine.open(source, { threads: 1 });
  const out: Record<string, Float32Array> = {};
  try {
    out.onnxruntime = await engine.logits(tokens);
  } finally {
    await engine.close();
  }
  out.ts = (await modelFromTensors(source)).forward(tokens);
  const tfm = await TfModel.load(source);
  try {
    out.tfjs = await tfm.allLogits(tokens);
  } finally {
    tfm.dispose();
  }
  if (dir) {
    const cuda = path.join(tmp, `cuda-${path.basename(dir)}`);
    await compile({ source, target: 'cuda', outDir: cuda, passes: [], quant: 'fp32', progress: silentProgress, note: () => {} });
    const d = await OnnxDecoder.open(path.join(cuda, 'onnx/model.onnx'));
    try {
      out.cuda = await d.logits(tokens);
    } finally {
      await d.close();
    }
  }
  return out;
}

describe.skipIf(!HAVE)("gemma3: full and sliding layers each rotate with their own base", () => {
  // A window past the prompt makes sliding and full masks equal, so only the rope tells the layer kinds
  // apart: layers 0, 2 at 1e4 and 1, 3 at 1e6 is the same model whichever kind carries which base.
  const wide = { sliding_window: 512 };
  const rope = (full: number, sliding: number) => ({
    rope_parameters: { full_attention: { rope_type: 'default', rope_theta: full }, sliding_attention: { rope_type: 'default', rope_theta: sliding } },
  });
  const SF = ['sliding_attention', 'full_attention', 'sliding_attention', 'full_attention'];
  const FS = ['full_attention', 'sliding_attention', 'full_attention', 'sliding_attention'];

  it('normalizes: ropeTheta from full_attention, localRope from sliding_attention; one base when they agree or one kind is absent', async () => {
    const file = path.join(ARCHS, 'gemma3_text/config.json');
    const fixture = normalizeConfig(readJson(file), file);
    expect(fixture).toMatchObject({ ropeTheta: 10000, localRope: null, slidingWindow: 8, slidingLayers: null });
    const mixed = normalizeConfig({ ...readJson(file), layer_types: SF, ...rope(1e6, 1e4) }, file);
    expect(mixed).toMatchObject({ ropeTheta: 1e6, localRope: { theta: 1e4, scaling: null }, slidingLayers: [0, 2] });
    // The older form: rope_theta for full layers, rope_local_base_freq for sliding ones.
    const { rope_parameters: _r, ...old } = readJson(file);
    expect(normalizeConfig({ ...old, layer_types: SF, rope_theta: 1e6, rope_local_base_freq: 1e4 }, file)).toMatchObject({ ropeTheta: 1e6, localRope: { theta: 1e4 } });
    expect(normalizeConfig({ ...readJson(file), layer_types: SF, ...rope(1e4, 1e4) }, file).localRope).toBeNull();
  });

  it('every executor (onnxruntime, TS runtime, tfjs, cuda decoder) computes the same model both ways round, and it differs from one base everywhere', async () => {
    const tokens = ids();
    const run = async (name: string, patch: Json) => {
      const dir = await variant('gemma3_text', name, { ...wide, ...patch });
      const ck = await openCheckpoint(dir);
      try {
        return await everyExecutor(ck, tokens, dir);
      } finally {
        await ck.close();
      }
    };
    const a = await run('sf', { layer_types: SF, ...rope(1e6, 1e4) });
    const b = await run('fs', { layer_types: FS, ...rope(1e4, 1e6) });
    const one = await run('one', { layer_types: SF, ...rope(1e4, 1e4) });
    const V = 512;
    for (const k of Object.keys(a)) {
      expect(worstRowError(a[k], a.onnxruntime, V), `${k} vs onnxruntime`).toBeLessThan(1e-5);
      expect(worstRowError(b[k], a.onnxruntime, V), `${k} (bases swapped with the kinds) vs onnxruntime`).toBeLessThan(1e-5);
    }
    expect(worstRowError(one.onnxruntime, a.onnxruntime, V)).toBeGreaterThan(1e-3);
  });
});

describe.skipIf(!HAVE)('the gguf target refuses what llama.cpp computes otherwise, in one line', () => {
  it("gemma3 layers that do not follow llama.cpp's every-6th-full layout", async () => {
    const dir = await variant('gemma3_text', 'gemma3-sf', { layer_types: ['sliding_attention', 'full_attention', 'sliding_attention', 'full_attention'] });
    await expect(compileGguf(dir, path.join(tmp, 'gguf-gemma3-sf'), { quant: 'F32' })).rejects.toThrow(/sliding layers \[0,2\] differ from llama.cpp's gemma3 layout/);
  });

  it("gemma2 with query_pre_attn_scalar other than head_dim (llama.cpp scales by head_dim)", async () => {
    const dir = await variant('gemma2', 'gemma2-qpas', { query_pre_attn_scalar: 32 });
    await expect(compileGguf(dir, path.join(tmp, 'gguf-gemma2-qpas'), { quant: 'F32' })).rejects.toThrow(/query_pre_attn_scalar gives attention scale 0.17677.*but llama.cpp's gemma2 scales by 0.25/);
  });
});

describe.skipIf(!HAVE)('attention soft-capping (cap·tanh(s/cap) before the mask)', () => {
  it('onnxruntime, the TS runtime (JS attention loops) and tfjs agree with the cap on, and it changes the logits', async () => {
    const ck = await openCheckpoint(path.join(ARCHS, 'gemma2'));
    try {
      expect(ck.spec.attnSoftcap).toBeNull(); // what transformers' default (sdpa) attention computes
      const capped = transformSource(ck, { label: 'softcap', paramsHash: '5', spec: { ...ck.spec, attnSoftcap: 5 }, rewrite: (_n, d) => d, untouched: () => true });
      const tokens = ids();
      const on = await everyExecutor(capped, tokens);
      const off = await everyExecutor(ck, tokens);
      for (const k of Object.keys(on)) expect(worstRowError(on[k], on.onnxruntime, 512), k).toBeLessThan(1e-5);
      expect(worstRowError(off.onnxruntime, on.onnxruntime, 512)).toBeGreaterThan(1e-3);
      // Soft-capping is per score: a random permutation of the heads and neurons computes the same model.
      const permuted = permuteSource(capped, randomOrders(capped, 3, [0, 1, 2, 3]));
      const engine = await Engine.open(permuted, { threads: 1 });
      try {
        expect(worstRowError(await engine.logits(tokens), on.onnxruntime, 512)).toBeLessThan(1e-5);
      } finally {
        await engine.close();
      }
    } finally {
      await ck.close();
    }
  });
});

describe.skipIf(!HAVE)('phi3: fused qkv_proj and gate_up_proj split at ingestion', () => {
  it('the parts are read as q/k/v and gate/up row ranges of the stored tensors', async () => {
    const ck = await openCheckpoint(path.join(ARCHS, 'phi3'));
    try {
      expect(ck.meta('model.layers.0.self_attn.qkv_proj.weight')).toBeUndefined();
      expect(ck.meta('model.layers.0.self_attn.k_proj.weight')?.shape).toEqual([32, 64]);
      expect(ck.meta('model.layers.0.mlp.up_proj.weight')?.shape).toEqual([128, 64]);
    } finally {
      await ck.close();
    }
  });

  it('a fused tensor of the wrong height is one error naming it', async () => {
    const dir = await variant('phi3', 'phi3-wide', { intermediate_size: 96 });
    await expect(openCheckpoint(dir)).rejects.toThrow(/gate_up_proj.weight" has shape \[256,64\] but config.json implies 192 rows \(96 \+ 96\)/);
  });
});

describe.skipIf(!HAVE).each(['gemma2', 'gemma3_text', 'phi3'])('%s through the hf and cuda targets', (name) => {
  const ref = () => {
    const buf = readFileSync(path.join(ARCHS, name, 'reference_logits.safetensors'));
    const n = Number(buf.readBigUInt64LE(0));
    const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, { data_offsets: [number, number] }>;
    const t = header[Object.keys(header).find((k) => k !== '__metadata__')!];
    const bytes = buf.subarray(8 + n + t.data_offsets[0], 8 + n + t.data_offsets[1]);
    return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  };
  const prompt = () => readJson(path.join(ARCHS, name, 'reference.json')).prompt_ids as number[];

  it('hf: the directory holds transformers\' own tensor names (phi3 fused again) and reproduces the reference', async () => {
    const out = path.join(tmp, `hf-${name}`);
    const source = await openCheckpoint(path.join(ARCHS, name));
    try {
      await compile({ source, target: 'hf', outDir: out, passes: [], quant: 'F32', progress: silentProgress, note: () => {} });
    } finally {
      await source.close();
    }
    const header = (f: string) => {
      const buf = readFileSync(f);
      return Object.keys(JSON.parse(buf.subarray(8, 8 + Number(buf.readBigUInt64LE(0))).toString('utf8'))).sort();
    };
    expect(header(path.join(out, 'model.safetensors'))).toEqual(header(path.join(ARCHS, name, 'model.safetensors')));
    const ck = await openCheckpoint(out);
    const engine = await Engine.open(ck, { threads: 1 });
    try {
      expect(worstRowError(await engine.logits(prompt()), ref(), 512)).toBeLessThan(1e-4);
    } finally {
      await engine.close();
      await ck.close();
    }
  });

  it('cuda (fp32): transformers.js loads the directory and its logits match the reference', async () => {
    const { AutoModelForCausalLM, env, Tensor } = await import('@huggingface/transformers');
    env.allowRemoteModels = false;
    env.localModelPath = tmp;
    const out = path.join(tmp, `tjs-${name}`);
    const source = await openCheckpoint(path.join(ARCHS, name));
    try {
      await compile({ source, target: 'cuda', outDir: out, passes: [], quant: 'fp32', progress: silentProgress, note: () => {} });
    } finally {
      await source.close();
    }
    const model = await AutoModelForCausalLM.from_pretrained(`tjs-${name}`, { local_files_only: true, device: 'cpu' });
    try {
      const ids = prompt();
      const input_ids = new Tensor('int64', BigInt64Array.from(ids, BigInt), [1, ids.length]);
      const attention_mask = new Tensor('int64', new BigInt64Array(ids.length).fill(1n), [1, ids.length]);
      const { logits } = (await model({ input_ids, attention_mask })) as { logits: InstanceType<typeof Tensor> };
      expect(worstRowError(logits.data as Float32Array, ref(), 512)).toBeLessThan(1e-4);
    } finally {
      await model.dispose();
    }
  });
});

describe.skipIf(!HAVE).each(['gemma2', 'gemma3_text', 'phi3'])('%s: chunk-partition cuts the graph and chunked prefill equals whole-prompt prefill (TS runtime)', (name) => {
  it('c ∈ {4, 8}, the 20-token prompt (gemma2: its window of 8 crosses chunks)', async () => {
    const ck = await openCheckpoint(path.join(ARCHS, name));
    try {
      const model = await modelFromTensors(ck);
      const p = partitionGraph(model.graph);
      const tokens = readJson(path.join(ARCHS, name, 'reference.json')).prompt_ids as number[];
      const whole = model.forward(tokens, model.newCache());
      for (const c of [4, 8]) {
        const chunked = new ChunkedPrefill(model, { c, subgraphs: p.subgraphs, order: () => Int32Array.from({ length: Math.ceil(tokens.length / c) * p.subgraphs.length }, (_, t) => t) });
        expect(worstRowError(chunked.prefill(tokens, model.newCache(), 'all'), whole, 512), `c=${c}`).toBeLessThan(1e-5);
      }
    } finally {
      await ck.close();
    }
  });
});

describe('llmc list architectures', () => {
  it('gemma2 / gemma3_text / phi3: their layer features, targets and passes (--json)', async () => {
    const r = await llmcInProcess('list', 'architectures', '--json');
    expect(r.code).toBe(0);
    type Row = { modelType: string; layer: string[]; targets: Record<string, unknown>; passes: Record<string, boolean> };
    const by = new Map((JSON.parse(r.stdout) as Row[]).map((x) => [x.modelType, x]));
    expect(by.get('gemma2')).toMatchObject({ layer: expect.arrayContaining(['sandwich-norms', 'GELU-tanh MLP', '(1 + w) norms', 'final logit soft-capping']), targets: { gguf: 'gemma2', cuda: true, qnn: true, 'tensorrt-llm': 'Gemma2ForCausalLM' }, passes: { outliers: true } });
    expect(by.get('gemma3_text')).toMatchObject({ layer: expect.arrayContaining(['per-head q/k norm', 'rope base per layer type']), targets: { gguf: 'gemma3', qnn: true }, passes: { reorder: true, outliers: true } });
    expect(by.get('phi3')).toMatchObject({ layer: [], targets: { gguf: 'phi3', qnn: true, cuda: true }, passes: { reorder: true, outliers: true } });
  });
});
