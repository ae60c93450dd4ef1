/**
 * genai_config.json of `--target cuda`, for onnxruntime-genai (not installable here: no npm package).
 * Checked against a zod schema transcribed from onnxruntime-genai's own config parser
 * (microsoft/onnxruntime-genai src/config.cpp: each *_Element's OnValue / OnObject / OnArray, which
 * throw JSON::unknown_value_error on any other key, hence strict objects), and its I/O names against
 * the graph's real inputs and outputs as onnxruntime reads them, with `%d` filled per layer.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { generateFixture } from '../fixtures/generate.js';
import { llmcInProcess } from './cli.js';

const MODEL = path.resolve(__dirname, '../fixtures/models/stories260K');
let tmp: string;
beforeAll(async () => {
  tmp = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-genai-'));
});
afterAll(() => fsp.rm(tmp, { recursive: true, force: true }));

const int = z.number().int();
/** SessionOptions_Element: known keys; any other string value is an onnxruntime config entry (AddConfigEntry). */
const sessionOptions = z
  .object({
    log_id: z.string().optional(),
    enable_profiling: z.string().optional(),
    intra_op_num_threads: int.optional(),
    inter_op_num_threads: int.optional(),
    log_severity_level: int.optional(),
    log_verbosity_level: int.optional(),
    enable_cpu_mem_arena: z.boolean().optional(),
    enable_mem_pattern: z.boolean().optional(),
    graph_optimization_level: z.enum(['ORT_DISABLE_ALL', 'ORT_ENABLE_BASIC', 'ORT_ENABLE_EXTENDED', 'ORT_ENABLE_ALL']).optional(),
    custom_ops_library: z.string().optional(),
    provider_options: z.array(z.record(z.string(), z.unknown())).optional(),
  })
  .catchall(z.string());
/** DecoderInputs_Element / DecoderOutputs_Element (the keys a decoder-only graph uses). */
const decoderInputs = z.strictObject({
  input_ids: z.string().optional(),
  inputs_embeds: z.string().optional(),
  attention_mask: z.string().optional(),
  position_ids: z.string().optional(),
  past_key_names: z.string().optional(),
  past_value_names: z.string().optional(),
  past_names: z.string().optional(),
});
const decoderOutputs = z.strictObject({
  logits: z.string().optional(),
  present_key_names: z.string().optional(),
  present_value_names: z.string().optional(),
  present_names: z.string().optional(),
});
/** Decoder_Element. */
const decoder = z.strictObject({
  filename: z.string(),
  session_options: sessionOptions.optional(),
  hidden_size: int.optional(),
  num_attention_heads: int.optional(),
  num_hidden_layers: int.optional(),
  num_key_value_heads: int.optional(),
  head_size: int.optional(),
  inputs: decoderInputs.optional(),
  outputs: decoderOutputs.optional(),
});
/** Model_Element (the token ids and sizes of a text model); type from ModelType::IsLLM. */
const model = z.strictObject({
  type: z.enum(['chatglm', 'decoder', 'ernie4_5', 'gemma', 'gemma2', 'gemma3_text', 'gemma4_text', 'gpt2', 'gptoss', 'granite', 'granitemoehybrid', 'hunyuandensev1', 'internlm2', 'lfm2', 'llama', 'mistral', 'nemotron', 'olmo', 'phi', 'phimoe', 'phi3', 'phi3small', 'qwen2', 'qwen3', 'qwen3_5_moe_text', 'qwen3_5_text', 'smollm3']),
  tokenizer_dir: z.string().optional(),
  vocab_size: int.positive(),
  context_length: int.positive(), // "context_length must be > 0"
  pad_token_id: int.optional(),
  eos_token_id: z.union([int, z.array(int)]),
  bos_token_id: int.optional(),
  decoder,
});
/** Search_Element. */
const search = z.strictObject({
  min_length: int.optional(),
  max_length: int.optional(),
  batch_size: int.optional(),
  num_beams: int.optional(),
  num_return_sequences: int.optional(),
  top_k: int.optional(),
  top_p: z.number().optional(),
  temperature: z.number().optional(),
  repetition_penalty: z.number().optional(),
  length_penalty: z.number().optional(),
  no_repeat_ngram_size: int.optional(),
  diversity_penalty: z.number().optional(),
  random_seed: int.optional(),
  chunk_size: int.optional(),
  do_sample: z.boolean().optional(),
  past_present_share_buffer: z.boolean().optional(),
  early_stopping: z.boolean().optional(),
});
/** Root_Element. */
const genaiConfig = z.strictObject({ model, search: search.optional() });

describe('genai_config.json', () => {
  it('parses under onnxruntime-genai\'s schema, and names the graph\'s real inputs and outputs', async () => {
    for (const [name, quant] of [['fp16', 'fp16'], ['int8', 'int8']] as const) {
      const out = path.join(tmp, name);
      const r = await llmcInProcess('compile', MODEL, '--target', 'cuda', '--quant', quant, '-o', out);
      expect(r.code, r.stderr).toBe(0);
      const cfg = genaiConfig.parse(JSON.parse(await fsp.readFile(path.join(out, 'genai_config.json'), 'utf8')));
      const hf = JSON.parse(await fsp.readFile(path.join(MODEL, 'config.json'), 'utf8'));
      expect(cfg.model).toMatchObject({ type: 'llama', vocab_size: hf.vocab_size, context_length: hf.max_position_embeddings, bos_token_id: hf.bos_token_id, eos_token_id: hf.eos_token_id });
      const d = cfg.model.decoder;
      expect(d).toMatchObject({ hidden_size: hf.hidden_size, num_attention_heads: hf.num_attention_heads, num_hidden_layers: hf.num_hidden_layers, num_key_value_heads: hf.num_key_value_heads, head_size: hf.hidden_size / hf.num_attention_heads });
      expect(cfg.search?.max_length).toBe(hf.max_position_embeddings);
      const session = await ort.InferenceSession.create(path.join(out, d.filename));
      try {
        const layer = (t: string | undefined) => Array.from({ length: d.num_hidden_layers! }, (_, l) => t!.replace('%d', String(l)));
        const ins = [d.inputs!.input_ids, d.inputs!.attention_mask, d.inputs!.position_ids, ...layer(d.inputs!.past_key_names).flatMap((k, l) => [k, layer(d.inputs!.past_value_names)[l]])];
        expect([...session.inputNames].sort()).toEqual([...ins].sort());
        const outs = [d.outputs!.logits, ...layer(d.outputs!.present_key_names), ...layer(d.outputs!.present_value_names)];
        expect([...session.outputNames].sort()).toEqual([...outs].sort());
      } finally {
        await session.release();
      }
      // The session option genai passes to onnxruntime as a config entry: float DequantizeLinear, as llmc run.
      expect(d.session_options?.['session.qdq_matmulnbits_accuracy_level']).toBe('0');
    }
  });

  it('qwen2 has its type; an MoE model gets none (onnxruntime-genai has no mixtral type), with a note', async () => {
    const qwen = await generateFixture(path.join(tmp, 'qwen2'), { arch: 'qwen2', seed: 3, tokenizer: 'none' });
    const q = await llmcInProcess('compile', qwen.dir, '--target', 'cuda', '-o', path.join(tmp, 'qwen2-out'));
    expect(q.code, q.stderr).toBe(0);
    expect(genaiConfig.parse(JSON.parse(await fsp.readFile(path.join(tmp, 'qwen2-out/genai_config.json'), 'utf8'))).model.type).toBe('qwen2');
    const moe = await generateFixture(path.join(tmp, 'moe'), { arch: 'mixtral', seed: 3, tokenizer: 'none' });
    const m = await llmcInProcess('compile', moe.dir, '--target', 'cuda', '-o', path.join(tmp, 'moe-out'));
    expect(m.code, m.stderr).toBe(0);
    expect(m.stderr).toMatch(/no genai_config\.json: onnxruntime-genai has no mixtral model type/);
    await expect(fsp.stat(path.join(tmp, 'moe-out/genai_config.json'))).rejects.toThrow();
  }, 60_000);
});
