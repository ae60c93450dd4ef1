/**
 * The tensor types llmc can write, with ggml's enum values and block geometry (ggml.h / ggml-common.h).
 * Pure: no Node imports, so the TS runtime can use it in a browser too.
 */
import { LlmcError } from '../errors.js';

export type QuantType =
  | 'F32' | 'F16' | 'BF16'
  | 'Q8_0' | 'Q4_0' | 'Q4_1' | 'Q5_0' | 'Q5_1'
  | 'Q2_K' | 'Q3_K' | 'Q4_K' | 'Q5_K' | 'Q6_K'
  | 'IQ4_NL' | 'IQ4_XS';

export interface QuantTypeInfo {
  /** ggml_type enum value, as written in GGUF tensor infos. */
  ggmlType: number;
  /** Elements per block. */
  blockSize: number;
  /** Bytes per block. */
  typeSize: number;
}

export const QUANT_TYPES: Record<QuantType, QuantTypeInfo> = {
  F32: { ggmlType: 0, blockSize: 1, typeSize: 4 },
  F16: { ggmlType: 1, blockSize: 1, typeSize: 2 },
  Q4_0: { ggmlType: 2, blockSize: 32, typeSize: 18 }, // d:f16, qs[16]
  Q4_1: { ggmlType: 3, blockSize: 32, typeSize: 20 }, // d:f16, m:f16, qs[16]
  Q5_0: { ggmlType: 6, blockSize: 32, typeSize: 22 }, // d:f16, qh[4], qs[16]
  Q5_1: { ggmlType: 7, blockSize: 32, typeSize: 24 }, // d:f16, m:f16, qh[4], qs[16]
  Q8_0: { ggmlType: 8, blockSize: 32, typeSize: 34 }, // d:f16, qs[32]
  Q2_K: { ggmlType: 10, blockSize: 256, typeSize: 84 }, // scales[16], qs[64], d, dmin
  Q3_K: { ggmlType: 11, blockSize: 256, typeSize: 110 }, // hmask[32], qs[64], scales[12], d
  Q4_K: { ggmlType: 12, blockSize: 256, typeSize: 144 }, // d, dmin, scales[12], qs[128]
  Q5_K: { ggmlType: 13, blockSize: 256, typeSize: 176 }, // d, dmin, scales[12], qh[32], qs[128]
  Q6_K: { ggmlType: 14, blockSize: 256, typeSize: 210 }, // ql[128], qh[64], scales[16], d
  BF16: { ggmlType: 30, blockSize: 1, typeSize: 2 },
  IQ4_NL: { ggmlType: 20, blockSize: 32, typeSize: 18 }, // d:f16, qs[16] (indices into kvalues_iq4nl)
  IQ4_XS: { ggmlType: 23, blockSize: 256, typeSize: 136 }, // d:f16, scales_h:u16, scales_l[4], qs[128]
};

export function isQuantType(s: string): s is QuantType {
  return Object.prototype.hasOwnProperty.call(QUANT_TYPES, s);
}

/** The QuantType for a ggml_type enum value (GGUF readers need the reverse map). */
export function quantTypeFromGgml(ggmlType: number): QuantType | undefined {
  for (const [name, info] of Object.entries(QUANT_TYPES)) if (info.ggmlType === ggmlType) return name as QuantType;
  return undefined;
}

function info(type: QuantType): QuantTypeInfo {
  const t = QUANT_TYPES[type];
  if (!t || !Object.prototype.hasOwnProperty.call(QUANT_TYPES, type)) {
    throw new LlmcError(`unknown tensor type '${type}' (expected one of ${Object.keys(QUANT_TYPES).join(', ')})`);
  }
  return t;
}

/** Bytes of one row of `rowLength` elements (ggml_row_size); the row must hold whole blocks. */
export function rowBytes(type: QuantType, rowLength: number): number {
  const t = info(type);
  if (!Number.isInteger(rowLength) || rowLength < 0 || rowLength % t.blockSize !== 0) {
    throw new LlmcError(`${type}: row length ${rowLength} is not a multiple of the block size ${t.blockSize}`);
  }
  return (rowLength / t.blockSize) * t.typeSize;
}

/**
 * The type llama.cpp writes instead of `type` when rows of `rowLength` do not hold whole blocks
 * (llama-quant.cpp, tensor_type_fallback): Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1,
 * Q6_K -> Q8_0, IQ4_XS -> IQ4_NL; a 32-block type keeps itself; and when the result still does not divide the row,
 * F16. Returns `type` itself when no fallback is needed.
 */
export function fallbackType(type: QuantType, rowLength: number): QuantType {
  const t = info(type);
  if (rowLength % t.blockSize === 0) return type;
  let next: QuantType;
  switch (type) {
    case 'Q2_K':
    case 'Q3_K': next = 'Q4_0'; break;
    case 'Q4_K': next = 'Q5_0'; break;
    case 'Q5_K': next = 'Q5_1'; break;
    case 'Q6_K': next = 'Q8_0'; break;
    case 'IQ4_XS': next = 'IQ4_NL'; break;
    default: next = type; // already a 32-block type: no smaller block to demote to
  }
  return rowLength % QUANT_TYPES[next].blockSize === 0 ? next : 'F16';
}

/**
 * Elements per block along a row for a format name: a ggml type, or a llama.cpp preset named after
 * its base type (Q4_K_M → Q4_K's 256). Unknown names count as unblocked (1).
 */
export function blockAlongRow(format: string): number {
  const f = format.toUpperCase();
  if (isQuantType(f)) return QUANT_TYPES[f].blockSize;
  const base = /^(Q\d_K)_[SML]$/.exec(f)?.[1];
  return base && isQuantType(base) ? QUANT_TYPES[base].blockSize : 1;
}
