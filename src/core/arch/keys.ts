/**
 * Which config.json keys llmc understands. Every key is either read (the architecture entry lists
 * it), harmless (bookkeeping, training-only or generation settings that leave the forward pass as
 * it is), harmless only at its default value, or refused: a key llmc cannot place may change the
 * model's math, and compiling it anyway would give a wrong model with exit 0.
 */
import { LlmcError, summarize } from '../errors.js';

type Json = Record<string, unknown>;

/** Keys every architecture reads (spec.ts, rope-config.ts). */
export const COMMON_KEYS: readonly string[] = [
  'model_type',
  'architectures',
  'hidden_size',
  'intermediate_size',
  'num_hidden_layers',
  'num_attention_heads',
  'num_key_value_heads',
  'head_dim',
  'vocab_size',
  'max_position_embeddings',
  'rms_norm_eps',
  'hidden_act',
  'tie_word_embeddings',
  'rope_theta',
  'rope_scaling',
  'rope_parameters',
  'partial_rotary_factor',
  'original_max_position_embeddings',
  'layer_types',
  'bos_token_id',
  'eos_token_id',
  'dtype',
  'torch_dtype',
];

/**
 * Keys that leave the forward pass unchanged: bookkeeping, training-only settings (dropout,
 * init, router losses and jitter, applied only in training), generation defaults (those live in
 * generation_config.json) and the classifier fields every PreTrainedConfig carries.
 */
const HARMLESS: ReadonlySet<string> = new Set([
  'transformers_version', '_name_or_path', 'name_or_path', '_commit_hash', '_attn_implementation_autoset', 'auto_map',
  // Which kernels compute attention / experts: the same math either way.
  'attn_implementation', '_attn_implementation', 'experts_implementation', '_experts_implementation',
  // Written by nanotron's Llama exporter (SmolLM): a marker.
  'is_llama_config',
  // transformers.js's loading hints (external data, dtypes): how the ONNX files are stored, not what they compute.
  'transformers.js_config',
  'use_cache', 'initializer_range', 'attention_dropout', 'pad_token_id', 'sep_token_id', 'decoder_start_token_id',
  'output_attentions', 'output_hidden_states', 'return_dict', 'torchscript', 'use_bfloat16', 'tf_legacy_loss',
  'id2label', 'label2id', 'num_labels', 'problem_type', 'finetuning_task', 'task_specific_params', 'tokenizer_class', 'prefix',
  'chunk_size_feed_forward', 'gradient_checkpointing', 'xla_device',
  'output_router_logits', 'router_aux_loss_coef', 'router_jitter_noise',
  // Since transformers 5 pretraining_tp is not read at all; before, it only split the same matmuls into slices.
  'pretraining_tp',
  // Generation defaults once stored in config.json.
  'max_length', 'min_length', 'do_sample', 'early_stopping', 'num_beams', 'num_beam_groups', 'diversity_penalty',
  'temperature', 'top_k', 'top_p', 'typical_p', 'repetition_penalty', 'length_penalty', 'no_repeat_ngram_size',
  'encoder_no_repeat_ngram_size', 'bad_words_ids', 'num_return_sequences', 'output_scores', 'return_dict_in_generate',
  'forced_bos_token_id', 'forced_eos_token_id', 'remove_invalid_values', 'exponential_decay_length_penalty',
  'suppress_tokens', 'begin_suppress_tokens',
]);

/** Keys harmless only at these values (null counts as the default too). */
const DEFAULT_ONLY: Readonly<Record<string, unknown>> = {
  is_encoder_decoder: false,
  is_decoder: false,
  add_cross_attention: false,
  cross_attention_hidden_size: null,
  tie_encoder_decoder: false,
  pruned_heads: {},
  // true would mean GPT-J-style interleaved pairs, which transformers' Llama does not rotate.
  rope_interleaved: false,
};

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/**
 * Refuse the first key of `cfg` that is neither read by this architecture (`archKeys`, with
 * COMMON_KEYS), harmless, nor at its harmless value (`archFixed`: keys the model_type's transformers
 * class does not read, accepted where they say what that class does anyway; DEFAULT_ONLY).
 */
export function checkKnownKeys(cfg: Json, modelType: string, archKeys: readonly string[], archFixed: Readonly<Record<string, unknown>>, file: string): void {
  for (const [k, v] of Object.entries(cfg)) {
    if (COMMON_KEYS.includes(k) || archKeys.includes(k) || HARMLESS.has(k)) continue;
    const fixed = k in archFixed ? archFixed[k] : k in DEFAULT_ONLY ? DEFAULT_ONLY[k] : undefined;
    if (fixed !== undefined) {
      if (v === null || v === undefined || same(v, fixed)) continue;
      throw new LlmcError(`key ${summarize(k)} = ${summarize(v)} is not supported by llmc's ${modelType} reader (only ${JSON.stringify(fixed)})`, file);
    }
    // null is how transformers writes an unset option (no softcapping, no window, no quantization): it asks for nothing.
    if (v === null) continue;
    const shown = JSON.stringify(v) ?? String(v);
    throw new LlmcError(`key "${k}" (${shown.length > 60 ? `${shown.slice(0, 57)}...` : shown}) is not understood by llmc's ${modelType} reader; it may change the model's math`, file);
  }
}
