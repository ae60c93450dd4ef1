/**
 * Loading a ts artifact: parse and validate llmc-manifest.json and the tensor table against the
 * weights' actual size (and sha256 on request) before anything runs, then read the weights and
 * build the Model. Browser-safe: the bytes come from an injected ByteSource, hashing from WebCrypto.
 */
import { expectedTensorCount, expectedTensors } from '../../core/arch/names.js';
import { checkArchSpec } from '../../core/arch/check.js';
import { LlmcError, summarize } from '../../core/errors.js';
import { Checker } from '../../core/util/check.js';
import type { ByteSource } from './bytes.js';
import {
  alignUp,
  checkTsTargetInfo,
  FORMAT_BLOCK,
  MANIFEST_FORMAT,
  MANIFEST_VERSION,
  TENSOR_ALIGNMENT,
  TS_FORMAT,
  TS_FORMAT_VERSION,
  WEIGHTS_FILE,
  formatTensorBytes,
  type ArtifactManifest,
  type TensorEntry,
  type TsLevelAdapters,
  type TsTargetInfo,
} from './format.js';
import { dequantRow, Weight } from './kernels.js';
import { Model, weightTable, type LevelAdapters } from './model.js';
import { mergeLowRank } from '../../core/util/lowrank.js';
import { lowRankTerm, type LowRank } from './lowrank.js';
import { ELASTIC_LEVELS, levelWidths, selectLevel, type Level } from '../../core/records/elastic.js';
import { findRecord } from '../../core/records/types.js';

export type { ArtifactManifest };
import { WasmArena } from './wasm.js';
import { loadOffloaded, type OffloadOptions } from './offload.js';
import { DEFAULT_MIN_WORK, webWorker, type PoolOptions } from './pool.js';
import { parseJson } from '../../core/util/json.js';

/** What `load` reads: the manifest's text and the bytes of weights.bin. */
export interface ArtifactSource {
  manifest: string;
  weights: ByteSource;
  /** For messages: the artifact's directory or URL. */
  name?: string;
}

export interface LoadOptions {
  /** Check weights.bin's sha256 against the manifest (reads the whole file once more). Default false. */
  verifyChecksums?: boolean;
  /** Files up to this size are read in one call; larger ones tensor by tensor. Default 1 GiB. */
  singleReadLimit?: number;
  /** Run F32 / Q8_0 matmuls on WebAssembly SIMD kernels when available (default true; JS kernels otherwise). */
  wasm?: boolean;
  /**
   * Merge one elastic level's adapters into F32 copies of its slices at load (a level id or fraction):
   * the model then runs that level only, without the low-rank terms per token. Default: none, every
   * level runs on the shared weights with its adapters as low-rank terms (switching moves nothing).
   */
  mergeLevel?: string;
  /**
   * Keep an MoE model's routed experts in the weights file and read them on demand into a bounded
   * cache (./offload.ts); the ByteSource must stay readable while the model runs.
   */
  experts?: OffloadOptions;
  /**
   * Threads for the WebAssembly matmuls: above 1, the weights load into a shared memory and a worker
   * pool splits each matmul's rows (./pool.ts; bit-identical outputs). Needs SharedArrayBuffer (in a
   * browser: a cross-origin isolated page). Default 1. A model none of whose weights reaches the pool's
   * minWork runs on one thread (Model.threads says which).
   */
  threads?: number;
  /** How the pool's workers start and which calls it splits (default: Web Workers; ./node.ts's loadDir passes worker_threads). */
  pool?: Partial<PoolOptions>;
}


const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Parse and check the manifest text (no weights needed). */
export function parseManifest(text: string, file = 'llmc-manifest.json'): ArtifactManifest {
  const bad = (msg: string): never => {
    throw new LlmcError(msg, file);
  };
  const m = parseJson(text, file);
  if (!isObj(m)) return bad('manifest is not a JSON object');
  if (m.format !== MANIFEST_FORMAT || m.version !== MANIFEST_VERSION) {
    bad(`unsupported manifest ${summarize(m.format)} version ${summarize(m.version)}; this runtime reads ${MANIFEST_FORMAT} version ${MANIFEST_VERSION}`);
  }
  if (m.target !== 'ts') bad(`artifact target is ${summarize(m.target)}; the TS runtime runs "ts" artifacts`);
  const ti = m.targetInfo;
  if (!isObj(ti) || ti.format !== TS_FORMAT || ti.version !== TS_FORMAT_VERSION) {
    bad(
      `unsupported weights format ${summarize(isObj(ti) ? ti.format : null)} version ${summarize(isObj(ti) ? ti.version : null)}; this runtime reads ${TS_FORMAT} version ${TS_FORMAT_VERSION}`,
    );
  }
  const c = new Checker(file);
  checkArchSpec(m.arch, c);
  c.arr(m.files, 'files').forEach((f, i) => {
    const e = c.obj(f, `files[${i}]`);
    c.str(e.path, `files[${i}].path`);
    c.int(e.size, `files[${i}].size`);
    c.str(e.sha256, `files[${i}].sha256`);
  });
  c.arr(m.passes, 'passes').forEach((p, i) => {
    const r = c.obj(p, `passes[${i}]`);
    c.str(r.name, `passes[${i}].name`);
    c.obj(r.metadata, `passes[${i}].metadata`);
  });
  checkTsTargetInfo(ti, bad);
  return m as unknown as ArtifactManifest;
}

/** Check every level's adapter tensors against the tensor table: F32, [rank, in] and [out, rank], and their weight present. */
function checkAdapters(m: ArtifactManifest, table: Map<string, TensorEntry>, file: string): void {
  for (const [id, lv] of Object.entries(m.targetInfo.adapters ?? {})) {
    for (const t of lv.tensors) {
      const a = table.get(t.a);
      const b = table.get(t.b);
      const w = table.get(t.weight);
      const what = `level ${id}'s adapter of "${t.weight}"`;
      if (!w || w.shape.length !== 2) throw new LlmcError(`${what}: no such linear weight in the tensor table`, file);
      if (!a || !b) throw new LlmcError(`${what}: tensor "${!a ? t.a : t.b}" is missing from the tensor table`, file);
      if (a.format !== 'F32' || b.format !== 'F32') throw new LlmcError(`${what}: adapters are F32, got ${a.format}/${b.format}`, file);
      if (a.shape.length !== 2 || b.shape.length !== 2 || a.shape[0] !== lv.rank || b.shape[1] !== lv.rank || a.shape[1] > w.shape[1] || b.shape[0] > w.shape[0]) {
        throw new LlmcError(`${what}: A [${a.shape}] and B [${b.shape}] are not [${lv.rank}, ≤${w.shape[1]}] and [≤${w.shape[0]}, ${lv.rank}]`, file);
      }
    }
  }
}

/** Check every tensor entry against the file size, the formats' block sizes and the architecture. */
export function checkTensorTable(m: ArtifactManifest, fileSize: number, file: string): Map<string, TensorEntry> {
  const bad = (msg: string): never => {
    throw new LlmcError(msg, file);
  };
  const align = m.targetInfo.alignment ?? TENSOR_ALIGNMENT;
  const table = new Map<string, TensorEntry>();
  for (const e of m.targetInfo.tensors) {
    const what = `tensor "${e.name}"`;
    if (table.has(e.name)) bad(`${what} appears twice in the tensor table`);
    const want = formatTensorBytes(e.format, e.shape);
    if (want === null) bad(`${what}: rows of ${e.shape[e.shape.length - 1]} are not whole ${e.format} blocks of ${FORMAT_BLOCK[e.format].blockSize}`);
    if (e.bytes !== want) bad(`${what}: byte length ${e.bytes} disagrees with shape [${e.shape}] in ${e.format} (${want} bytes)`);
    if (e.offset % align !== 0) bad(`${what}: offset ${e.offset} is not ${align}-byte aligned`);
    if (e.offset + e.bytes > fileSize) bad(`${what}: bytes ${e.offset}..${e.offset + e.bytes} lie outside the file (${fileSize} bytes)`);
    table.set(e.name, e);
  }
  const sorted = [...table.values()].sort((a, b) => a.offset - b.offset);
  for (let i = 1; i < sorted.length; i++) {
    if (sorted[i].offset < sorted[i - 1].offset + sorted[i - 1].bytes) bad(`tensors "${sorted[i - 1].name}" and "${sorted[i].name}" overlap`);
  }
  let expected: { name: string; shape: number[] }[];
  try {
    const want = expectedTensorCount(m.arch);
    if (!Number.isSafeInteger(want) || want > 2 * table.size + 64) return bad(`"arch" describes ${want} tensors, the tensor table holds ${table.size}`);
    expected = expectedTensors(m.arch);
  } catch {
    return bad('"arch" is not a valid architecture spec');
  }
  for (const x of expected) {
    const e = table.get(x.name);
    if (!e) bad(`tensor "${x.name}" is missing from the tensor table`);
    if (e!.shape.join(',') !== x.shape.join(',')) bad(`tensor "${x.name}" has shape [${e!.shape}], the architecture needs [${x.shape}]`);
  }
  return table;
}

async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const subtle = globalThis.crypto?.subtle;
  if (!subtle) throw new LlmcError('checksum verification needs WebCrypto (globalThis.crypto.subtle), which is not available here');
  const digest = await subtle.digest('SHA-256', bytes as Uint8Array<ArrayBuffer>);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, '0')).join('');
}

/** Typed-array views need 4-byte alignment; copy the rare unaligned slice. */
export function aligned(b: Uint8Array): Uint8Array {
  return b.byteOffset % 4 === 0 ? b : b.slice();
}

/** An artifact's manifest and tensor table, every check done against the weights file's size (no weights read). */
export interface CheckedArtifact {
  manifest: ArtifactManifest;
  table: Map<string, TensorEntry>;
  /** weights.bin's size and its manifest entry (the sha256 to verify against). */
  size: number;
  entry: ArtifactManifest['files'][number];
  /** A file of the artifact as messages name it. */
  where: (file: string) => string;
  wfile: string;
}

export async function checkArtifact(source: ArtifactSource): Promise<CheckedArtifact> {
  const where = (f: string) => (source.name ? `${source.name.replace(/\/$/, '')}/${f}` : f);
  const manifest = parseManifest(source.manifest, where('llmc-manifest.json'));
  const wname = manifest.targetInfo.weights || WEIGHTS_FILE;
  const wfile = where(wname);
  const entry = manifest.files.find((f) => f.path === wname);
  if (!entry) throw new LlmcError(`"${wname}" is not listed in the manifest's files`, where('llmc-manifest.json'));
  const size = await source.weights.size();
  if (size < entry.size) throw new LlmcError(`truncated: ${size} bytes, the manifest says ${entry.size}`, wfile);
  if (size !== entry.size) throw new LlmcError(`size ${size} bytes disagrees with the manifest's ${entry.size}`, wfile);
  const table = checkTensorTable(manifest, size, wfile);
  checkAdapters(manifest, table, wfile);
  return { manifest, table, size, entry, where, wfile };
}

/** Load an artifact and return a runnable Model; every check runs before any weights are used. */
export async function load(source: ArtifactSource, opts: LoadOptions = {}): Promise<Model> {
  const { manifest, table, size, entry, where, wfile } = await checkArtifact(source);

  if (opts.experts) {
    if (opts.verifyChecksums) {
      const got = await sha256Hex(await source.weights.read(0, size));
      if (got !== entry.sha256) throw new LlmcError(`sha256 mismatch: file has ${got}, the manifest says ${entry.sha256}`, wfile);
    }
    if (opts.mergeLevel !== undefined) throw new LlmcError('merging a level at load and reading experts on demand do not combine', wfile);
    const offloaded = await loadOffloaded(source.weights, manifest, table, opts.experts, opts.wasm !== false, wfile);
    return new Model(manifest.arch, offloaded, manifest, { get: levelAdapterLookup(manifest, offloaded.weight) });
  }
  let whole: Uint8Array | null = null;
  const single = size <= (opts.singleReadLimit ?? 1 << 30);
  // Without a checksum to compute first, the file is read straight into the kernels' memory (no copy).
  const direct = single && !opts.verifyChecksums && opts.wasm !== false && source.weights.readInto !== undefined;
  if (single && !direct) whole = aligned(await source.weights.read(0, size));
  if (opts.verifyChecksums) {
    const bytes = whole ?? (await source.weights.read(0, size));
    const got = await sha256Hex(bytes);
    if (got !== entry.sha256) throw new LlmcError(`sha256 mismatch: file has ${got}, the manifest says ${entry.sha256}`, wfile);
  }

  // A level merged at load: its adapted linears become F32 copies of their slices, W + scale·B·A.
  const mergeLevel = opts.mergeLevel === undefined ? undefined : selectLevel(findRecord(manifest.passes, ELASTIC_LEVELS, where('llmc-manifest.json'))?.levels ?? null, opts.mergeLevel, where('llmc-manifest.json'));
  const mergeId = mergeLevel?.id;
  const mergeSet = mergeId === undefined ? undefined : manifest.targetInfo.adapters?.[mergeId];
  const mergedBytes = (mergeSet?.tensors ?? []).reduce((n, t) => n + alignUp(mergedSliceBytes(table.get(t.b)!.shape[0], table.get(t.a)!.shape[1])), 0);

  // With WebAssembly, the weights live in the kernels' memory (copied in once); else in plain buffers.
  const maxDim = Math.max(...[...table.values()].flatMap((e) => e.shape));
  // A pool only where some matmul is large enough to split: otherwise its shared memory and workers only cost.
  const splittable = Math.max(0, ...[...table.values()].map((e) => e.bytes)) >= (opts.pool?.minWork ?? DEFAULT_MIN_WORK);
  const threads = splittable ? (opts.threads ?? 1) : 1;
  if (threads > 1 && typeof SharedArrayBuffer === 'undefined') throw new LlmcError(`${threads} threads need SharedArrayBuffer (in a browser: a cross-origin isolated page); load with threads: 1`, wfile);
  const arena = opts.wasm === false ? null : WasmArena.create(alignUp(size) + mergedBytes, maxDim, threads > 1);
  if (arena && threads > 1) await arena.startPool(threads, { spawn: opts.pool?.spawn ?? webWorker, minWork: opts.pool?.minWork });
  const data = new Map<string, Uint8Array>();
  let spare: Uint8Array | null = null;
  if (arena) {
    const all = arena.weights(alignUp(size) + mergedBytes);
    const mem = all.subarray(0, size);
    if (whole) mem.set(whole);
    else if (direct) await source.weights.readInto!(0, mem);
    else for (const e of table.values()) mem.set(await source.weights.read(e.offset, e.bytes), e.offset);
    whole = mem;
    spare = all.subarray(alignUp(size));
  }
  for (const e of table.values()) {
    data.set(e.name, whole ? whole.subarray(e.offset, e.offset + e.bytes) : aligned(await source.weights.read(e.offset, e.bytes)));
  }
  const weights = new Map<string, Weight>();
  const weight = (name: string): Weight => {
    const e = table.get(name);
    if (!e) throw new LlmcError(`tensor "${name}" is missing from the tensor table`, wfile);
    let w = weights.get(name);
    if (!w) {
      w = weightOf(e, data.get(name)!, arena);
      weights.set(name, w);
    }
    return w;
  };
  const adaptersOf = levelAdapterLookup(manifest, weight);
  if (mergeLevel && mergeSet) {
    if (!canMergeLevel(mergeLevel, manifest.arch)) {
      throw new LlmcError(`level ${mergeLevel.id} keeps some query heads of each group: not a prefix slice to merge into`, wfile);
    }
    let at = 0;
    for (const [name, lr] of adaptersOf(mergeLevel.id)!) {
      const size = mergedSliceBytes(lr.b.rows, lr.a.cols);
      const bytes = spare ? spare.subarray(at, at + size) : new Uint8Array(size);
      at += alignUp(bytes.byteLength);
      weights.set(name, mergeIntoSlice(weight(name), lr, bytes, arena, `level ${mergeLevel.id}'s adapter of ${name}`));
    }
  }
  const model = new Model(manifest.arch, weightTable((name) => table.has(name), weight, opts.wasm === false), manifest, { get: adaptersOf, merged: mergeLevel && { id: mergeLevel.id, widths: levelWidths(mergeLevel) } });
  if (arena && arena.threads > 1) {
    model.threads = arena.threads;
    model.onClose(async () => arena.closePool());
  }
  return model;
}

/** Bytes of the F32 slice a low-rank adapter covers: its B's rows × its A's columns. */
export const mergedSliceBytes = (bRows: number, aCols: number): number => bRows * aCols * 4;

/**
 * The slice of `w` that `lr` covers as F32 with the adapter merged in, W + scale·B·A, written to
 * `bytes` (mergedSliceBytes of them; in `arena` for its kernels): how a level merged at load runs.
 */
export function mergeIntoSlice(w: Weight, lr: LowRank, bytes: Uint8Array, arena: WasmArena | null, what: string): Weight {
  const rows = lr.b.rows;
  const cols = lr.a.cols;
  const slice = new Float32Array(rows * cols);
  const row = new Float32Array(w.cols);
  for (let r = 0; r < rows; r++) {
    dequantRow(w, r, row);
    slice.set(row.subarray(0, cols), r * cols);
  }
  mergeLowRank(slice, rows, cols, lowRankTerm(lr), what);
  bytes.set(new Uint8Array(slice.buffer));
  return new Weight(w.name, 'F32', rows, cols, bytes, arena);
}

/**
 * Whether `llmc run --level` merges this level's adapters at load (a level with adapters whose
 * adapted weights are prefix slices); otherwise they run as low-rank terms.
 */
export function mergesAtLoad(manifest: Pick<ArtifactManifest, 'arch' | 'targetInfo'>, level: Pick<Level, 'id' | 'layers'>): boolean {
  return manifest.targetInfo.adapters?.[level.id] !== undefined && canMergeLevel(level, manifest.arch);
}

/** A level whose adapted weights are prefix slices (no query heads dropped inside a group) can be merged at load. */
export function canMergeLevel(level: Pick<Level, 'layers'>, arch: { numHeads: number; numKvHeads: number }): boolean {
  return !level.layers.some((l) => l.kvGroups > 1 && l.qHeadsPerGroup < arch.numHeads / arch.numKvHeads);
}

/** Each level's adapters (targetInfo.adapters) as runtime weights, read on first use. */
function levelAdapterLookup(manifest: ArtifactManifest, weight: (name: string) => Weight): (id: string) => LevelAdapters | undefined {
  const levelAdapters = new Map<string, LevelAdapters>();
  return (id) => {
    const set = manifest.targetInfo.adapters?.[id];
    if (!set) return undefined;
    let got = levelAdapters.get(id);
    if (!got) {
      got = adaptersOf(set, weight);
      levelAdapters.set(id, got);
    }
    return got;
  };
}

/** An adapter set's low-rank terms as runtime weights, keyed by the weight each adapts (those `keep` keeps). */
export function adaptersOf(set: TsLevelAdapters, weight: (name: string) => Weight, keep: (adapted: string) => boolean = () => true): LevelAdapters {
  return new Map(set.tensors.filter((t) => keep(t.weight)).map((t) => [t.weight, { rank: set.rank, scale: set.scale, a: weight(t.a), b: weight(t.b) }]));
}

/** A table entry's bytes as a runtime weight: [rows, cols] with every leading dimension in rows (an empty tensor has none). */
export function weightOf(e: TensorEntry, data: Uint8Array, arena: WasmArena | null): Weight {
  return new Weight(e.name, e.format, e.bytes === 0 ? 0 : e.shape.slice(0, -1).reduce((a, b) => a * b, 1), e.shape[e.shape.length - 1], data, arena);
}
