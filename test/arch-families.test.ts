/**
 * The families of issue 29 read by llmc (qwen3, qwen3_moe, olmoe, olmo2, granite, smollm3): each
 * transformers-5.17-written checkpoint under ../shared/models/archs reproduces transformers' own
 * float32 logits on onnxruntime and the TS runtime at every position, greedy ids agree where the
 * reference's top-2 margin allows, and tfjs gradients match finite differences.
 */
import { existsSync, promises as fsp, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { referenceLogits, worstRowError } from './numeric.js';
import { normalizeConfig, openCheckpoint } from '../src/core/checkpoint/index.js';
import { Engine } from '../src/exec/engine/index.js';
import { loadDir } from '../src/exec/runtime/node.js';
import { compileTs } from './ts-artifact.js';
import { TfModel } from '../src/exec/autodiff/lower.js';
import { tf } from '../src/exec/autodiff/tf.js';
import { Rng } from '../src/core/util/rng.js';
import { compileGguf, llamaLogits } from './gguf-helpers.js';
import { readGgufHeader } from '../backends/gguf/read.js';
import { compile } from '../src/app/compile/compile.js';
import { silentProgress } from '../src/core/util/progress.js';
import { OnnxDecoder } from '../src/exec/engine/decoder-dir.js';
import { permuteSource, randomOrders } from '../passes/reorder/permute.js';
import { llmcInProcess } from './cli.js';
import { olmoeWithoutGqa } from './edited-checkpoints.js';

type Json = Record<string, unknown>;
const ARCHS = path.resolve(__dirname, '../../shared/models/archs');
const HAVE = existsSync(ARCHS);
if (!HAVE) console.log(`arch-families: ${ARCHS} is absent; the tests on transformers-written checkpoints are skipped`);
const FAMILIES = ['qwen3', 'qwen3_moe', 'olmoe', 'olmo2', 'granite', 'smollm3', 'gemma2', 'gemma3_text', 'phi3'];
/** The families qnn lowers (phi3 split at ingestion is Llama's layer); the others (MoE) it refuses. */
const QNN_TAKES = ['qwen3', 'olmo2', 'granite', 'smollm3', 'gemma2', 'gemma3_text', 'phi3'];
/** The families TensorRT-LLM has no model for (tensorrt_llm/models MODEL_MAP). */
const TRTLLM_LACKS = ['olmoe', 'olmo2', 'smollm3'];
/** llama.cpp's architecture names (convert_hf_to_gguf.py's MODEL_ARCH of each class). */
const GGUF_ARCH: Record<string, string> = { qwen3: 'qwen3', qwen3_moe: 'qwen3moe', olmoe: 'olmoe', olmo2: 'olmo2', granite: 'granite', smollm3: 'smollm3', gemma2: 'gemma2', gemma3_text: 'gemma3', phi3: 'phi3' };

let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-arch-families-'));
});
afterAll(async () => {
  await fsp.rm(tmp, { recursive: true, force: true });
});

const readJson = (f: string) => JSON.parse(readFileSync(f, 'utf8')) as Json;

/** Positions where a's argmax differs from b's although b's top-2 margin exceeds `margin`. */
function argmaxDisagreements(a: Float32Array, b: Float32Array, V: number, margin: number): number[] {
  const bad: number[] = [];
  for (let r = 0; r * V < b.length; r++) {
    const row = (x: Float32Array) => x.subarray(r * V, (r + 1) * V);
    const arg = (x: Float32Array) => x.reduce((best, v, i) => (v > x[best] ? i : best), 0);
    const rb = row(b);
    const top = arg(rb);
    const second = Math.max(...Array.from(rb).filter((_, i) => i !== top));
    if (rb[top] - second > margin && arg(row(a)) !== top) bad.push(r);
  }
  return bad;
}

describe.skipIf(!HAVE).each(FAMILIES)("%s reproduces transformers' reference logits", (name) => {
  const dir = path.join(ARCHS, name);
  let ids: number[];
  let ref: { data: Float32Array; shape: number[] };
  beforeAll(() => {
    ids = (readJson(path.join(dir, 'reference.json')).prompt_ids as number[]).slice();
    ref = referenceLogits(path.join(dir, 'reference_logits.safetensors'));
    expect(ref.shape[0]).toBe(ids.length);
  });

  it('config.json normalizes', () => {
    const file = path.join(dir, 'config.json');
    expect(normalizeConfig(readJson(file), file).modelType).toBe(name);
  });

  it('onnxruntime, every position within 1e-4 relative; argmax equal where the margin allows', async () => {
    const ck = await openCheckpoint(dir);
    const engine = await Engine.open(ck, { threads: 1 });
    try {
      const got = await engine.logits(ids);
      const err = worstRowError(got, ref.data, ref.shape[1]);
      console.log(`${name} onnxruntime worst row error ${err.toExponential(2)}`);
      expect(err).toBeLessThan(1e-4);
      expect(argmaxDisagreements(got, ref.data, ref.shape[1], 1e-3)).toEqual([]);
    } finally {
      await engine.close();
      await ck.close();
    }
  });

  it('tfjs, every position within 1e-4 relative', async () => {
    const ck = await openCheckpoint(dir);
    const model = await TfModel.load(ck);
    try {
      const err = worstRowError(await model.allLogits(ids), ref.data, ref.shape[1]);
      console.log(`${name} tfjs worst row error ${err.toExponential(2)}`);
      expect(err).toBeLessThan(1e-4);
    } finally {
      model.dispose();
      await ck.close();
    }
  });

  it('the TS runtime (F32 artifact), every position within 1e-4 relative', async () => {
    const out = path.join(tmp, `ts-${name}`);
    await compileTs(dir, out);
    const model = await loadDir(out);
    const got = model.forward(ids);
    const err = worstRowError(got, ref.data, ref.shape[1]);
    console.log(`${name} ts runtime worst row error ${err.toExponential(2)}`);
    expect(err).toBeLessThan(1e-4);
    expect(argmaxDisagreements(got, ref.data, ref.shape[1], 1e-3)).toEqual([]);
  });
});

describe.skipIf(!HAVE).each(['olmo2', 'qwen3', 'granite', 'gemma2', 'gemma3_text', 'phi3'])('%s: tfjs gradients equal finite differences', (name) => {
  // olmo2: a whole-projection q norm and post-norms; qwen3: per-head q/k norms; granite: the multipliers;
  // gemma2: sandwich (1 + w) norms, GELU-tanh, final soft-capping; gemma3: per-head (1 + w) q/k norms; phi3: split qkv / gate_up.
  it('the directional derivative of the loss along a random direction of q_proj and down_proj', async () => {
    const ck = await openCheckpoint(path.join(ARCHS, name));
    const model = await TfModel.load(ck);
    try {
      const seq = [(readJson(path.join(ARCHS, name, 'reference.json')).prompt_ids as number[]).slice(0, 10)];
      const names = ['model.layers.1.self_attn.q_proj.weight', 'model.layers.2.mlp.down_proj.weight'];
      const { grads } = await model.gradients(seq, names);
      const rng = new Rng(5);
      const base = await Promise.all(names.map(async (n) => ({ n, shape: ck.meta(n)!.shape, w: await ck.readF32(n) })));
      const dirs = base.map((b) => Float32Array.from(b.w, () => rng.normal()));
      let analytic = 0;
      base.forEach((b, i) => grads.get(b.n)!.forEach((g, k) => (analytic += g * dirs[i][k])));
      const at = (eps: number) =>
        tf.tidy(() => {
          // The lowering holds linear weights transposed ([in, out]) under `name#T`.
          const over = new Map(base.map((b, i) => [`${b.n}#T`, tf.transpose(tf.tensor2d(Float32Array.from(b.w, (v, k) => v + eps * dirs[i][k]), b.shape as [number, number]))]));
          return model.loss(seq, {}, over).dataSync()[0];
        });
      const central = (h: number) => (at(h) - at(-h)) / (2 * h);
      const numeric = (4 * central(1e-3) - central(2e-3)) / 3;
      expect(Math.abs(analytic)).toBeGreaterThan(1e-3);
      expect(Math.abs(analytic - numeric) / Math.abs(numeric)).toBeLessThan(5e-3);
    } finally {
      model.dispose();
      await ck.close();
    }
  });
});

describe.skipIf(!HAVE).each(Object.keys(GGUF_ARCH))('%s in llama.cpp (F32 GGUF under its own architecture name)', (name) => {
  // llama.cpp keeps its KV cache in f16: ~1e-3 relative (config-reading's llama3-rope case shows the same).
  it("every position's logits within 3e-3 relative of transformers'", async () => {
    const ref = referenceLogits(path.join(ARCHS, name, 'reference_logits.safetensors'));
    // llama.cpp's olmoe has no grouped-query attention (the gguf target refuses the checkpoint as is): its MHA equivalent.
    const dir = name === 'olmoe' ? await olmoeWithoutGqa(path.join(ARCHS, 'olmoe'), path.join(tmp, 'olmoe-mha')) : path.join(ARCHS, name);
    const ids = readJson(path.join(ARCHS, name, 'reference.json')).prompt_ids as number[];
    const V = ref.shape[1];
    const { file } = await compileGguf(dir, path.join(tmp, `gguf-${name}`), { quant: 'F32' });
    const h = await readGgufHeader(file);
    expect(h.metadata.get('general.architecture')).toBe(GGUF_ARCH[name]);
    if (name === 'granite') {
      const cfg = readJson(path.join(dir, 'config.json'));
      expect([h.metadata.get('granite.embedding_scale'), h.metadata.get('granite.residual_scale'), h.metadata.get('granite.attention.scale'), h.metadata.get('granite.logit_scale')]).toEqual(
        ['embedding_multiplier', 'residual_multiplier', 'attention_multiplier', 'logits_scaling'].map((k) => Math.fround(cfg[k] as number)),
      );
    }
    const rows = await llamaLogits(file, ids, V);
    const got = new Float32Array(ids.length * V);
    rows.forEach((r, t) => got.set(r, t * V));
    const err = worstRowError(got, ref.data, V);
    console.log(`${name} llama.cpp worst row error ${err.toExponential(2)}`);
    expect(err).toBeLessThan(3e-3);
  });
});

describe.skipIf(!HAVE)('the gguf target refuses what llama.cpp computes otherwise, in one line', () => {
  it('olmoe with grouped-query attention', async () => {
    await expect(compileGguf(path.join(ARCHS, 'olmoe'), path.join(tmp, 'gguf-olmoe-gqa'), { quant: 'F32' })).rejects.toThrow(/num_key_value_heads 2 differs from num_attention_heads 4, but llama.cpp's olmoe has no grouped-query attention/);
  });
});

describe.skipIf(!HAVE).each(FAMILIES)('%s through the hf and cuda targets', (name) => {
  const dir = path.join(ARCHS, name);
  const notes: string[] = [];
  const build = async (target: string, quant?: string) => {
    const out = path.join(tmp, `${target}-${name}`);
    const source = await openCheckpoint(dir);
    try {
      await compile({ source, target, outDir: out, passes: [], quant, progress: silentProgress, note: (n) => notes.push(n) });
    } finally {
      await source.close();
    }
    return out;
  };

  it('hf: the written checkpoint reads back and reproduces the reference on onnxruntime', async () => {
    const out = await build('hf');
    const ck = await openCheckpoint(out);
    const engine = await Engine.open(ck, { threads: 1 });
    try {
      const ref = referenceLogits(path.join(dir, 'reference_logits.safetensors'));
      const ids = readJson(path.join(dir, 'reference.json')).prompt_ids as number[];
      expect(worstRowError(await engine.logits(ids), ref.data, ref.shape[1])).toBeLessThan(1e-4);
    } finally {
      await engine.close();
      await ck.close();
    }
  });

  it('cuda: the fp32 decoder graph reproduces the reference within 1e-4 on onnxruntime (olmoe too, noted as not for transformers.js)', async () => {
    const out = await build('cuda', 'fp32');
    // transformers.js has no olmoe: the compile says so, and transformers.js indeed does not load it.
    expect(notes.some((n) => n.startsWith(`transformers.js has no ${name} model type`))).toBe(name === 'olmoe');
    if (name === 'olmoe') {
      const { AutoModelForCausalLM, env } = await import('@huggingface/transformers');
      env.allowRemoteModels = false;
      env.localModelPath = tmp;
      await expect(AutoModelForCausalLM.from_pretrained(path.basename(out), { local_files_only: true, device: 'cpu' })).rejects.toThrow(/olmoe/);
    }
    const d = await OnnxDecoder.open(path.join(out, 'onnx/model.onnx'));
    try {
      const ref = referenceLogits(path.join(dir, 'reference_logits.safetensors'));
      const ids = readJson(path.join(dir, 'reference.json')).prompt_ids as number[];
      const err = worstRowError(await d.logits(ids), ref.data, ref.shape[1]);
      console.log(`${name} cuda fp32 worst row error ${err.toExponential(2)}`);
      expect(err).toBeLessThan(1e-4);
    } finally {
      await d.close();
    }
  });

  it('tensorrt-llm (where TensorRT-LLM has no such model) and qnn (the MoE families) refuse the family in one line (qnn runs the dense ones: test/qnn-archs.test.ts; tensorrt-llm writes the others: test/tensorrt-llm-families.test.ts)', async () => {
    const source = await openCheckpoint(dir);
    try {
      // phi3 split at ingestion is Llama's layer, which qnn lowers.
      for (const target of [...(TRTLLM_LACKS.includes(name) ? ['tensorrt-llm'] : []), ...(QNN_TAKES.includes(name) ? [] : ['qnn'])]) {
        const run = compile({ source, target, outDir: path.join(tmp, `${target}-${name}`), passes: target === 'qnn' ? ['outliers'] : [], progress: silentProgress, note: () => {} });
        await expect(run).rejects.toThrow(new RegExp(`--target ${target} .*${name}`));
      }
    } finally {
      await source.close();
    }
  });
});

/** transformers.js's decoder-only model types among these families (models.js MODEL_FOR_CAUSAL_LM_MAPPING_NAMES). */
describe.skipIf(!HAVE).each(FAMILIES.filter((f) => f !== 'olmoe'))('%s: transformers.js loads the cuda directory', (name) => {
  it("AutoModelForCausalLM's greedy continuation equals transformers' (reference.json greedy_16)", async () => {
    const { AutoModelForCausalLM, env, Tensor } = await import('@huggingface/transformers');
    env.allowRemoteModels = false;
    env.localModelPath = tmp;
    const dir = path.join(ARCHS, name);
    const out = path.join(tmp, `tjs-${name}`);
    const source = await openCheckpoint(dir);
    try {
      await compile({ source, target: 'cuda', outDir: out, passes: [], quant: 'fp32', progress: silentProgress, note: () => {} });
    } finally {
      await source.close();
    }
    const ref = readJson(path.join(dir, 'reference.json'));
    const prompt = ref.prompt_ids as number[];
    const want = ref.greedy_16 as number[];
    const model = await AutoModelForCausalLM.from_pretrained(`tjs-${name}`, { local_files_only: true, device: 'cpu' });
    try {
      const ids = new Tensor('int64', BigInt64Array.from(prompt, BigInt), [1, prompt.length]);
      const mask = new Tensor('int64', new BigInt64Array(prompt.length).fill(1n), [1, prompt.length]);
      const res = (await model.generate({ input_ids: ids, attention_mask: mask, max_new_tokens: want.length, min_new_tokens: want.length, do_sample: false })) as InstanceType<typeof Tensor>;
      expect(Array.from(res.data as BigInt64Array, Number).slice(prompt.length)).toEqual(want);
    } finally {
      await model.dispose();
    }
  });
});

describe.skipIf(!HAVE)('reorder on the families', () => {
  // Per-head q/k norms share one weight across heads: permuting heads (and neurons) leaves the function as is.
  // gemma2: sandwich norms act on the (unpermuted) residual stream; gemma3: per-head (1 + w) q/k norms; phi3: its split q/k/v and gate/up parts permute as any.
  // olmo2 / olmoe: a q/k norm over the whole projection moves its weight with the channels (the mean of squares is the same).
  it.each(['qwen3', 'qwen3_moe', 'granite', 'smollm3', 'gemma2', 'gemma3_text', 'phi3', 'olmo2', 'olmoe'])('%s: a random permutation of every layer\'s heads and neurons keeps the reference logits (onnxruntime, 1e-4)', async (name) => {
    const dir = path.join(ARCHS, name);
    const ck = await openCheckpoint(dir);
    const permuted = permuteSource(ck, randomOrders(ck, 7, Array.from({ length: ck.spec.numLayers }, (_, l) => l)));
    const engine = await Engine.open(permuted, { threads: 1 });
    try {
      const ref = referenceLogits(path.join(dir, 'reference_logits.safetensors'));
      const ids = readJson(path.join(dir, 'reference.json')).prompt_ids as number[];
      expect(worstRowError(await engine.logits(ids), ref.data, ref.shape[1])).toBeLessThan(1e-4);
      // Not vacuous: the heads did move.
      expect(await permuted.readF32('model.layers.0.self_attn.q_proj.weight')).not.toEqual(await ck.readF32('model.layers.0.self_attn.q_proj.weight'));
      if (ck.spec.qkNorm?.scope === 'all') expect(await permuted.readF32('model.layers.0.self_attn.q_norm.weight')).not.toEqual(await ck.readF32('model.layers.0.self_attn.q_norm.weight'));
    } finally {
      await engine.close();
      await ck.close();
    }
  });
});

describe.skipIf(!HAVE)('the other passes on the families', () => {
  const prompt = (name: string) => readJson(path.join(ARCHS, name, 'reference.json')).prompt_ids as number[];
  const greedy = (name: string) => (readJson(path.join(ARCHS, name, 'reference.json')).greedy_16 as number[]).slice(0, 8);
  const runIds = async (dir: string, name: string, ...flags: string[]) => {
    const r = await llmcInProcess('run', dir, '--prompt-ids', prompt(name).join(','), '-n', '8', ...flags, '--json');
    expect(r.code).toBe(0);
    return JSON.parse(r.stdout).generated_ids as number[];
  };
  // `llmc compile` in-process on the built modules (test/cli.ts): the passes' measurements in JS ran
  // several times slower through vitest's module transform.
  const build = async (name: string, target: string, passes: string[], opts: Record<string, string>, out: string) => {
    const flags = Object.entries(opts).flatMap(([k, v]) => ['--opt', `${k}=${v}`]);
    const r = await llmcInProcess('compile', path.join(ARCHS, name), '--target', target, '--passes', passes.join(','), ...flags, '--cache-dir', path.join(tmp, 'cache'), '-o', out);
    expect(r.code, r.stderr).toBe(0);
    return out;
  };

  // granite: scale ops in the embed, mlp and head parts; olmo2: a layer that starts at its q projection (no input norm).
  it.each(['granite', 'olmo2'])("chunk-partition on %s: chunked prefill (5 chunks of 4) continues as transformers' greedy", async (name) => {
    const out = await build(name, 'ts', ['chunk-partition'], { 'chunk-partition.chunk': '4' }, path.join(tmp, `cp-${name}`));
    expect(await runIds(out, name, '--chunk', 'auto')).toEqual(greedy(name));
  });

  it.each(['olmo2', 'smollm3'])("tree-search on %s with a layer-skipping draft: speculative decoding continues as transformers' greedy", async (name) => {
    const out = await build(name, 'ts', ['tree-search'], { 'tree-search.draftSkip': '1,2' }, path.join(tmp, `tree-${name}`));
    expect(await runIds(out, name, '--speculative')).toEqual(greedy(name));
  });

  it.each([
    ['qwen3_moe', 'gguf'],
    ['olmoe', 'ts'],
  ])('expert-bits on %s (target %s): a format per expert (or per layer for gguf) within a 5 bpw budget', async (name, target) => {
    const out = path.join(tmp, `eb-${name}`);
    await build(name, target, ['expert-bits'], { 'expert-bits.budgetBpw': '5' }, out);
    const manifest = readJson(path.join(out, 'llmc-manifest.json'));
    const rec = (manifest.passes as Json[]).find((p) => p.name === 'expert-bits')?.metadata as Json | undefined;
    expect(rec?.format).toBe('expert-table/2');
    // gguf stacks a layer's experts in one tensor of one type: the plan is per layer and projection there.
    expect(rec?.granularity).toBe(target === 'gguf' ? 'layer-proj' : 'expert');
    expect((rec?.budget as Json).kind).toBe('bpw');
    // The artifact runs (llama.cpp for gguf, the TS runtime for ts).
    expect(await runIds(target === 'gguf' ? path.join(out, 'model.gguf') : out, name)).toHaveLength(8);
  }, 240_000);
});

describe('llmc list architectures', () => {
  it('lists every registry family with its targets and passes, as the refusals above decide', async () => {
    const r = await llmcInProcess('list', 'architectures', '--json');
    expect(r.code).toBe(0);
    const rows = JSON.parse(r.stdout) as { modelType: string; targets: Record<string, unknown>; passes: Record<string, boolean> }[];
    const by = new Map(rows.map((a) => [a.modelType, a]));
    for (const f of FAMILIES) expect(by.get(f)?.targets.gguf).toBe(GGUF_ARCH[f]);
    expect(by.get('olmoe')!.targets.cuda).toBe(true);
    expect(by.get('qwen3')!.targets.cuda).toBe(true);
    expect(FAMILIES.map((f) => by.get(f)!.passes.reorder)).toEqual(FAMILIES.map(() => true));
    expect(FAMILIES.map((f) => by.get(f)!.passes['expert-bits'])).toEqual([false, true, true, false, false, false, false, false, false]);
    for (const f of FAMILIES) expect([by.get(f)!.targets['tensorrt-llm'] === null, by.get(f)!.targets.qnn, by.get(f)!.passes.outliers]).toEqual([TRTLLM_LACKS.includes(f), QNN_TAKES.includes(f), QNN_TAKES.includes(f)]);
  });
});

describe.skipIf(!HAVE)('config keys of the families that change the math and are not implemented are refused in one line', () => {
  const cfg = (name: string) => readJson(path.join(ARCHS, name, 'config.json'));
  it.each([
    ['olmoe', { clip_qkv: 8 }, /key "clip_qkv" = 8 is not supported by llmc's olmoe reader/],
    ['qwen3_moe', { use_sliding_window: true, sliding_window: 16 }, /use_sliding_window with sliding_window 16 is not implemented for qwen3_moe/],
    ['smollm3', { no_rope_layers: [1, 2, 1, 0] }, /"no_rope_layers" must give 0 or 1/],
    ['granite', { mup_scale: 2 }, /key "mup_scale" .* is not understood by llmc's granite reader/],
  ] as [string, Json, RegExp][])('%s with %j', (name, patch, msg) => {
    expect(() => normalizeConfig({ ...cfg(name), ...patch }, 'config.json')).toThrow(msg);
  });

  it('smollm3 without no_rope_layers: every no_rope_layer_interval-th layer attends without rope', () => {
    const c = { ...cfg('smollm3'), num_hidden_layers: 8, layer_types: undefined, no_rope_layers: undefined, no_rope_layer_interval: 4 };
    expect(normalizeConfig(c, 'config.json').ropeLayers).toEqual([0, 1, 2, 4, 5, 6]);
  });
});
