/**
 * ModelSource: the lazy weights of a compile unit. A checkpoint is one; a pass returns another that
 * wraps it, so weights stream through the whole pipeline one tensor at a time.
 *
 * Two kinds of wrappers:
 * - gather views (permute, slice: `gatherSource`) move whole rows and columns, so a view still knows
 *   where each value sits in the checkpoint's files (`layout`) and readers can fetch any row range of
 *   it by byte range, in the file's own dtype (the GGUF writer streams them this way);
 * - computed rewrites (`transformSource`) change values, so readers take the tensor whole as f32.
 */
import { createHash } from 'node:crypto';
import { LlmcError } from '../errors.js';
import { DTYPE_BYTES, type DType } from './safetensors.js';
import type { ArchSpec } from '../arch/spec.js';

export interface TensorMeta {
  /** Hugging Face name. */
  name: string;
  shape: number[];
  /** Storage dtype in the source (what "keep the source precision" means). */
  dtype: DType;
}

/** Files carried along from the checkpoint, as their raw text. */
export interface ModelAssets {
  /** The parsed config.json (targets that write a Hugging Face dir re-emit it). */
  config: Record<string, unknown>;
  tokenizer?: string;
  tokenizerConfig?: string;
  generationConfig?: string;
  /** chat_template.jinja: where current transformers saves the chat template (tokenizer_config.json's chat_template otherwise). */
  chatTemplate?: string;
}

/**
 * Where a tensor's values sit in a file. The stored tensor is read as a [rows, cols] matrix
 * (a 1-D tensor of n values as [n, 1], an N-D one as [leading dims, last dim]); the tensor itself is
 * row rowMap[r] and column colMap[c] of it, for every r, c (absent maps: identity, all of it).
 */
export interface StoredLayout {
  file: string;
  /** Absolute byte offset of the stored tensor's first value. */
  offset: number;
  dtype: DType;
  rows: number;
  cols: number;
  rowMap?: Int32Array;
  colMap?: Int32Array;
}

export interface ModelSource {
  readonly spec: ArchSpec;
  readonly assets: ModelAssets;
  /** Every tensor, in a stable order. */
  readonly tensors: readonly TensorMeta[];
  /** Where it came from, for messages (a directory path, or a pass chain). */
  readonly description: string;
  /** The checkpoint directory the tensors come from (names files in messages and the model). */
  readonly dir: string;
  /** Inf/NaN weights are read as they are (--allow-nonfinite) instead of refused. */
  readonly allowNonFinite: boolean;
  meta(name: string): TensorMeta | undefined;
  /** One tensor as f32, freshly allocated (callers may modify it). */
  readF32(name: string): Promise<Float32Array>;
  /** Where the tensor's values are stored, when they are rows and columns of a file's bytes (null: computed). */
  layout(name: string): StoredLayout | null;
  /** A content hash: equal hashes mean equal models. */
  identity(): Promise<string>;
}

/** The [rows, cols] matrix a shape is stored as (see StoredLayout). */
export function matrixOf(shape: readonly number[]): { rows: number; cols: number } {
  if (shape.length === 1) return { rows: shape[0], cols: 1 };
  const cols = shape[shape.length - 1];
  return { rows: shape.slice(0, -1).reduce((a, b) => a * b, 1), cols };
}

const chainIdentity = async (base: ModelSource, label: string, paramsHash: string) =>
  createHash('sha256').update(await base.identity()).update(label).update(paramsHash).digest('hex');

/** Apply per-tensor rewrites of the values (and an optional spec/config change) on top of a source. */
export function transformSource(
  base: ModelSource,
  opts: {
    label: string;
    /** A hash of the transform's parameters; folded into identity(). */
    paramsHash: string;
    spec?: ArchSpec;
    config?: Record<string, unknown>;
    /** Rewrite a tensor's data; return it unchanged for tensors the transform does not touch. */
    rewrite: (name: string, data: Float32Array) => Float32Array | Promise<Float32Array>;
    /** Names the rewrite leaves alone (their layout survives); default: none known. */
    untouched?: (name: string) => boolean;
  },
): ModelSource {
  return {
    spec: opts.spec ?? base.spec,
    assets: opts.config ? { ...base.assets, config: opts.config } : base.assets,
    tensors: base.tensors,
    description: `${base.description} | ${opts.label}`,
    dir: base.dir,
    allowNonFinite: base.allowNonFinite,
    meta: (name) => base.meta(name),
    readF32: async (name) => opts.rewrite(name, await base.readF32(name)),
    layout: (name) => (opts.untouched?.(name) ? base.layout(name) : null),
    identity: () => chainIdentity(base, opts.label, opts.paramsHash),
  };
}

/** Rows and columns a gather view takes from one tensor of its base (maps over the base's matrix). */
export interface Gather {
  rows?: Int32Array;
  cols?: Int32Array;
}

/** new[i, :] = old[rows[i], :], then new[:, j] = old[:, cols[j]], on a row-major [R, C] matrix. */
export function gatherMatrix(data: Float32Array, C: number, g: Gather): Float32Array {
  let out = data;
  if (g.rows) {
    const rows = g.rows;
    out = new Float32Array(rows.length * C);
    for (let i = 0; i < rows.length; i++) out.set(data.subarray(rows[i] * C, (rows[i] + 1) * C), i * C);
  }
  if (g.cols) {
    const cols = g.cols;
    const R = out.length / C;
    const n = cols.length;
    const src = out;
    out = new Float32Array(R * n);
    for (let r = 0; r < R; r++) {
      const base = r * C;
      const o = r * n;
      for (let j = 0; j < n; j++) out[o + j] = src[base + cols[j]];
    }
  }
  return out;
}

const compose = (outer: Int32Array | undefined, inner: Int32Array | undefined): Int32Array | undefined =>
  !inner ? outer : !outer ? inner : inner.map((i) => outer[i]);

/**
 * A view of `base` whose listed tensors are gathers of their rows and columns (permutations,
 * prefixes), with an optional spec/config change. Byte-range readers keep working through it.
 */
export function gatherSource(
  base: ModelSource,
  opts: { label: string; paramsHash: string; gathers: ReadonlyMap<string, Gather>; spec?: ArchSpec; config?: Record<string, unknown> },
): ModelSource {
  const metaOf = (t: TensorMeta): TensorMeta => {
    const g = opts.gathers.get(t.name);
    if (!g) return t;
    const shape = [...t.shape];
    if (g.rows) shape[0] = g.rows.length;
    if (g.cols) shape[shape.length - 1] = g.cols.length;
    return { ...t, shape };
  };
  const tensors = base.tensors.map(metaOf);
  const byName = new Map(tensors.map((t) => [t.name, t]));
  return {
    spec: opts.spec ?? base.spec,
    assets: opts.config ? { ...base.assets, config: opts.config } : base.assets,
    tensors,
    description: `${base.description} | ${opts.label}`,
    dir: base.dir,
    allowNonFinite: base.allowNonFinite,
    meta: (name) => byName.get(name),
    readF32: async (name) => {
      const data = await base.readF32(name);
      const g = opts.gathers.get(name);
      return g ? gatherMatrix(data, matrixOf(base.meta(name)!.shape).cols, g) : data;
    },
    layout: (name) => {
      const lay = base.layout(name);
      const g = opts.gathers.get(name);
      if (!lay || !g) return lay;
      return { ...lay, rowMap: compose(lay.rowMap, g.rows), colMap: compose(lay.colMap, g.cols) };
    },
    identity: () => chainIdentity(base, opts.label, opts.paramsHash),
  };
}

/** Reads `length` bytes at `position` into `buffer` from `offset`; returns how many it read (0 at the end). */
export type PositionalRead = (buffer: Uint8Array, offset: number, length: number, position: number) => Promise<number>;

async function readExactly(read: PositionalRead, file: string, buf: Uint8Array, at: number, n: number, pos: number, what: string): Promise<void> {
  for (let got = 0; got < n; ) {
    const r = await read(buf, at + got, n - got, pos + got);
    if (r === 0) throw new LlmcError(`truncated while reading ${what}`, file);
    got += r;
  }
}

/** Bytes of one element as an integer lane, so gathers copy bits (NaN payloads and all) without converting. */
function lanes(bytes: Uint8Array, esize: number): Uint8Array | Uint16Array | Uint32Array | BigUint64Array {
  const n = bytes.byteLength / esize;
  if (esize === 1) return bytes;
  if (esize === 2) return new Uint16Array(bytes.buffer, bytes.byteOffset, n);
  if (esize === 4) return new Uint32Array(bytes.buffer, bytes.byteOffset, n);
  return new BigUint64Array(bytes.buffer, bytes.byteOffset, n);
}

/**
 * Elements [e0, e1) of the tensor `lay` describes (row-major over its own shape), as the file's raw
 * bytes, into `into` (its first (e1 − e0)·esize bytes). Runs of consecutive stored rows are read in one
 * call; gathered columns are picked from whole stored rows. `into` must be aligned to the element size.
 */
export async function readStoredRange(read: PositionalRead, lay: StoredLayout, e0: number, e1: number, into: Uint8Array, what: string): Promise<void> {
  const esize = DTYPE_BYTES[lay.dtype];
  const C = lay.colMap?.length ?? lay.cols;
  const stored = (r: number) => (lay.rowMap ? lay.rowMap[r] : r);
  const rowBytes = lay.cols * esize;
  if (!lay.colMap) {
    // Runs of elements that are contiguous in the file.
    let e = e0;
    while (e < e1) {
      const r = Math.floor(e / C);
      const c = e - r * C;
      let end = Math.min(e1, (r + 1) * C);
      let next = r + 1;
      while (end === (next) * C && end < e1 && stored(next) === stored(next - 1) + 1) {
        end = Math.min(e1, (next + 1) * C);
        next++;
      }
      const pos = lay.offset + stored(r) * rowBytes + c * esize;
      await readExactly(read, lay.file, into, (e - e0) * esize, (end - e) * esize, pos, what);
      e = end;
    }
    return;
  }
  // Gathered columns: read whole stored rows (runs of consecutive ones, a bounded scratch), then pick.
  const colMap = lay.colMap;
  const out = lanes(into.subarray(0, (e1 - e0) * esize), esize);
  const maxRows = Math.max(1, Math.floor((4 << 20) / rowBytes));
  let scratch = new Uint8Array(0);
  let e = e0;
  while (e < e1) {
    const r0 = Math.floor(e / C);
    let r1 = r0 + 1;
    while (r1 * C < e1 && r1 - r0 < maxRows && stored(r1) === stored(r1 - 1) + 1) r1++;
    const n = (r1 - r0) * rowBytes;
    if (scratch.byteLength < n) scratch = new Uint8Array(n);
    await readExactly(read, lay.file, scratch, 0, n, lay.offset + stored(r0) * rowBytes, what);
    const src = lanes(scratch.subarray(0, n), esize);
    const end = Math.min(e1, r1 * C);
    for (; e < end; e++) {
      const r = Math.floor(e / C);
      (out as Uint32Array)[e - e0] = (src as Uint32Array)[(r - r0) * lay.cols + colMap[e - r * C]];
    }
  }
}

/**
 * A model held in memory (f32 tensors, e.g. shared with a worker thread): the same interface as a
 * checkpoint, without stored layouts. `identity` is given (the model it was read from).
 */
export function memorySource(opts: {
  spec: ArchSpec;
  assets: ModelAssets;
  description: string;
  dir: string;
  identity: string;
  allowNonFinite: boolean;
  tensors: readonly { meta: TensorMeta; data: Float32Array }[];
}): ModelSource {
  const byName = new Map(opts.tensors.map((t) => [t.meta.name, t]));
  return {
    spec: opts.spec,
    assets: opts.assets,
    tensors: opts.tensors.map((t) => t.meta),
    description: opts.description,
    dir: opts.dir,
    allowNonFinite: opts.allowNonFinite,
    meta: (name) => byName.get(name)?.meta,
    readF32: async (name) => {
      const t = byName.get(name);
      if (!t) throw new LlmcError(`missing tensor "${name}"`, opts.description);
      return t.data.slice();
    },
    layout: () => null,
    identity: async () => opts.identity,
  };
}
