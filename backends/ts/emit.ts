/**
 * The `ts` target: weights.bin (every tensor, 64-byte aligned, in F32 / F16 / ggml blocks) plus a tensor
 * table in the manifest's targetInfo, for the TS runtime in src/exec/runtime. Format: docs/ts-artifact.md.
 * Streams chunks of whole rows through the gguf target's reader and encoder (backends/gguf/stream.ts,
 * encode.ts: raw bf16 / f16 bits straight to F16 / Q8_0 / F32, src/core/quant otherwise), so memory
 * follows the chunk, not the largest tensor, and the bytes equal the GGUF target's for the same type.
 */
import path from 'node:path';
import { UsageError } from '../../src/core/errors.js';
import { fallbackType, type QuantType } from '../../src/core/quant/types.js';
import {
  alignUp,
  formatTensorBytes,
  TENSOR_ALIGNMENT,
  TS_FORMAT,
  TS_FORMAT_VERSION,
  WEIGHT_FORMATS,
  WEIGHTS_FILE,
  type TensorEntry,
  type TsTargetInfo,
  type WeightFormat,
} from '../../src/exec/runtime/format.js';
import { AtomicFile, writeFileAtomic } from '../../src/core/util/atomic.js';
import { tensorRoles, type TensorRole } from '../../src/core/arch/names.js';
import { unmatchedPatterns, type EmitContext, type EmitResult, type Target } from '../../src/core/pipeline/target.js';
import type { CompileUnit } from '../../src/core/pipeline/unit.js';
import { ChunkBuffers, tensorChunks, type RawDtype } from '../gguf/stream.js';
import { ChunkEncoder } from '../gguf/encode.js';
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

/** The files besides weights.bin: the tokenizer's, carried as they are. */
const carriedFiles = (unit: CompileUnit): [string, string][] =>
  (
    [
      ['tokenizer.json', unit.source.assets.tokenizer],
      ['tokenizer_config.json', unit.source.assets.tokenizerConfig],
    ] as [string, string | undefined][]
  ).filter((f): f is [string, string] => f[1] !== undefined);

export const tsTarget: Target = {
  async plan(unit, ctx) {
    const { plan, notes } = planFormats(unit, ctx.formats);
    let size = 0;
    const tensors = plan.map((p) => {
      const bytes = formatTensorBytes(p.format, p.meta.shape)!;
      size += alignUp(bytes);
      return { name: p.meta.name, sources: [p.meta.name], format: p.format, bytes };
    });
    const files = [{ path: WEIGHTS_FILE, bytes: size }, ...carriedFiles(unit).map(([f, text]) => ({ path: f, bytes: Buffer.byteLength(text) }))];
    return { files, tensors, notes };
  },

  async emit(unit: CompileUnit, ctx: EmitContext): Promise<EmitResult> {
    const { source } = unit;
    const { quant, plan, notes } = planFormats(unit, ctx.formats);
    for (const n of notes) ctx.note(n);

    const out = await AtomicFile.open(path.join(ctx.outDir, WEIGHTS_FILE));
    const buffers = new ChunkBuffers();
    const encoder = new ChunkEncoder(buffers);
    const tensors: TensorEntry[] = [];
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
        const bytes = out.bytesWritten - offset;
        if (bytes !== formatTensorBytes(p.format, shape)) throw new Error(`internal: ${name} encoded to ${bytes} bytes`);
        const pad = alignUp(out.bytesWritten) - out.bytesWritten;
        if (pad) await out.write(new Uint8Array(pad));
        tensors.push({ name, format: p.format, shape: [...shape], offset, bytes });
        ctx.progress.tick();
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
    const targetInfo: TsTargetInfo = {
      format: TS_FORMAT,
      version: TS_FORMAT_VERSION,
      weights: WEIGHTS_FILE,
      alignment: TENSOR_ALIGNMENT,
      quant,
      tensors,
    };
    return {
      files,
      targetInfo: targetInfo as unknown as Record<string, unknown>,
      tensors: tensors.map((e) => ({ name: e.name, sources: [e.name], format: e.format, bytes: e.bytes })),
    };
  },
};
