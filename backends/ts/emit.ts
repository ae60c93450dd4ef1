/**
 * The `ts` target: weights.bin (every tensor, 64-byte aligned, in F32 / F16 / ggml blocks) plus a tensor
 * table in the manifest's targetInfo, for the TS runtime in src/exec/runtime. Format: docs/ts-artifact.md.
 * Streams chunks of whole rows through the shared reader and encoder (src/core/checkpoint/stream.ts,
 * encode.ts: raw bf16 / f16 bits straight to F16 / Q8_0 / F32, src/core/quant otherwise), so memory
 * follows the chunk, not the largest tensor, and the bytes equal the GGUF target's for the same type.
 */
import path from 'node:path';
import { fromF32 } from '../../src/core/checkpoint/safetensors.js';
import { LlmcError, UsageError } from '../../src/core/errors.js';
import { ELASTIC_LEVELS, findRecord } from '../../src/core/records/index.js';
import { fallbackType, type QuantType } from '../../src/core/quant/types.js';
import {
  adapterTensorNames,
  alignUp,
  formatTensorBytes,
  TENSOR_ALIGNMENT,
  TS_FORMAT,
  TS_FORMAT_VERSION,
  WEIGHT_FORMATS,
  WEIGHTS_FILE,
  type TensorEntry,
  type TsLevelAdapters,
  type TsTargetInfo,
  type WeightFormat,
} from '../../src/exec/runtime/format.js';
import { AtomicFile, writeFileAtomic } from '../../src/core/util/atomic.js';
import { tensorRoles, type TensorRole } from '../../src/core/arch/names.js';
import { unmatchedPatterns, type EmitContext, type EmitResult, type Target } from '../../src/core/pipeline/target.js';
import type { WrittenTensor } from '../../src/core/pipeline/summary.js';
import type { CompileUnit } from '../../src/core/pipeline/unit.js';
import { ChunkBuffers, tensorChunks, type RawDtype } from '../../src/core/checkpoint/stream.js';
import { ChunkEncoder } from '../../src/core/quant/encode.js';
import { encodesBf16 } from '../../src/core/quant/bf16.js';

/** Values per streamed chunk (16 MB of f32). */
const CHUNK_ELEMENTS = 1 << 22;

/** The ts target's default --quant. */
export const TS_DEFAULT_FORMAT: WeightFormat = 'F32';

/** Tensors kept in F32 whatever --quant says: vectors (norms, biases) and the tiny routing gates. */
function keepF32(shape: readonly number[], role: TensorRole | undefined): boolean {
  return shape.length < 2 || role === 'router' || role === 'shared_expert_gate';
}

/**
 * The format a tensor is written in: --quant, then a format a pass chose for it, then --tensor-type
 * overrides (the last match wins), then the row-length fallback. Formats arrive validated (the pass
 * manager checks --quant and --tensor-type against the descriptor's table).
 */
export function chooseFormat(
  name: string,
  shape: readonly number[],
  role: TensorRole | undefined,
  quant: WeightFormat,
  passFormat: string | undefined,
  overrides: readonly { pattern: RegExp; type: string }[],
): { format: WeightFormat; note?: string } {
  if (keepF32(shape, role)) return { format: 'F32' };
  let want = (passFormat ?? quant) as WeightFormat;
  for (const o of overrides) if (o.pattern.test(name)) want = o.type as WeightFormat;
  if (!WEIGHT_FORMATS.includes(want)) throw new UsageError(`${name}: the ts target cannot write ${want} (it writes ${WEIGHT_FORMATS.join(', ')})`);
  const rowLength = shape[shape.length - 1];
  const fb = fallbackType(want as QuantType, rowLength);
  if (fb === want) return { format: want };
  if (!WEIGHT_FORMATS.includes(fb as WeightFormat)) throw new UsageError(`${name}: ${want} falls back to ${fb} for rows of ${rowLength}, which the TS runtime cannot run`);
  return { format: fb as WeightFormat, note: `${name}: rows of ${rowLength} are not whole ${want} blocks; wrote ${fb}` };
}

/** Every tensor's format (decided before anything is written: a tensor that cannot be written fails first), and a note on fallbacks. */
function planFormats(unit: CompileUnit, formats: EmitContext['formats']) {
  const quant = (formats.quant ?? TS_DEFAULT_FORMAT) as WeightFormat;
  const roles = tensorRoles(unit.source.spec);
  unmatchedPatterns(formats.tensorTypes, unit.source.tensors.map((t) => t.name));
  const plan = unit.source.tensors.map((t) => ({
    meta: t,
    ...chooseFormat(t.name, t.shape, roles.get(t.name), quant, unit.annotations.get(t.name)?.format, formats.tensorTypes),
  }));
  const fallbacks = plan.filter((p) => p.note);
  const notes: string[] = [];
  if (fallbacks.length) {
    const kinds = [...new Set(fallbacks.map((p) => p.format))].join('/');
    notes.push(`${fallbacks.length} tensor(s) have rows that are not whole ${quant} blocks and were written as ${kinds} (e.g. ${fallbacks[0].note})`);
  }
  return { quant, plan, notes };
}

/** The files besides weights.bin: the tokenizer's and generation_config.json (`llmc run`'s stop ids), carried as they are. */
const carriedFiles = (unit: CompileUnit): [string, string][] =>
  (
    [
      ['tokenizer.json', unit.source.assets.tokenizer],
      ['tokenizer_config.json', unit.source.assets.tokenizerConfig],
      ['generation_config.json', unit.source.assets.generationConfig],
      ['chat_template.jinja', unit.source.assets.chatTemplate],
    ] as [string, string | undefined][]
  ).filter((f): f is [string, string] => f[1] !== undefined);

/** weights.bin's size: the model's tensors in their formats, then the adapters in F32, each padded to the alignment. */
function weightsFileBytes(plan: ReturnType<typeof planFormats>['plan'], adapters: readonly { shape: readonly number[] }[]): number {
  const tensors = [...plan.map((p) => formatTensorBytes(p.format, p.meta.shape)!), ...adapters.map((t) => formatTensorBytes('F32', t.shape)!)];
  return tensors.reduce((size, bytes) => size + alignUp(bytes), 0);
}

export const tsTarget: Target = {
  async plan(unit, ctx) {
    const { plan, notes } = planFormats(unit, ctx.formats);
    const adapters = levelAdapters(unit).tensors;
    const tensors = plan.map((p) => ({ name: p.meta.name, sources: [p.meta.name], format: p.format, bytes: formatTensorBytes(p.format, p.meta.shape)! }) as WrittenTensor);
    // The levels' recovery adapters, F32 after the model's tensors, as emit writes them.
    for (const t of adapters) tensors.push({ name: t.name, sources: [], format: 'F32', bytes: formatTensorBytes('F32', t.shape)!, group: 'adapters' });
    const files = [{ path: WEIGHTS_FILE, bytes: weightsFileBytes(plan, adapters) }, ...carriedFiles(unit).map(([f, text]) => ({ path: f, bytes: Buffer.byteLength(text) }))];
    return { files, tensors, notes };
  },

  async emit(unit: CompileUnit, ctx: EmitContext): Promise<EmitResult> {
    const { source } = unit;
    const { quant, plan, notes } = planFormats(unit, ctx.formats);
    for (const n of notes) ctx.note(n);

    const adapters = levelAdapters(unit);
    // The size up front lets a big file be hashed as it is written (the manifest then need not read it again).
    const out = await AtomicFile.open(path.join(ctx.outDir, WEIGHTS_FILE), { expectedSize: weightsFileBytes(plan, adapters.tensors) });
    const buffers = new ChunkBuffers();
    const encoder = new ChunkEncoder(buffers);
    const tensors: TensorEntry[] = [];
    // A tensor written from `offset`: its size checked, listed, padded to the alignment.
    const finishTensor = async (name: string, format: WeightFormat, shape: readonly number[], offset: number) => {
      const bytes = out.bytesWritten - offset;
      if (bytes !== formatTensorBytes(format, shape)) throw new Error(`internal: ${name} encoded to ${bytes} bytes`);
      tensors.push({ name, format, shape: [...shape], offset, bytes });
      const pad = alignUp(out.bytesWritten) - out.bytesWritten;
      if (pad) await out.write(new Uint8Array(pad));
    };
    ctx.progress.start(`ts ${quant}`, plan.length);
    try {
      for (const p of plan) {
        const { name, shape } = p.meta;
        const offset = out.bytesWritten;
        const rowLength = shape.length > 1 ? shape[shape.length - 1] : shape[0];
        const type = p.format as QuantType;
        // Raw source bits where the encoder takes them directly (not with --allow-nonfinite: the direct encoders refuse Inf/NaN)
        const raw: RawDtype[] = source.allowNonFinite ? [] : [...(encodesBf16(type, rowLength) ? ['BF16' as const] : []), ...(type === 'F16' ? ['F16' as const] : [])];
        for await (const chunk of tensorChunks(source, { name, shape: [...shape], sources: [name] }, { maxElems: CHUNK_ELEMENTS, raw, buffers })) {
          await out.write(await encoder.encode(type, chunk, rowLength));
        }
        await finishTensor(name, p.format, shape, offset);
        ctx.progress.tick();
      }
      // The levels' recovery adapters, F32, after the model's tensors.
      for (const t of adapters.tensors) {
        const offset = out.bytesWritten;
        await out.write(fromF32(t.data, 'F32'));
        await finishTensor(t.name, 'F32', t.shape, offset);
      }
      await out.commit();
    } catch (err) {
      await out.abort();
      throw err;
    } finally {
      ctx.progress.done();
    }

    const files = [WEIGHTS_FILE];
    for (const [name, text] of carriedFiles(unit)) {
      await writeFileAtomic(path.join(ctx.outDir, name), text);
      files.push(name);
    }
    const adapterNames = new Set(adapters.tensors.map((t) => t.name));
    const targetInfo: TsTargetInfo = {
      format: TS_FORMAT,
      version: TS_FORMAT_VERSION,
      weights: WEIGHTS_FILE,
      alignment: TENSOR_ALIGNMENT,
      quant,
      tensors,
      ...(Object.keys(adapters.table).length ? { adapters: adapters.table } : {}),
    };
    return {
      files,
      targetInfo: targetInfo as unknown as Record<string, unknown>,
      tensors: tensors.map((e) => (adapterNames.has(e.name) ? { name: e.name, sources: [], format: e.format, bytes: e.bytes, group: 'adapters' } : { name: e.name, sources: [e.name], format: e.format, bytes: e.bytes })),
    };
  },
};

/**
 * The unit's per-level adapters (TensorAnnotation.adapters) as tensors and targetInfo.adapters,
 * levels in the elastic record's order, linears in the source's tensor order (deterministic bytes).
 */
function levelAdapters(unit: CompileUnit): { tensors: { name: string; shape: number[]; data: Float32Array }[]; table: Record<string, TsLevelAdapters> } {
  const tensors: { name: string; shape: number[]; data: Float32Array }[] = [];
  const table: Record<string, TsLevelAdapters> = {};
  const levels = findRecord(unit.records, ELASTIC_LEVELS)?.levels ?? [];
  for (const lv of levels) {
    for (const t of unit.source.tensors) {
      const ad = unit.annotations.get(t.name)?.adapters?.[lv.id];
      if (!ad) continue;
      const set = (table[lv.id] ??= { rank: ad.rank, scale: ad.scale, tensors: [] });
      if (set.rank !== ad.rank || set.scale !== ad.scale) throw new LlmcError(`level ${lv.id}: adapters of one level must share rank and scale`);
      const names = adapterTensorNames(lv.id, t.name);
      tensors.push({ name: names.a, shape: [ad.rank, ad.inFeatures], data: ad.a }, { name: names.b, shape: [ad.outFeatures, ad.rank], data: ad.b });
      set.tensors.push({ weight: t.name, ...names });
    }
  }
  return { tensors, table };
}
