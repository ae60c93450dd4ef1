/**
 * The ts artifact's weight formats and the tensor table in the manifest's `targetInfo`
 * (docs/ts-artifact.md). Shared by the writer (backends/ts) and the reader (the runtime); browser-safe.
 */

import type { ArchSpec } from '../../core/arch/spec.js';
import type { PassRecord } from '../../core/records/manifest.js';
import { QUANT_TYPES } from '../../core/quant/types.js';
import { LlmcError, summarize } from '../../core/errors.js';
import { defineRecord } from '../../core/records/types.js';

/** The common manifest (shape and identity): src/core/records/manifest.ts. */
export { MANIFEST_FILE, MANIFEST_FORMAT, MANIFEST_VERSION } from '../../core/records/manifest.js';

/** The ts target's own weight-file format, recorded in targetInfo. */
export const TS_FORMAT = 'llmc-ts-weights';
export const TS_FORMAT_VERSION = 1;
export const WEIGHTS_FILE = 'weights.bin';
/** Every tensor starts at a multiple of this (so f32/f16 views need no copy, and cache lines line up). */
export const TENSOR_ALIGNMENT = 64;

/**
 * Q5_0 is there because ggml's row-length fallback turns Q4_K into it (rows of 32k, not 256k); Q2_K,
 * Q3_K and Q6_K for per-expert bit widths (pass expert-bits). Q2_K and Q3_K run on the JS
 * decode-then-dot path; the others have WebAssembly kernels.
 */
export type WeightFormat = 'F32' | 'F16' | 'Q8_0' | 'Q4_0' | 'Q4_K' | 'Q5_0' | 'Q2_K' | 'Q3_K' | 'Q6_K';
export const WEIGHT_FORMATS: readonly WeightFormat[] = ['F32', 'F16', 'Q8_0', 'Q4_0', 'Q4_K', 'Q5_0', 'Q2_K', 'Q3_K', 'Q6_K'];

/** Elements per block and bytes per block: ggml's layouts, from the quantizers' own type table. */
export const FORMAT_BLOCK: Record<WeightFormat, { blockSize: number; blockBytes: number }> = Object.fromEntries(
  WEIGHT_FORMATS.map((f) => [f, { blockSize: QUANT_TYPES[f].blockSize, blockBytes: QUANT_TYPES[f].typeSize }]),
) as Record<WeightFormat, { blockSize: number; blockBytes: number }>;

export interface TensorEntry {
  name: string;
  format: WeightFormat;
  /** Row-major, Hugging Face order ([out, in] for linears); quant blocks run along the last axis. */
  shape: number[];
  /** Byte offset in weights.bin (a multiple of TENSOR_ALIGNMENT). */
  offset: number;
  /** Byte length of the tensor's data (without padding). */
  bytes: number;
}

export interface TsTargetInfo {
  format: typeof TS_FORMAT;
  version: number;
  weights: string;
  alignment: number;
  /** The requested --quant (individual tensors may differ: see each entry's format). */
  quant: WeightFormat;
  tensors: TensorEntry[];
  /**
   * Elastic levels' recovery adapters, by level id (record `elastic-prefix/2`): for each adapted
   * linear, the tensor names of A [rank, inKept] and B [outKept, rank] (F32, in the tensor table). At
   * that level the linear computes x·Wᵀ + scale·(x·Aᵀ)·Bᵀ over its kept rows and columns.
   */
  adapters?: Record<string, TsLevelAdapters>;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

/** Check a ts artifact's targetInfo (the runtime reads it untrusted; the driver checks it when written); `bad` throws. */
export function checkTsTargetInfo(ti: unknown, bad: (message: string) => never): TsTargetInfo {
  if (!isObj(ti) || ti.format !== TS_FORMAT || ti.version !== TS_FORMAT_VERSION) {
    bad(`unsupported weights format ${summarize(isObj(ti) ? ti.format : null)} version ${summarize(isObj(ti) ? ti.version : null)}; this runtime reads ${TS_FORMAT} version ${TS_FORMAT_VERSION}`);
  }
  const t = ti as Record<string, unknown>;
  if (typeof t.weights !== 'string') bad('targetInfo.weights is missing');
  // A file of the artifact: never a path out of it.
  const w = t.weights as string;
  if (!w || w.startsWith('/') || /^[a-zA-Z]:/.test(w) || w.split(/[\\/]/).includes('..') || w.includes('\0')) bad(`targetInfo.weights ${summarize(w)} is not a file of the artifact`);
  if (t.alignment !== undefined && !(isCount(t.alignment) && t.alignment > 0)) bad(`targetInfo.alignment must be a positive integer, got ${summarize(t.alignment)}`);
  if (t.quant !== undefined && !WEIGHT_FORMATS.includes(t.quant as WeightFormat)) bad(`targetInfo.quant: unknown format ${summarize(t.quant)}`);
  if (!Array.isArray(t.tensors)) bad('targetInfo.tensors is missing');
  for (const [i, e] of (t.tensors as unknown[]).entries()) {
    if (!isObj(e) || typeof e.name !== 'string') bad(`tensor table entry ${i} has no name`);
    const te = e as Record<string, unknown>;
    const what = `tensor "${te.name}"`;
    if (!WEIGHT_FORMATS.includes(te.format as WeightFormat)) bad(`${what}: unknown format ${summarize(te.format)}`);
    if (!Array.isArray(te.shape) || te.shape.length === 0 || !te.shape.every((d) => isCount(d) && d > 0)) bad(`${what}: bad shape ${summarize(te.shape)}`);
    if (!isCount(te.offset) || !isCount(te.bytes)) bad(`${what}: offset and bytes must be non-negative integers`);
  }
  if (t.adapters !== undefined) {
    if (!isObj(t.adapters)) bad('targetInfo.adapters must be an object of levels');
    for (const [id, a] of Object.entries(t.adapters as Record<string, unknown>)) {
      const what = `targetInfo.adapters.${id}`;
      if (!isObj(a) || !isCount(a.rank) || a.rank < 1 || typeof a.scale !== 'number' || !Number.isFinite(a.scale) || !Array.isArray(a.tensors)) bad(`${what} needs rank, scale and tensors`);
      for (const [i, e] of (a as { tensors: unknown[] }).tensors.entries()) {
        if (!isObj(e) || typeof e.weight !== 'string' || typeof e.a !== 'string' || typeof e.b !== 'string') bad(`${what}.tensors[${i}] needs weight, a and b names`);
      }
    }
  }
  return t as unknown as TsTargetInfo;
}

/** The ts target's targetInfo as a record type (TargetDescriptor.info): the same checks as the runtime's. */
export const TS_INFO = defineRecord<TsTargetInfo>('targetInfo:ts', "the ts target's targetInfo", (v, c) =>
  checkTsTargetInfo(v, (message) => {
    throw new LlmcError(message, c.where);
  }),
);

export interface TsLevelAdapters {
  rank: number;
  scale: number;
  tensors: { weight: string; a: string; b: string }[];
}

/** The tensor names a level's adapter of `weight` is written under (PEFT-like module paths). */
export function adapterTensorNames(level: string, weight: string): { a: string; b: string } {
  const module = weight.replace(/\.weight$/, '');
  return { a: `levels.${level}.${module}.lora_A.weight`, b: `levels.${level}.${module}.lora_B.weight` };
}

/** Bytes one row of `rowLength` elements takes, or null when the row is not whole blocks. */
export function formatRowBytes(format: WeightFormat, rowLength: number): number | null {
  const { blockSize, blockBytes } = FORMAT_BLOCK[format];
  if (rowLength % blockSize !== 0) return null;
  return (rowLength / blockSize) * blockBytes;
}

/** Bytes a tensor of `shape` takes in `format`, or null when its rows are not whole blocks. */
export function formatTensorBytes(format: WeightFormat, shape: readonly number[]): number | null {
  const rowLength = shape.length ? shape[shape.length - 1] : 1;
  const rows = shape.slice(0, -1).reduce((a, b) => a * b, 1);
  const rb = formatRowBytes(format, rowLength);
  return rb === null ? null : rb * rows;
}

export const alignUp = (n: number, a = TENSOR_ALIGNMENT) => Math.ceil(n / a) * a;

/** The manifest of a ts artifact, as the runtime reads it. */
export interface ArtifactManifest {
  format: string;
  version: number;
  llmcVersion?: string;
  target: string;
  /** The checkpoint it was compiled from (its content hash). */
  source?: { path: string; sha256: string };
  arch: ArchSpec;
  targetInfo: TsTargetInfo;
  passes: PassRecord[];
  files: { path: string; size: number; sha256: string }[];
}
