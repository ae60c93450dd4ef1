/**
 * Reads a GGUF file's header (ggml docs/gguf.md): metadata and tensor infos, every count and length
 * bounded by the bytes the file has before anything is allocated, every dimension > 0, every tensor's
 * data at the offset llama.cpp expects (in order, aligned) and inside the file. `checkGgufFile` is the
 * check to call before handing any GGUF to llama.cpp, because llama.cpp aborts the whole process
 * (GGML_ASSERT) on some damaged files instead of returning an error. Every ggml type of ggml.h is
 * known here (the types llmc writes and the others llama.cpp's tools write: IQ*, TQ*, MXFP4,
 * integers), so any llama.cpp GGUF can be checked, inspected and run; `ggufArchSpec` reads the model a
 * GGUF describes from its metadata alone (a GGUF without llmc's manifest beside it).
 */
import { yarnWithDefaults } from '../../src/core/arch/rope-config.js';
import { promises as fsp } from 'node:fs';
import { archOf, GGUF_READABLE, modelTypeOfGguf } from '../../src/core/arch/registry.js';
import type { ArchSpec, MoeSpec, RopeScaling } from '../../src/core/arch/types.js';
import { clip, LlmcError } from '../../src/core/errors.js';
import { ioError } from '../../src/core/util/atomic.js';
import { QUANT_TYPES, type QuantType } from '../../src/core/quant/types.js';
import { GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_TYPE, type ScalarKind } from './writer.js';

export type GgufScalar = number | bigint | boolean | string;
export type GgufMetaValue = GgufScalar | GgufScalar[];

export interface GgufTensorEntry {
  name: string;
  /** ggml order: ne[0] is the contiguous dimension. */
  ne: number[];
  /** ggml's name of its type (ggml.h enum ggml_type, without GGML_TYPE_). */
  type: GgmlTypeName;
  /** The ggml_type enum value as stored. */
  ggmlType: number;
  /** Offset in the data section. */
  offset: number;
  nbytes: number;
}

export interface GgufHeader {
  version: number;
  metadata: Map<string, GgufMetaValue>;
  tensors: GgufTensorEntry[];
  alignment: number;
  /** Where the data section starts in the file. */
  dataStart: number;
  fileSize: number;
}

/** ggml's limits (ggml.h): names are shorter than GGML_MAX_NAME, tensors have at most 4 dims. */
const MAX_NAME = 64;
const MAX_DIMS = 4;
/** Strings longer than this in metadata are refused (a whole vocabulary is an array of short ones). */
const MAX_STRING = 1 << 24;

const KIND_OF: ReadonlyMap<number, ScalarKind | 'ARRAY'> = new Map(Object.entries(GGUF_TYPE).map(([k, v]) => [v, k as ScalarKind | 'ARRAY']));
const SCALAR_BYTES: Record<Exclude<ScalarKind, 'STRING'>, number> = {
  UINT8: 1, INT8: 1, BOOL: 1, UINT16: 2, INT16: 2, UINT32: 4, INT32: 4, FLOAT32: 4, UINT64: 8, INT64: 8, FLOAT64: 8,
};

/**
 * The ggml types llmc does not write, with their block geometry (ggml.h enum ggml_type and the
 * block_* structs of ggml-common.h; checked against gguf-py's GGML_QUANT_SIZES in test/gguf-bare.test.ts).
 */
const FOREIGN_TYPES = {
  Q8_1: { ggmlType: 9, blockSize: 32, typeSize: 36 }, // ds:half2, qs[32]
  Q8_K: { ggmlType: 15, blockSize: 256, typeSize: 292 }, // d:f32, qs[256], bsums[16]:i16
  IQ2_XXS: { ggmlType: 16, blockSize: 256, typeSize: 66 },
  IQ2_XS: { ggmlType: 17, blockSize: 256, typeSize: 74 },
  IQ3_XXS: { ggmlType: 18, blockSize: 256, typeSize: 98 },
  IQ1_S: { ggmlType: 19, blockSize: 256, typeSize: 50 },
  IQ4_NL: { ggmlType: 20, blockSize: 32, typeSize: 18 },
  IQ3_S: { ggmlType: 21, blockSize: 256, typeSize: 110 },
  IQ2_S: { ggmlType: 22, blockSize: 256, typeSize: 82 },
  IQ4_XS: { ggmlType: 23, blockSize: 256, typeSize: 136 },
  I8: { ggmlType: 24, blockSize: 1, typeSize: 1 },
  I16: { ggmlType: 25, blockSize: 1, typeSize: 2 },
  I32: { ggmlType: 26, blockSize: 1, typeSize: 4 },
  I64: { ggmlType: 27, blockSize: 1, typeSize: 8 },
  F64: { ggmlType: 28, blockSize: 1, typeSize: 8 },
  IQ1_M: { ggmlType: 29, blockSize: 256, typeSize: 56 },
  TQ1_0: { ggmlType: 34, blockSize: 256, typeSize: 54 },
  TQ2_0: { ggmlType: 35, blockSize: 256, typeSize: 66 },
  MXFP4: { ggmlType: 39, blockSize: 32, typeSize: 17 }, // e:u8, qs[16]
  NVFP4: { ggmlType: 40, blockSize: 64, typeSize: 36 },
  Q1_0: { ggmlType: 41, blockSize: 128, typeSize: 18 },
  Q2_0: { ggmlType: 42, blockSize: 64, typeSize: 18 },
} as const;

export type GgmlTypeName = QuantType | keyof typeof FOREIGN_TYPES;
/** Every ggml type a GGUF tensor may have: name, enum value, block geometry. */
export const GGML_TYPES: Readonly<Record<GgmlTypeName, { ggmlType: number; blockSize: number; typeSize: number }>> = { ...QUANT_TYPES, ...FOREIGN_TYPES };
const TYPE_OF_GGML: ReadonlyMap<number, GgmlTypeName> = new Map(Object.entries(GGML_TYPES).map(([k, v]) => [v.ggmlType, k as GgmlTypeName]));

/** A forward reader over a file handle, refilled in chunks; it never reads or allocates past the file's end. */
class Cursor {
  private buf = new Uint8Array(0);
  private view = new DataView(this.buf.buffer);
  /** File offset of buf[0]. */
  private base = 0;
  pos = 0;

  constructor(private readonly fh: fsp.FileHandle, readonly size: number, private readonly file: string) {}

  fail(what: string): never {
    // `what` quotes names read from the file (keys, tensor names up to 64 KiB): cut to one screen line's worth.
    throw new LlmcError(`not a valid GGUF file: ${clip(what)} (at byte ${this.pos}); compile it again`, this.file);
  }

  /** Bytes left in the file after the cursor. */
  get left(): number {
    return this.size - this.pos;
  }

  private async need(n: number, what: string): Promise<void> {
    if (n > this.left) this.fail(`${what} runs past the end of the file (${this.size} bytes)`);
    if (this.pos + n <= this.base + this.buf.length) return;
    const want = Math.min(Math.max(n, 1 << 16), this.left);
    const next = new Uint8Array(want);
    const { bytesRead } = await this.fh.read(next, 0, want, this.pos);
    if (bytesRead !== want) this.fail(`the file ended while reading ${what}`);
    this.buf = next;
    this.view = new DataView(next.buffer);
    this.base = this.pos;
  }

  private at(n: number): number {
    const i = this.pos - this.base;
    this.pos += n;
    return i;
  }

  async u32(what: string): Promise<number> {
    await this.need(4, what);
    return this.view.getUint32(this.at(4), true);
  }

  /** A u64 count or size, which must fit below `max` (a bound derived from the file's size). */
  async count(what: string, max: number): Promise<number> {
    await this.need(8, what);
    const v = this.view.getBigUint64(this.at(8), true);
    if (v > BigInt(max)) this.fail(`${what} is ${v}, more than the file can hold (${max})`);
    return Number(v);
  }

  async string(what: string, max = MAX_STRING): Promise<string> {
    const n = await this.count(`length of ${what}`, Math.min(max, this.left - 8));
    await this.need(n, what);
    const i = this.at(n);
    return Buffer.from(this.buf.buffer, this.buf.byteOffset + i, n).toString('utf8');
  }

  async scalar(kind: Exclude<ScalarKind, 'STRING'>, what: string): Promise<GgufScalar> {
    const n = SCALAR_BYTES[kind];
    await this.need(n, what);
    const i = this.at(n);
    const v = this.view;
    switch (kind) {
      case 'UINT8': return v.getUint8(i);
      case 'INT8': return v.getInt8(i);
      case 'BOOL': return v.getUint8(i) !== 0;
      case 'UINT16': return v.getUint16(i, true);
      case 'INT16': return v.getInt16(i, true);
      case 'UINT32': return v.getUint32(i, true);
      case 'INT32': return v.getInt32(i, true);
      case 'FLOAT32': return v.getFloat32(i, true);
      case 'FLOAT64': return v.getFloat64(i, true);
      case 'UINT64': return v.getBigUint64(i, true);
      case 'INT64': return v.getBigInt64(i, true);
    }
  }
}

async function readValue(c: Cursor, key: string): Promise<GgufMetaValue> {
  const kind = KIND_OF.get(await c.u32(`the type of "${key}"`));
  if (kind === undefined) c.fail(`metadata "${key}" has an unknown value type`);
  if (kind === 'STRING') return c.string(`"${key}"`);
  if (kind !== 'ARRAY') return c.scalar(kind, `"${key}"`);
  const item = KIND_OF.get(await c.u32(`the item type of "${key}"`));
  if (item === undefined || item === 'ARRAY') c.fail(`metadata "${key}" is an array of an unsupported type`);
  // Every item takes at least a byte (a string at least its 8-byte length).
  const min = item === 'STRING' ? 8 : SCALAR_BYTES[item];
  const n = await c.count(`the length of "${key}"`, Math.floor((c.left - 8) / min));
  const out: GgufScalar[] = new Array(n);
  for (let i = 0; i < n; i++) out[i] = item === 'STRING' ? await c.string(`"${key}"[${i}]`) : await c.scalar(item, `"${key}"[${i}]`);
  return out;
}

/** Parse and check a GGUF file's header; a damaged file is one LlmcError naming it and the problem. */
export async function readGgufHeader(file: string): Promise<GgufHeader> {
  const fh = await fsp.open(file, 'r').catch((e: unknown) => {
    throw ioError(e, file, 'read');
  });
  try {
    const st = await fh.stat();
    if (!st.isFile()) throw new LlmcError('not a regular file', file);
    // Typed explicitly so TypeScript narrows after c.fail() (which never returns).
    const c: Cursor = new Cursor(fh, st.size, file);
    if ((await c.u32('the magic')) !== GGUF_MAGIC) c.fail('it does not start with "GGUF"');
    const version = await c.u32('the version');
    if (version !== 2 && version !== 3) c.fail(`version ${version} (llama.cpp reads 2 and 3)`);
    // A tensor info takes at least 8 + 4 + 8 + 4 + 8 bytes, a metadata entry at least 8 + 4 + 1.
    const nTensors = await c.count('the tensor count', Math.floor(c.left / 32));
    const nKv = await c.count('the metadata count', Math.floor(c.left / 13));

    const metadata = new Map<string, GgufMetaValue>();
    for (let i = 0; i < nKv; i++) {
      const key = await c.string(`metadata key ${i}`, 1 << 16);
      if (metadata.has(key)) c.fail(`metadata key "${key}" appears twice`);
      metadata.set(key, await readValue(c, key));
    }
    const alignment = metadata.get('general.alignment') ?? GGUF_DEFAULT_ALIGNMENT;
    if (typeof alignment !== 'number' || !Number.isInteger(alignment) || alignment <= 0 || (alignment & (alignment - 1)) !== 0) {
      c.fail(`general.alignment ${String(alignment)} is not a power of two`);
    }

    const tensors: GgufTensorEntry[] = [];
    const names = new Set<string>();
    for (let i = 0; i < nTensors; i++) {
      const name = await c.string(`tensor name ${i}`, MAX_NAME - 1);
      if (names.has(name)) c.fail(`tensor "${name}" appears twice`);
      names.add(name);
      const dims = await c.u32(`the dimension count of "${name}"`);
      if (dims < 1 || dims > MAX_DIMS) c.fail(`tensor "${name}" has ${dims} dimensions (1 to ${MAX_DIMS})`);
      const ne: number[] = [];
      let elements = 1;
      for (let d = 0; d < dims; d++) {
        // Bounded by the file: a tensor cannot have more elements than the file has bytes × 2 (4-bit types).
        const n = await c.count(`dimension ${d} of "${name}"`, c.size * 2);
        if (n === 0) c.fail(`dimension ${d} of "${name}" is 0`);
        ne.push(n);
        elements *= n;
      }
      const ggml = await c.u32(`the type of "${name}"`);
      const type = TYPE_OF_GGML.get(ggml);
      if (type === undefined) c.fail(`tensor "${name}" has ggml type ${ggml}, which this llmc does not know (a newer llama.cpp's?)`);
      const { blockSize, typeSize } = GGML_TYPES[type];
      if (ne[0] % blockSize !== 0) c.fail(`tensor "${name}": a row of ${ne[0]} is not whole ${type} blocks of ${blockSize}`);
      const nbytes = (elements / blockSize) * typeSize;
      const offset = await c.count(`the data offset of "${name}"`, c.size);
      if (offset % alignment !== 0) c.fail(`tensor "${name}" starts at ${offset}, not a multiple of the alignment ${alignment}`);
      tensors.push({ name, ne, type, ggmlType: ggml, offset, nbytes });
    }
    const dataStart = Math.ceil(c.pos / alignment) * alignment;
    // llama.cpp (gguf.cpp) wants the tensors' data in info order, each padded to the alignment: any
    // other offset (an overlap, a gap) is refused there with a log line; here it is one error.
    let expected = 0;
    for (const t of tensors) {
      if (t.offset !== expected) c.fail(`tensor "${t.name}" has data offset ${t.offset}, expected ${expected} (tensors in order, each padded to ${alignment} bytes)`);
      expected += Math.ceil(t.nbytes / alignment) * alignment;
    }
    for (const t of tensors) {
      if (dataStart + t.offset + t.nbytes > st.size) {
        throw new LlmcError(`not a valid GGUF file: tensor "${t.name}" (${t.nbytes} bytes at ${dataStart + t.offset}) runs past the end of the file (${st.size} bytes); compile it again`, file);
      }
    }
    return { version, metadata, tensors, alignment, dataStart, fileSize: st.size };
  } finally {
    await fh.close();
  }
}

/** The pre-check before llama.cpp sees a GGUF (with or without a manifest): its header read and checked. */
export const checkGgufFile = (file: string): Promise<GgufHeader> => readGgufHeader(file);

/**
 * The model a GGUF describes is the one its manifest names: layers, width and vocabulary agree
 * (an elastic level narrows heads and neurons, never these), so a file edited after the compile is
 * refused before llama.cpp sizes anything from it.
 */
export function checkGgufModel(h: GgufHeader, expect: { numLayers: number; hiddenSize: number; vocabSize: number }, file: string): void {
  const arch = h.metadata.get('general.architecture');
  if (typeof arch !== 'string') throw new LlmcError('not a valid GGUF model: no general.architecture; compile it again', file);
  const want: [string, unknown, number][] = [
    [`${arch}.block_count`, h.metadata.get(`${arch}.block_count`), expect.numLayers],
    [`${arch}.embedding_length`, h.metadata.get(`${arch}.embedding_length`), expect.hiddenSize],
    ['tokenizer.ggml.tokens (count)', (h.metadata.get('tokenizer.ggml.tokens') as unknown[] | undefined)?.length, expect.vocabSize],
  ];
  for (const [key, got, value] of want) {
    if (got !== value) throw new LlmcError(`${key} is ${String(got)}, the manifest says ${value}: the file was changed after the compile; compile it again`, file);
  }
}

/**
 * The model a GGUF describes, from its metadata alone (llama.cpp's keys, llama-arch.cpp LLM_KV_*),
 * for a GGUF without llmc's manifest: what `llmc inspect` shows and what `llmc run` sizes its
 * context, vocabulary and stop ids by. llama.cpp itself does the math, so only what those need is
 * read exactly; a key llama.cpp needs that is missing or malformed is one error naming it.
 */

export function ggufArchSpec(h: GgufHeader, file: string): ArchSpec {
  const md = h.metadata;
  const arch = md.get('general.architecture');
  if (typeof arch !== 'string') throw new LlmcError('not a GGUF model: no general.architecture', file);
  if (!GGUF_READABLE.includes(arch)) {
    throw new LlmcError(`general.architecture "${arch}": llmc reads back ${GGUF_READABLE.join(', ')} GGUFs; run this one with llama.cpp's llama-cli -m ${file}`, file);
  }
  const bad = (key: string, why: string): never => {
    throw new LlmcError(`not a usable GGUF model: ${key} ${why}`, file);
  };
  /** A count or size: one number, or llama.cpp's per-layer array when all its layers agree. */
  const num = (key: string, fallback?: number): number => {
    const v = md.get(key);
    if (v === undefined) return fallback ?? bad(key, 'is missing');
    const one = (x: GgufScalar) => (typeof x === 'bigint' ? Number(x) : typeof x === 'number' && Number.isFinite(x) ? x : bad(key, `is ${String(x)}, not a number`));
    if (!Array.isArray(v)) return one(v);
    const all = new Set(v.map(one));
    if (all.size !== 1) bad(key, `differs between layers (${[...all].join(', ')}); llmc describes one width for all layers`);
    return [...all][0];
  };
  const a = (k: string) => `${arch}.${k}`;
  const names = new Set(h.tensors.map((t) => t.name));
  const tokens = md.get('tokenizer.ggml.tokens');
  const embd = h.tensors.find((t) => t.name === 'token_embd.weight');
  const vocabSize = num(a('vocab_size'), Array.isArray(tokens) ? tokens.length : embd?.ne[1]);
  const hiddenSize = num(a('embedding_length'));
  const numHeads = num(a('attention.head_count'));
  const optionalId = (key: string): number | null => (md.has(`tokenizer.ggml.${key}`) ? num(`tokenizer.ggml.${key}`) : null);
  const experts = num(a('expert_count'), 0);
  let moe: MoeSpec | null = null;
  const modelType = modelTypeOfGguf(arch, experts > 0)!;
  if (experts > 0) {
    const entry = archOf({ modelType });
    if (!entry.moe || !entry.gguf.routing) bad(a('expert_count'), `is ${experts}, but llmc knows ${arch} without experts`);
    const shared = num(a('expert_shared_feed_forward_length'), 0);
    moe = {
      // As llama.cpp's arch routes (the family's gguf.routing): its llama (Mixtral) renormalizes the top-k weights, its qwen2moe does not.
      routing: entry.gguf.routing!,
      numExperts: experts,
      topK: num(a('expert_used_count')),
      expertIntermediateSize: num(a('expert_feed_forward_length'), num(a('feed_forward_length'), 0)),
      sharedExpertIntermediateSize: shared || null,
      denseLayers: [],
    };
  }
  const scaling = md.get(a('rope.scaling.type'));
  let ropeScaling: RopeScaling | null = null;
  if (scaling === 'linear') ropeScaling = { type: 'linear', factor: num(a('rope.scaling.factor')) };
  else if (scaling === 'yarn') {
    // llama.cpp's yarn defaults (what llmc writes, and convert_hf_to_gguf's default).
    const orig = md.get(a('rope.scaling.original_context_length'));
    ropeScaling = yarnWithDefaults(num(a('rope.scaling.factor')), orig !== undefined ? num(a('rope.scaling.original_context_length')) : num(a('context_length')));
  }
  const eos = [optionalId('eos_token_id'), optionalId('eot_token_id'), optionalId('eom_token_id')].filter((x): x is number => x !== null);
  return {
    modelType,
    hiddenSize,
    intermediateSize: num(a('feed_forward_length'), moe?.expertIntermediateSize ?? 0),
    numLayers: num(a('block_count')),
    numHeads,
    numKvHeads: num(a('attention.head_count_kv'), numHeads),
    headDim: num(a('attention.key_length'), hiddenSize / numHeads),
    vocabSize,
    maxPositions: num(a('context_length')),
    rmsNormEps: num(a('attention.layer_norm_rms_epsilon')),
    ropeTheta: num(a('rope.freq_base'), 10000),
    ropeScaling,
    tieEmbeddings: !names.has('output.weight'),
    qkvBias: names.has('blk.0.attn_q.bias'),
    oBias: names.has('blk.0.attn_output.bias'),
    mlpBias: names.has('blk.0.ffn_up.bias'),
    hiddenAct: 'silu',
    rmsNormOffset: 0,
    attnSoftcap: null,
    finalSoftcap: null,
    localRope: null,
    slidingWindow: null,
    slidingLayers: null,
    bosTokenId: optionalId('bos_token_id'),
    eosTokenIds: [...new Set(eos)],
    torchDtype: null,
    moe,
    // llama.cpp computes the layer itself; these describe the file's shapes only (llmc never runs a bare GGUF's IR).
    qkNorm: names.has('blk.0.attn_q_norm.weight') ? { scope: (h.tensors.find((t) => t.name === 'blk.0.attn_q_norm.weight')?.ne[0] ?? 0) === hiddenSize ? 'all' : 'head', offset: 0 } : null,
    normPlacement: names.has('blk.0.attn_norm.weight') ? 'pre' : 'post',
    ropeLayers: null,
    multipliers: null,
  };
}
