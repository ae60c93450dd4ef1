/**
 * The `gguf` target: one GGUF v3 file llama.cpp loads as is (DIR/model.gguf). Tensors stream one at
 * a time: read (experts one by one into the stacked buffer) → permute → quantize → write.
 */
import path from 'node:path';
import { LlmcError, UsageError } from '../../src/core/errors.js';
import { numel } from '../../src/core/checkpoint/index.js';
import { QUANT_TYPES, quantizeRowsWeighted, rowBytes, usesImportance, type QuantType } from '../../src/core/quant/index.js';
import { findRecord } from '../../src/core/records/types.js';
import { IMATRIX } from '../../src/core/records/imatrix.js';
import { IMATRIX_FILE, imatrixFileBytes, imatrixFromAnnotations, imatrixKvs, readImatrix, weightsOf, writeImatrix, type Imatrix } from './imatrix.js';
import type { GgufOptions } from './options.js';
import { unmatchedPatterns, type EmitContext, type EmitResult, type FormatRequest, type Target } from '../../src/core/pipeline/target.js';
import { refuseGraphEdits, type CompileUnit, type TensorAnnotation } from '../../src/core/pipeline/unit.js';
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import { simdKernels, encodesBf16 } from '../../src/core/quant/bf16.js';
import { ChunkEncoder } from '../../src/core/quant/encode.js';
import type { GgufInfo } from './info.js';
import { modelMetadata } from './metadata.js';
import { deciFamily, perLayerCounts } from './deci.js';
import { chooseTensorType, DEFAULT_QUANT, parseQuant, parseTensorType, type ModelFacts, type QuantChoice } from './presets.js';
import { neOf, planTensors, type TensorPlan } from './tensors.js';
import type { GgufFamily } from '../../src/core/arch/registry.js';
import { ChunkBuffers, tensorChunks, type RawDtype } from '../../src/core/checkpoint/stream.js';
import { convertTokenizer, placeholderVocab } from './vocab.js';
import { GgufFileWriter, layoutGguf, type GgufTensorInfo } from './writer.js';

export const GGUF_FILE = 'model.gguf';
/** Values per streamed chunk (16 MB of f32): memory follows this, not the largest tensor. */
const CHUNK_ELEMENTS = 1 << 22;
/**
 * Values per chunk where the source's half-float bits are converted directly (2 MB of bf16). Small:
 * fresh memory costs more to touch than to convert on a VM that hands free memory back to its host
 * (docs/lab/speed-history.md, "GGUF from BF16 vs `cp`"), and the chunk stays in cache from read to write and hash.
 */
const RAW_CHUNK_ELEMENTS = 1 << 20;

interface PlannedTensor extends TensorPlan {
  ne: number[];
  type: QuantType;
}

export interface GgufPlan {
  family: GgufFamily;
  choice: QuantChoice;
  tensors: PlannedTensor[];
  notes: string[];
}

/**
 * Decide every tensor's name, dims and type (no tensor data is read): the preset's rules, then a
 * format a pass chose for the tensor, then --tensor-type overrides, then llama.cpp's row-length fallback.
 */
export function planGguf(source: ModelSource, formats: FormatRequest, annotations: ReadonlyMap<string, TensorAnnotation> = new Map(), hasImatrix = false): GgufPlan {
  const choice = parseQuant(formats.quant, DEFAULT_QUANT);
  const overrides = formats.tensorTypes.map((o) => ({ pattern: o.pattern, type: parseTensorType(o.type) }));
  const { family, tensors, ignored } = planTensors(source);
  unmatchedPatterns(formats.tensorTypes, tensors.map((t) => t.name));
  const spec = source.spec;
  const notes: string[] = [];
  if (ignored.length) notes.push(`ignored ${ignored.length} tensor(s) llama.cpp does not use: ${ignored.slice(0, 5).join(', ')}${ignored.length > 5 ? ', ...' : ''}`);
  const facts: ModelFacts = {
    arch: family.arch,
    numLayers: spec.numLayers,
    gqa: spec.numHeads / spec.numKvHeads,
    numExperts: spec.moe?.numExperts ?? 0,
    hasOutput: tensors.some((t) => t.name === 'output.weight'),
    is70B: family.type70B && spec.numLayers === 80 && spec.numHeads !== spec.numKvHeads,
    hasImatrix,
  };
  const fallbacks = new Map<string, string[]>();
  const planned = tensors.map((t) => {
    const ne = neOf(t.shape);
    const d = chooseTensorType(choice, overrides, { name: t.name, ne }, facts, passFormat(t.name, t.sources, annotations));
    if (d.fallbackFrom) {
      const k = `${d.fallbackFrom} -> ${d.type}`;
      fallbacks.set(k, [...(fallbacks.get(k) ?? []), t.name]);
    }
    return { ...t, ne, type: d.type };
  });
  for (const [k, names] of fallbacks) {
    notes.push(`${names.length} tensor(s) have rows not divisible by the block size, fell back ${k} (as llama.cpp does): ${names.slice(0, 4).join(', ')}${names.length > 4 ? ', ...' : ''}`);
  }
  return { family, choice, tensors: planned, notes };
}

/** The format passes chose for a GGUF tensor's sources: one stacked tensor has one type, so its experts must agree. */
function passFormat(name: string, sources: string[], annotations: ReadonlyMap<string, TensorAnnotation>): QuantType | undefined {
  const chosen = new Set(sources.map((s) => annotations.get(s)?.format));
  // Computed tensors (llama3's rope_freqs.weight) have no sources: no pass chose for them.
  if (chosen.size === 0) return undefined;
  if (chosen.size === 1) {
    const f = [...chosen][0];
    return f === undefined ? undefined : parseTensorType(f);
  }
  throw new LlmcError(`${name} stacks ${sources.length} experts in one tensor of one type, but the passes chose ${[...chosen].map((f) => f ?? 'none').join(' / ')} for them`);
}

/**
 * Rows of a tensor with its importance (ggml_quantize_chunk with the imatrix of each row's matrix, as
 * llama_tensor_quantize_impl hands it): `first` is the element offset of x in the tensor.
 */
function quantizeWeighted(t: PlannedTensor, x: Float32Array, first: number, qw: Float32Array): Uint8Array {
  const ne0 = t.ne[0];
  const rowsPerMat = t.ne[1] ?? 1;
  const perRow = rowBytes(t.type, ne0);
  const out = new Uint8Array((x.length / ne0) * perRow);
  let row = first / ne0;
  for (let r = 0; r < x.length / ne0; ) {
    const mat = Math.floor(row / rowsPerMat);
    const n = Math.min(x.length / ne0 - r, (mat + 1) * rowsPerMat - row); // rows up to the matrix's end
    const w = qw.length > ne0 ? qw.subarray(mat * ne0, (mat + 1) * ne0) : qw;
    quantizeRowsWeighted(t.type, x.subarray(r * ne0, (r + n) * ne0), ne0, w, out, r * perRow);
    r += n;
    row += n;
  }
  return out;
}

function modelName(dir: string): string {
  return path.basename(path.resolve(dir)) || 'model';
}

/**
 * The importance matrix to quantize with: a file (`--imatrix FILE`), else the imatrix pass's
 * measurements (written into the artifact as imatrix.gguf), else none.
 */
async function importanceOf(unit: CompileUnit, options: GgufOptions | undefined): Promise<{ imatrix: Imatrix; write: boolean } | null> {
  const record = findRecord(unit.records, IMATRIX);
  if (options?.imatrix) {
    if (record) throw new UsageError('--imatrix FILE and the imatrix pass (--imatrix auto) both give an importance matrix: use one');
    return { imatrix: await readImatrix(options.imatrix), write: false };
  }
  if (!record) return null;
  const { tensors } = planTensors(unit.source);
  const m = imatrixFromAnnotations(tensors.map((t) => ({ ...t, ne: neOf(t.shape) })), unit.annotations, record);
  return m && { imatrix: m, write: true };
}

/** Everything about the file but the tensor data: types, metadata, vocabulary, tensor infos. */
async function prepare(unit: CompileUnit, formats: FormatRequest, options: GgufOptions | undefined) {
  const { source } = unit;
  const importance = await importanceOf(unit, options);
  const plan = planGguf(source, formats, unit.annotations, importance !== null);
  // A level with per-layer widths (gguf-levels) is written as llama.cpp's deci (deci.ts).
  const layers = perLayerCounts(source);
  if (layers) plan.family = deciFamily(source.spec, plan.family, source.description);
  const meta = modelMetadata(source.spec, plan.family, { name: modelName(source.dir), fileType: plan.choice.fileType, layers });
  const tokFile = path.join(source.dir, 'tokenizer.json');
  const vocab = source.assets.tokenizer
    ? convertTokenizer(source.assets.tokenizer, source.assets.tokenizerConfig, source.spec, tokFile)
    : placeholderVocab(source.spec);
  const notes = [...plan.notes, ...meta.notes, ...vocab.notes];
  const kvs = [...meta.kvs, ...vocab.kvs, ...(importance ? imatrixKvs(importance.imatrix) : [])];
  const weighted = new Map<string, Float32Array>();
  if (importance) {
    const { imatrix } = importance;
    const missing: string[] = [];
    for (const t of plan.tensors) {
      if (!usesImportance(t.type)) continue;
      const e = imatrix.entries.get(t.name);
      if (!e) {
        missing.push(t.name);
        continue;
      }
      // llama-quantize: an entry of another size is an error (a stale imatrix of another model)
      const want = t.ne[0] * (t.ne[2] ?? 1);
      if (e.sums.length !== want) throw new LlmcError(`imatrix size ${e.sums.length} is different from tensor size ${want} for ${t.name}: an importance matrix of another model?`, imatrix.file);
      weighted.set(t.name, weightsOf(e));
    }
    const named = (xs: string[]) => `${xs.slice(0, 4).join(', ')}${xs.length > 4 ? ', ...' : ''}`;
    notes.push(`quantized with an importance matrix (${imatrix.entries.size} entries, ${importance.write ? `measured here, written as ${IMATRIX_FILE}` : imatrix.file}): ${weighted.size} tensor(s)`);
    if (missing.length) notes.push(`${missing.length} tensor(s) have no importance entry and are quantized without (as llama-quantize does): ${named(missing)}`);
  }
  const infos: GgufTensorInfo[] = plan.tensors.map((t) => ({
    name: t.name,
    ne: t.ne,
    ggmlType: QUANT_TYPES[t.type].ggmlType,
    nbytes: rowBytes(t.type, t.ne[0]) * (numel(t.shape) / t.ne[0]),
  }));
  return { plan, kvs, vocab, notes, infos, importance, weighted };
}

export const ggufTarget: Target<GgufOptions | undefined, GgufInfo> = {
  async plan(unit, ctx) {
    refuseGraphEdits(unit, 'gguf');
    const { plan, kvs, notes, infos, importance } = await prepare(unit, ctx.formats, ctx.options);
    const fileSize = layoutGguf(kvs, infos).fileSize;
    return {
      files: [{ path: GGUF_FILE, bytes: fileSize }, ...(importance?.write ? [{ path: IMATRIX_FILE, bytes: imatrixFileBytes(importance.imatrix) }] : [])],
      tensors: plan.tensors.map((t, i) => ({ name: t.name, sources: t.sources, format: t.type, bytes: infos[i].nbytes })),
      notes,
    };
  },

  async emit(unit: CompileUnit, ctx: EmitContext<GgufOptions | undefined>): Promise<EmitResult<GgufInfo>> {
    refuseGraphEdits(unit, 'gguf');
    const { source } = unit;
    const { plan, kvs, vocab, notes, infos, importance, weighted } = await prepare(unit, ctx.formats, ctx.options);
    for (const n of notes) ctx.note(n);
    if (importance?.write) await writeImatrix(path.join(ctx.outDir, IMATRIX_FILE), importance.imatrix);
    const finalPath = path.join(ctx.outDir, GGUF_FILE);
    const writer = await GgufFileWriter.open(finalPath, kvs, infos);
    const sourceBytes = plan.tensors.reduce((a, t) => a + numel(t.shape) * 4, 0);
    ctx.progress.start(`gguf ${plan.choice.label}`, sourceBytes);
    // Half-float reads, decodes, permutations and encodings in the kernels' arena: converted in place,
    // and hashed by the writer's worker straight from there. (A compile running alongside in this
    // process gets ordinary buffers: same bytes, with copies.)
    const arena = simdKernels()?.acquireArena() ?? null;
    const buffers = new ChunkBuffers(arena ? (slot, bytes) => arena.buffer(slot, bytes) : undefined);
    const encoder = new ChunkEncoder(buffers);
    // A pipeline over all tensors' chunks. A chunk encoded here is written at once, and the hash
    // worker (AtomicFile) reads it while the next chunk is read and converted: the artifact's hash
    // is the longest stage, so the worker must never wait for the main thread. A chunk encoding on
    // worker threads is written one chunk late, so the next one encodes meanwhile. Chunk i takes
    // the buffers chunk i-2 had (ChunkBuffers, ChunkEncoder alternate), so chunk i-2 must be hashed
    // before chunk i is read: only the last chunk written may still be in the hash worker's hands
    // when the next is read.
    type Encoded = { t: PlannedTensor; bytes: Uint8Array | Promise<Uint8Array>; values: number };
    let current: PlannedTensor | null = null;
    let hashing: Promise<void> | null = null;
    const write = async ({ t, bytes, values }: Encoded) => {
      if (t !== current) {
        if (current) await writer.endTensor();
        await writer.beginTensor(t.name);
        current = t;
      }
      const before = hashing;
      ({ hashed: hashing } = await writer.writeData(await bytes));
      await before; // the worker has this chunk queued while it finishes the one before
      ctx.progress.tick(values * 4);
    };
    try {
      let late: Encoded | null = null;
      for (const t of plan.tensors) {
        const qw = weighted.get(t.name);
        // Raw source bits where an encoder takes them directly: bf16 (several types), f16 (to F16).
        // (Not with --allow-nonfinite: the direct encoders refuse Inf/NaN as they go.)
        const raw: RawDtype[] = source.allowNonFinite || qw ? [] : [...(encodesBf16(t.type, t.ne[0]) ? ['BF16' as const] : []), ...(t.type === 'F16' ? ['F16' as const] : [])];
        const maxElems = raw.length ? RAW_CHUNK_ELEMENTS : CHUNK_ELEMENTS;
        let done = 0;
        for await (const chunk of tensorChunks(source, t, { maxElems, raw, buffers })) {
          const bytes = qw ? quantizeWeighted(t, chunk.data!, done, qw) : encoder.encode(t.type, chunk, t.ne[0]);
          done += chunk.length;
          if (late) await write(late);
          late = null;
          const encoded = { t, bytes, values: chunk.length };
          if (bytes instanceof Uint8Array) await write(encoded);
          else {
            bytes.catch(() => {}); // surfaced when written
            late = encoded;
            await hashing; // the chunk just written (before this one), whose buffers the next one takes
          }
        }
      }
      if (late) await write(late);
      await hashing;
      if (current) await writer.endTensor();
      await writer.finish();
    } catch (err) {
      await writer.abort();
      throw err instanceof LlmcError ? err : new LlmcError(`failed writing GGUF: ${(err as Error).message}`, finalPath);
    } finally {
      arena?.release();
      ctx.progress.done();
    }

    const counts: Record<string, number> = {};
    for (const t of plan.tensors) counts[t.type] = (counts[t.type] ?? 0) + 1;
    return {
      tensors: plan.tensors.map((t, k) => ({ name: t.name, sources: t.sources, format: t.type, bytes: infos[k].nbytes })),
      files: [GGUF_FILE, ...(importance?.write ? [IMATRIX_FILE] : [])],
      targetInfo: {
        format: 'gguf',
        ggufVersion: 3,
        file: GGUF_FILE,
        architecture: plan.family.arch,
        quant: plan.choice.label,
        preset: plan.choice.ftype,
        fileType: plan.choice.fileType,
        tokenizer: { model: vocab.model, pre: vocab.pre ?? null, size: vocab.size, placeholder: !source.assets.tokenizer },
        typeCounts: counts,
        tensors: plan.tensors.map((t) => ({ name: t.name, ne: t.ne, type: t.type, source: t.sources[0] ?? null, ...(t.sources.length > 1 ? { experts: t.sources.length } : {}) })),
        notes,
      },
    };
  },
};
