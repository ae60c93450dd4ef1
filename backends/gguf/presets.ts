/**
 * Which ggml type each GGUF tensor gets: llama.cpp's llama_ftype presets with the per-tensor rules of
 * llama-quant.cpp (llama_model_quantize_impl + llama_tensor_get_type), plain types applied to every
 * quantizable tensor, and `--tensor-type REGEX=TYPE` overrides (last match wins).
 */
import { UsageError } from '../../src/core/errors.js';
import { QUANT_TYPES, fallbackType, isQuantType, type QuantType } from '../../src/core/quant/types.js';

/** convert_hf_to_gguf.py's default --outtype. */
export const DEFAULT_QUANT = 'F16';

/** llama_ftype values (llama.h) for the presets we implement. */
export const LLAMA_FTYPES = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q8_0: 7,
  Q5_0: 8,
  Q5_1: 9,
  Q2_K: 10,
  Q3_K_S: 11,
  Q3_K_M: 12,
  Q3_K_L: 13,
  Q4_K_S: 14,
  Q4_K_M: 15,
  Q5_K_S: 16,
  Q5_K_M: 17,
  Q6_K: 18,
  IQ4_NL: 25,
  IQ4_XS: 30,
  BF16: 32,
} as const;
export type Ftype = keyof typeof LLAMA_FTYPES;

/** The base ggml type of each preset (llama_model_quantize_impl's default_type). */
const FTYPE_DEFAULT: Record<Ftype, QuantType> = {
  F32: 'F32', F16: 'F16', BF16: 'BF16', Q4_0: 'Q4_0', Q4_1: 'Q4_1', Q5_0: 'Q5_0', Q5_1: 'Q5_1', Q8_0: 'Q8_0',
  Q2_K: 'Q2_K', Q3_K_S: 'Q3_K', Q3_K_M: 'Q3_K', Q3_K_L: 'Q3_K', Q4_K_S: 'Q4_K', Q4_K_M: 'Q4_K',
  Q5_K_S: 'Q5_K', Q5_K_M: 'Q5_K', Q6_K: 'Q6_K', IQ4_NL: 'IQ4_NL', IQ4_XS: 'IQ4_XS',
};

/** general.file_type for a plain (non-preset) type: what llama.cpp's loader guesses for it. */
const TYPE_FTYPE: Record<QuantType, number> = {
  F32: 0, F16: 1, BF16: 32, Q4_0: 2, Q4_1: 3, Q8_0: 7, Q5_0: 8, Q5_1: 9,
  Q2_K: 10, Q3_K: 12, Q4_K: 15, Q5_K: 17, Q6_K: 18, IQ4_NL: 25, IQ4_XS: 30,
};

export interface QuantChoice {
  /** What the user asked for, normalized. */
  label: string;
  /** A llama_ftype preset (per-tensor rules apply), or null for a plain type on every tensor. */
  ftype: Ftype | null;
  /** The base type. */
  base: QuantType;
  /** general.file_type. */
  fileType: number;
}

export function validChoices(): string[] {
  const plain = Object.keys(QUANT_TYPES).filter((t) => !(t in LLAMA_FTYPES));
  return [...Object.keys(LLAMA_FTYPES), ...plain];
}

/** Parse `--quant`. Preset names win where a preset and a type share a name (Q8_0, Q6_K, Q2_K, ...). */
export function parseQuant(s: string | undefined, fallback: string): QuantChoice {
  const label = (s ?? fallback).trim().toUpperCase();
  if (label in LLAMA_FTYPES) {
    const ftype = label as Ftype;
    return { label, ftype, base: FTYPE_DEFAULT[ftype], fileType: LLAMA_FTYPES[ftype] };
  }
  if (isQuantType(label)) return { label, ftype: null, base: label, fileType: TYPE_FTYPE[label] };
  throw new UsageError(`unknown quant type "${s}" for target gguf; valid: ${validChoices().join(', ')}`);
}

export function parseTensorType(t: string): QuantType {
  const u = t.trim().toUpperCase();
  if (isQuantType(u)) return u;
  throw new UsageError(`--tensor-type: unknown tensor type "${t}" for target gguf; valid: ${Object.keys(QUANT_TYPES).join(', ')}`);
}

/** What the per-tensor rules need to know about the model (llama_hparams / llama_model_quantize_impl). */
export interface ModelFacts {
  arch: string;
  numLayers: number;
  /** n_gqa = n_head / n_head_kv. */
  gqa: number;
  /** 0 for dense models. */
  numExperts: number;
  /** True when the file has output.weight (untied): otherwise token_embd plays its role. */
  hasOutput: boolean;
  /** LLM_TYPE_70B: llama with 80 layers and grouped KV heads. */
  is70B: boolean;
  /** An importance matrix is given (llama-quant.cpp's qs.has_imatrix: some rules differ). */
  hasImatrix?: boolean;
}

export interface TensorFacts {
  name: string;
  /** ggml dims (ne[0] is the row length). */
  ne: number[];
}

/**
 * llama-quantize's "quantize this tensor?" test: weights of 2+ dims that are not norms and not
 * the MoE router; everything else keeps its float type (F32 here, as the converter writes them).
 */
export function isQuantizable(name: string, ne: number[]): boolean {
  return name.endsWith('weight') && ne.length >= 2 && !name.includes('_norm.weight') && !name.includes('ffn_gate_inp.weight');
}

const useMoreBits = (i: number, n: number) => i < Math.floor(n / 8) || i >= Math.floor((7 * n) / 8) || (i - Math.floor(n / 8)) % 3 === 2;

function layerOf(name: string): number {
  const m = /^blk\.(\d+)\./.exec(name);
  return m ? Number(m[1]) : -1;
}

/**
 * llama_tensor_get_type for the presets above (the IQ1–IQ3, TQ* and MXFP4 branches are not reachable).
 * llama.cpp walks tensors in layer order, so its attn_v / ffn_down counters equal the layer index.
 */
export function presetType(ftype: Ftype, base: QuantType, t: TensorFacts, m: ModelFacts): QuantType {
  const name = t.name;
  let type = base;
  const nx = t.ne[0];
  const i = layerOf(name);
  const n = m.numLayers;
  const iq4 = ftype === 'IQ4_NL' || ftype === 'IQ4_XS';
  if (name === 'output.weight' || (!m.hasOutput && name === 'token_embd.weight')) {
    if (nx % QUANT_TYPES[type].blockSize !== 0) type = 'Q8_0';
    else if (type !== 'Q8_0') type = 'Q6_K';
  } else if (name === 'token_embd.weight') {
    // no rule for these presets
  } else if (name.includes('attn_v.weight')) {
    if (ftype === 'Q2_K') type = m.gqa >= 4 ? 'Q4_K' : 'Q3_K';
    else if (ftype === 'Q3_K_M') type = i < 2 ? 'Q5_K' : 'Q4_K';
    else if (ftype === 'Q3_K_L') type = 'Q5_K';
    else if (iq4 && m.gqa >= 4) type = 'Q5_K';
    else if ((ftype === 'Q4_K_M' || ftype === 'Q5_K_M') && useMoreBits(i, n)) type = 'Q6_K';
    else if (ftype === 'Q4_K_S' && i < 4) type = 'Q5_K';
    if (m.is70B && (type === 'Q3_K' || type === 'Q4_K')) type = 'Q5_K';
    if (m.numExperts === 8) type = 'Q8_0';
  } else if (name.includes('attn_k.weight')) {
    if (m.numExperts === 8) type = 'Q8_0';
  } else if (name.includes('ffn_down')) {
    if (ftype === 'Q2_K') type = 'Q3_K';
    else if (ftype === 'Q3_K_M') type = i < Math.floor(n / 16) ? 'Q5_K' : 'Q4_K'; // non-falcon: always Q4_K past the first 1/16
    else if (ftype === 'Q3_K_L') type = 'Q5_K';
    else if (ftype === 'Q4_K_M') {
      if (useMoreBits(i, n)) type = 'Q6_K';
    } else if (iq4 && i < Math.floor(n / 8) && !m.hasImatrix) type = 'Q5_K';
    else if (ftype === 'Q5_K_M' && useMoreBits(i, n)) type = 'Q6_K';
    else if (ftype === 'Q4_K_S' && i < Math.floor(n / 8)) type = 'Q5_K';
    // with an imatrix, the first eighth of ffn_down keeps a min (llama.cpp: "guard against craziness")
    else if ((ftype === 'Q4_0' || ftype === 'Q5_0') && m.hasImatrix && i < Math.floor(n / 8)) type = ftype === 'Q4_0' ? 'Q4_1' : 'Q5_1';
  } else if (name.includes('attn_output.weight')) {
    if (m.numExperts === 8) {
      if (ftype === 'Q2_K' || ftype === 'Q3_K_S' || ftype === 'Q3_K_M' || ftype === 'Q4_K_S' || ftype === 'Q4_K_M' || iq4) type = 'Q5_K';
    } else if (ftype === 'Q2_K') type = 'Q3_K';
    else if (ftype === 'Q3_K_M') type = 'Q4_K';
    else if (ftype === 'Q3_K_L') type = 'Q5_K';
  }
  return type;
}

export interface TensorTypeDecision {
  type: QuantType;
  /** Set when llama.cpp's fallback replaced the wanted type. */
  fallbackFrom?: QuantType;
}

/** The type of one GGUF tensor. Non-quantizable tensors (1-D, norms, router) stay F32. */
export function chooseTensorType(
  choice: QuantChoice,
  overrides: readonly { pattern: RegExp; type: QuantType }[],
  t: TensorFacts,
  m: ModelFacts,
  /** A type a pass chose for this tensor: after the preset's rules, before --tensor-type overrides. */
  passType?: QuantType,
): TensorTypeDecision {
  if (!isQuantizable(t.name, t.ne)) return { type: 'F32' };
  let type = choice.base;
  const quantizedBase = QUANT_TYPES[choice.base].blockSize > 1;
  if (choice.ftype && quantizedBase) type = presetType(choice.ftype, choice.base, t, m);
  if (passType) type = passType;
  for (const o of overrides) if (o.pattern.test(t.name)) type = o.type; // the last match wins
  const fb = fallbackType(type, t.ne[0]);
  return fb === type ? { type } : { type: fb, fallbackFrom: type };
}
