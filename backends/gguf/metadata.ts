/**
 * The general.* and <arch>.* metadata as convert_hf_to_gguf.py writes it (gguf-py Keys): the keys
 * every text model gets here, the family's own from its registry entry (GgufFamily.metadata).
 */
import type { ArchSpec } from '../../src/core/checkpoint/index.js';
import { LlmcError } from '../../src/core/errors.js';
import { yarnDefaultAttention } from '../../src/core/arch/rope-config.js';
import { GGUF_DEFAULT_ALIGNMENT, arr, f32, str, u32, type GgufKv } from './writer.js';
import type { LayerCounts } from './deci.js';
import type { GgufFamily } from '../../src/core/arch/registry.js';

/**
 * The rope scaling llama.cpp can run as transformers computes it, or a one-line refusal naming the
 * type (or the yarn parameter) it cannot express: llama.cpp has no dynamic NTK, runs longrope only
 * from per-frequency factor tensors the family writes (GgufFamily.longropeFactors), derives yarn's attention factor as
 * 0.1·ln(factor)+1 with beta_fast 32 / beta_slow 1 and floored/ceiled correction dims, and reads llama3 factors (rope_freqs.weight) only where the
 * family writes them (GgufFamily.ropeFreqs).
 */
export function checkGgufRope(spec: ArchSpec, family: GgufFamily): ArchSpec['ropeScaling'] {
  const rs = spec.ropeScaling;
  const arch = family.arch;
  const refuse = (why: string) => {
    throw new LlmcError(`rope type "${rs!.type}"${why}; llama.cpp (GGUF ${arch}) cannot express it, so the gguf target refuses rather than drop it`);
  };
  if (!rs) return rs;
  if (rs.type === 'dynamic') refuse('');
  // llama.cpp runs longrope from rope_factors_long / rope_factors_short tensors where the family writes them (phi3).
  if (rs.type === 'longrope' && !family.longropeFactors) refuse(` on ${arch} (llama.cpp reads rope_factors_long / rope_factors_short for phi3 only here)`);
  if (rs.type === 'longrope' && rs.shortFactor.length !== spec.headDim / 2) refuse(` with ${rs.shortFactor.length} factors for ${spec.headDim / 2} rotary frequencies`);
  if (rs.type === 'llama3' && !family.ropeFreqs) refuse(` on ${arch}`);
  if (rs.type === 'yarn') {
    if (!yarnDefaultAttention(rs)) refuse(` with attention factor ${rs.attentionFactor} (not 0.1·ln(factor)+1)`);
    if (rs.betaFast !== 32 || rs.betaSlow !== 1) refuse(` with beta_fast ${rs.betaFast} / beta_slow ${rs.betaSlow} (not 32 / 1)`);
    if (!rs.truncate) refuse(' with truncate false');
  }
  return rs;
}

/** GGML_QNT_VERSION. */
export const GGML_QUANT_VERSION = 2;

export function modelMetadata(
  spec: ArchSpec,
  family: GgufFamily,
  opts: { name: string; fileType: number; layers?: LayerCounts[] | null },
): { kvs: GgufKv[]; notes: string[] } {
  const arch = family.arch;
  const a = (k: string) => `${arch}.${k}`;
  const L = opts.layers ?? null;
  const kvs: GgufKv[] = [
    { key: 'general.architecture', value: str(arch) },
    { key: 'general.type', value: str('model') },
    { key: 'general.name', value: str(opts.name) },
    { key: 'general.alignment', value: u32(GGUF_DEFAULT_ALIGNMENT) },
    { key: a('vocab_size'), value: u32(spec.vocabSize) },
    { key: a('context_length'), value: u32(spec.maxPositions) },
    { key: a('embedding_length'), value: u32(spec.hiddenSize) },
    { key: a('block_count'), value: u32(spec.numLayers) },
    // Per-layer widths (deci.ts): one UINT32 per layer, as llama.cpp's get_key_or_arr reads them.
    { key: a('feed_forward_length'), value: L ? arr('UINT32', L.map((c) => c.ffn)) : u32(spec.intermediateSize) },
    { key: a('attention.head_count'), value: L ? arr('UINT32', L.map((c) => c.heads)) : u32(spec.numHeads) },
    { key: a('attention.head_count_kv'), value: L ? arr('UINT32', L.map((c) => c.kvHeads)) : u32(spec.numKvHeads) },
    { key: a('rope.freq_base'), value: f32(spec.ropeTheta) },
    { key: a('attention.layer_norm_rms_epsilon'), value: f32(spec.rmsNormEps) },
  ];
  if (L || spec.headDim * spec.numHeads !== spec.hiddenSize) {
    // Only written when head_dim is not n_embd / n_head (as the converter does for an explicit head_dim);
    // always with per-layer widths (llama.cpp derives head_dim from layer 0's head count otherwise).
    kvs.push({ key: a('attention.key_length'), value: u32(spec.headDim) }, { key: a('attention.value_length'), value: u32(spec.headDim) });
  }
  const own = family.metadata(spec);
  const notes = [...own.notes];
  for (const kv of own.kvs) kvs.push({ key: a(kv.key), value: kv.value });
  const rs = checkGgufRope(spec, family);
  if (rs?.type === 'linear' || rs?.type === 'yarn') {
    kvs.push({ key: a('rope.scaling.type'), value: str(rs.type) }, { key: a('rope.scaling.factor'), value: f32(rs.factor) });
    if (rs.type === 'yarn') kvs.push({ key: a('rope.scaling.original_context_length'), value: u32(rs.originalMaxPositions) });
  }
  // llama3: carried by the rope_freqs.weight tensor, as the converter does.
  if (spec.slidingWindow !== null && !own.kvs.some((kv) => kv.key === 'attention.sliding_window')) notes.push(`note: sliding_window=${spec.slidingWindow} is not used by llama.cpp's ${arch} (full attention)`);
  kvs.push({ key: 'general.file_type', value: u32(opts.fileType) }, { key: 'general.quantization_version', value: u32(GGML_QUANT_VERSION) });
  return { kvs, notes };
}
