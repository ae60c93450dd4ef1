/**
 * llama.cpp's importance matrix in its GGUF form (llama.cpp PR #14842; tools/imatrix/imatrix.cpp
 * save_imatrix, common/imatrix-loader.cpp): `general.type` = "imatrix", `imatrix.datasets`,
 * `imatrix.chunk_count`, `imatrix.chunk_size`, and per weight `<name>.in_sum2` (F32 [ne0, n_mat]: Σx²
 * over the tokens, one row per expert) and `<name>.counts` (F32 [1, n_mat]: the tokens). Read from a
 * user's file (`--imatrix FILE`, llama-imatrix's output or llmc's) or built from the imatrix pass's
 * annotations and written into the artifact; `weightsOf` gives the quant weights llama-quantize
 * hands ggml (tools/quantize/quantize.cpp load_imatrix: sums / count, 1 where a count is 0).
 */
import fsp from 'node:fs/promises';
import { LlmcError } from '../../src/core/errors.js';
import type { TensorAnnotation } from '../../src/core/pipeline/unit.js';
import type { ImatrixRecord } from '../../src/core/records/imatrix.js';
import { readGgufHeader } from './read.js';
import { arr, GgufFileWriter, layoutGguf, str, u32, type GgufKv, type GgufTensorInfo } from './writer.js';

export const IMATRIX_FILE = 'imatrix.gguf';

export interface ImatrixEntry {
  /** Σx² per input column, n_mat rows of ne0 (as stored: float32). */
  sums: Float32Array;
  /** Tokens per matrix (expert). */
  counts: number[];
}

export interface Imatrix {
  entries: Map<string, ImatrixEntry>;
  datasets: string[];
  chunkCount: number;
  chunkSize: number;
  /** Where it came from, as llama-quantize records it in `quantize.imatrix.file`. */
  file: string;
}

const SUMS = '.in_sum2';
const COUNTS = '.counts';

/** Read an imatrix.gguf as llama.cpp's loader does; refuses what llama-quantize refuses, in one line. */
export async function readImatrix(file: string): Promise<Imatrix> {
  let h;
  try {
    h = await readGgufHeader(file);
  } catch (e) {
    if (e instanceof LlmcError && /does not start with "GGUF"/.test(e.message)) {
      throw new LlmcError("not a GGUF importance matrix (the legacy imatrix.dat format? llama.cpp's llama-imatrix converts it to imatrix.gguf)", file);
    }
    throw e;
  }
  const m = h.metadata;
  const datasets = m.get('imatrix.datasets');
  const chunkCount = m.get('imatrix.chunk_count');
  const chunkSize = m.get('imatrix.chunk_size');
  if (datasets === undefined || chunkCount === undefined || chunkSize === undefined) {
    throw new LlmcError('missing imatrix metadata (imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size): llama-quantize refuses it too', file);
  }
  const pairs = new Map<string, { sums?: (typeof h.tensors)[number]; counts?: (typeof h.tensors)[number] }>();
  for (const t of h.tensors) {
    const [suffix, key] = t.name.endsWith(SUMS) ? ['sums', t.name.slice(0, -SUMS.length)] as const : t.name.endsWith(COUNTS) ? ['counts', t.name.slice(0, -COUNTS.length)] as const : [null, ''] as const;
    if (!suffix) continue;
    if (t.type !== 'F32') throw new LlmcError(`${t.name} is ${t.type}; sums and counts must be F32`, file);
    pairs.set(key, { ...pairs.get(key), [suffix]: t });
  }
  if (pairs.size === 0) throw new LlmcError('no importance entries (<name>.in_sum2 / <name>.counts) in it', file);
  const fh = await fsp.open(file, 'r');
  try {
    const read = async (t: (typeof h.tensors)[number]) => {
      const buf = Buffer.alloc(t.nbytes);
      await fh.read(buf, 0, t.nbytes, h.dataStart + t.offset);
      return new Float32Array(buf.buffer, buf.byteOffset, t.nbytes / 4);
    };
    const entries = new Map<string, ImatrixEntry>();
    for (const [name, p] of [...pairs].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      if (!p.sums || !p.counts) throw new LlmcError(`mismatched sums and counts for ${name}`, file);
      const sums = await read(p.sums);
      const counts = Array.from(await read(p.counts), (c) => Math.round(c));
      if (sums.length % counts.length !== 0) throw new LlmcError(`${name}: ${sums.length} sums do not split into ${counts.length} matrices`, file);
      entries.set(name, { sums, counts });
    }
    return {
      entries,
      datasets: Array.isArray(datasets) ? datasets.map(String) : [String(datasets)],
      chunkCount: Number(chunkCount),
      chunkSize: Number(chunkSize),
      file,
    };
  } finally {
    await fh.close();
  }
}

/**
 * The imatrix of the planned GGUF tensors from the imatrix pass's annotations: a tensor whose every
 * source was measured gets an entry (stacked experts: one row and count each; phi3's fused tensors
 * read one input, so their sources' sums are one row). Null when nothing was measured.
 */
export function imatrixFromAnnotations(
  tensors: readonly { name: string; sources: string[]; ne: number[] }[],
  annotations: ReadonlyMap<string, TensorAnnotation>,
  record: ImatrixRecord | null,
): Imatrix | null {
  const entries = new Map<string, ImatrixEntry>();
  for (const t of tensors) {
    const imp = t.sources.map((s) => annotations.get(s)?.importance);
    if (imp.length === 0 || imp.some((x) => !x)) continue;
    const mats = (t.ne[2] ?? 1) > 1 ? imp : [imp[0]!]; // fused sources share one input
    const ne0 = t.ne[0];
    if (mats.some((x) => x!.sumSq.length !== ne0)) continue; // not an input-column importance of this tensor
    const sums = new Float32Array(ne0 * mats.length);
    mats.forEach((x, k) => sums.set(x!.sumSq, k * ne0));
    entries.set(t.name, { sums, counts: mats.map((x) => x!.tokens) });
  }
  if (entries.size === 0) return null;
  const c = record?.calibration;
  const dataset = !c ? 'llmc calibration' : c.source === 'self-generated' ? `self-generated (seed ${c.seed})` : c.source.text;
  return { entries, datasets: [dataset], chunkCount: c?.count ?? 0, chunkSize: c?.length ?? 0, file: IMATRIX_FILE };
}

/** The quant weights of one entry as llama-quantize computes them: sums / count per matrix (1 where the count is 0). */
export function weightsOf(e: ImatrixEntry): Float32Array {
  const ne0 = e.sums.length / e.counts.length;
  const w = new Float32Array(e.sums.length);
  e.counts.forEach((count, j) => {
    const c = Math.fround(count);
    for (let i = 0; i < ne0; i++) w[j * ne0 + i] = c > 0 ? Math.fround(e.sums[j * ne0 + i] / c) : 1;
  });
  return w;
}

/** The keys llama-quantize adds to a file it quantized with an imatrix (tools/quantize/quantize.cpp). */
export function imatrixKvs(m: Imatrix): GgufKv[] {
  const kvs: GgufKv[] = [{ key: 'quantize.imatrix.file', value: str(m.file.slice(0, 127)) }];
  if (m.datasets.length) kvs.push({ key: 'quantize.imatrix.dataset', value: str(m.datasets[0].slice(0, 127)) });
  kvs.push({ key: 'quantize.imatrix.entries_count', value: u32(m.entries.size) });
  if (m.chunkCount > 0) kvs.push({ key: 'quantize.imatrix.chunks_count', value: u32(m.chunkCount) });
  return kvs;
}

/** The imatrix.gguf layout llama-imatrix writes: its four keys, then per name (sorted) sums and counts. */
function imatrixLayout(m: Imatrix): { kvs: GgufKv[]; infos: GgufTensorInfo[]; data: Float32Array[] } {
  const kvs: GgufKv[] = [
    { key: 'general.type', value: str('imatrix') },
    { key: 'imatrix.datasets', value: arr('STRING', m.datasets) },
    { key: 'imatrix.chunk_count', value: u32(m.chunkCount) },
    { key: 'imatrix.chunk_size', value: u32(m.chunkSize) },
  ];
  const infos: GgufTensorInfo[] = [];
  const data: Float32Array[] = [];
  // ggml_n_dims: a trailing 1 is not written ([ne0, 1] is 1-D)
  const dims = (...ne: number[]) => (ne[1] === 1 ? [ne[0]] : ne);
  for (const name of [...m.entries.keys()].sort()) {
    const e = m.entries.get(name)!;
    const nmat = e.counts.length;
    infos.push({ name: name + SUMS, ne: dims(e.sums.length / nmat, nmat), ggmlType: 0, nbytes: e.sums.length * 4 });
    data.push(e.sums);
    infos.push({ name: name + COUNTS, ne: dims(1, nmat), ggmlType: 0, nbytes: nmat * 4 });
    data.push(Float32Array.from(e.counts));
  }
  return { kvs, infos, data };
}

export function imatrixFileBytes(m: Imatrix): number {
  const { kvs, infos } = imatrixLayout(m);
  return layoutGguf(kvs, infos).fileSize;
}

export async function writeImatrix(file: string, m: Imatrix): Promise<void> {
  const { kvs, infos, data } = imatrixLayout(m);
  const w = await GgufFileWriter.open(file, kvs, infos);
  try {
    for (let i = 0; i < infos.length; i++) await w.writeTensor(infos[i].name, new Uint8Array(data[i].buffer, data[i].byteOffset, data[i].byteLength));
    await w.finish();
  } catch (e) {
    await w.abort();
    throw e;
  }
}
