/**
 * genai_config.json: what onnxruntime-genai (`og.Model(dir)`) reads to run the decoder, as its config
 * parser (microsoft/onnxruntime-genai src/config.cpp, config.h) and its model builder's writer
 * (src/python/py/models/builders/base.py make_genai_config) define it. Every object key is one the
 * parser knows (it throws on others); I/O names are the graph's, with `%d` for the layer.
 */
import type { ArchSpec } from '../../src/core/arch/types.js';
import { archOf } from '../../src/core/arch/registry.js';
import { DECODER_IO, type DecoderIo } from '../../src/exec/onnx/decoder.js';

export const GENAI_CONFIG = 'genai_config.json';

/** The genai model type of a spec (its family's registry entry), or null when onnxruntime-genai has none. */
export function genaiModelType(spec: ArchSpec): string | null {
  return archOf(spec).ortGenai;
}

const layerTemplate = (name: (l: number) => string) => name(0).replace('.0.', '.%d.');

export function genaiConfig(spec: ArchSpec, io: DecoderIo, graphFile: string, generation: Record<string, unknown>): Record<string, unknown> | null {
  const type = genaiModelType(spec);
  if (!type) return null;
  const eos = spec.eosTokenIds.length === 1 ? spec.eosTokenIds[0] : spec.eosTokenIds;
  const pick = <T>(key: string, fallback: T): T => (generation[key] !== undefined && generation[key] !== null ? (generation[key] as T) : fallback);
  const pad = generation.pad_token_id ?? spec.eosTokenIds[0] ?? 0;
  return {
    model: {
      bos_token_id: spec.bosTokenId ?? 1,
      context_length: io.maxPositions,
      decoder: {
        // Unknown session_options keys are onnxruntime config entries (AddConfigEntry): accuracy level 0
        // keeps int8 / int4 DequantizeLinear in float as `llmc run` computes them (docs/cuda.md).
        session_options: { log_id: 'onnxruntime-genai', provider_options: [], 'session.qdq_matmulnbits_accuracy_level': '0' },
        filename: graphFile,
        head_size: io.headDim,
        hidden_size: spec.hiddenSize,
        inputs: {
          input_ids: DECODER_IO.inputIds,
          attention_mask: DECODER_IO.attentionMask,
          position_ids: DECODER_IO.positionIds,
          past_key_names: layerTemplate(DECODER_IO.pastKey),
          past_value_names: layerTemplate(DECODER_IO.pastValue),
        },
        outputs: {
          logits: DECODER_IO.logits,
          present_key_names: layerTemplate(DECODER_IO.presentKey),
          present_value_names: layerTemplate(DECODER_IO.presentValue),
        },
        num_attention_heads: spec.numHeads,
        num_hidden_layers: spec.numLayers,
        num_key_value_heads: io.kvHeads[0],
      },
      eos_token_id: eos,
      pad_token_id: pad,
      type,
      vocab_size: io.vocab,
    },
    search: {
      diversity_penalty: 0,
      do_sample: pick('do_sample', false),
      early_stopping: true,
      length_penalty: 1,
      max_length: io.maxPositions,
      min_length: 0,
      no_repeat_ngram_size: 0,
      num_beams: 1,
      num_return_sequences: 1,
      // The graph's present is past + new (a growing cache), not a buffer shared with past.
      past_present_share_buffer: false,
      repetition_penalty: pick('repetition_penalty', 1),
      temperature: pick('temperature', 1),
      top_k: pick('top_k', 50),
      top_p: pick('top_p', 1),
    },
  };
}
