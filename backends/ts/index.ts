/**
 * The `ts` target: weights.bin (every tensor, 64-byte aligned, in F32 / F16 / ggml blocks) plus a tensor
 * table in the manifest's targetInfo, for the TS runtime in src/exec/runtime. Format: docs/ts-artifact.md.
 * Streams one tensor at a time; quantizes with src/core/quant (so Q8_0 bytes equal the GGUF target's).
 */
import path from 'node:path';
import { fromF32 } from '../../src/core/checkpoint/safetensors.js';
import { UsageError } from '../../src/core/errors.js';
import { quantize } from '../../src/core/quant/quantize.js';
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
import type { Backend, BackendContext, BackendResult } from '../types.js';

const isFormat = (s: string): s is WeightFormat => (WEIGHT_FORMATS as readonly string[]).includes(s);

function parseFormat(s: string, what: string): WeightFormat {
  const t = s.toUpperCase();
  if (!isFormat(t)) throw new UsageError(`${what}: the ts target supports ${WEIGHT_FORMATS.join(', ')}, got "${s}"`);
  return t;
}

/** Tensors kept in F32 whatever --quant says: vectors (norms, biases) and the tiny routing gates. */
function keepF32(name: string, shape: readonly number[]): boolean {
  return shape.length < 2 || /\.(block_sparse_moe|mlp)\.(gate|shared_expert_gate)\.weight$/.test(name);
}

/** The format a tensor is written in: --quant, --tensor-type overrides, then the row-length fallback. */
export function chooseFormat(
  name: string,
  shape: readonly number[],
  quant: WeightFormat,
  overrides: { pattern: RegExp; type: string }[],
): { format: WeightFormat; note?: string } {
  if (keepF32(name, shape)) return { format: 'F32' };
  let want = quant;
  for (const o of overrides) if (o.pattern.test(name)) want = parseFormat(o.type, `--tensor-type ${o.pattern.source}`);
  const rowLength = shape[shape.length - 1];
  const fb = fallbackType(want as QuantType, rowLength);
  if (fb === want) return { format: want };
  if (!isFormat(fb)) throw new UsageError(`${name}: ${want} falls back to ${fb} for rows of ${rowLength}, which the TS runtime cannot run`);
  return { format: fb, note: `${name}: rows of ${rowLength} are not whole ${want} blocks; wrote ${fb}` };
}

function encode(format: WeightFormat, data: Float32Array, rowLength: number): Uint8Array {
  if (format === 'F32' || format === 'F16') return fromF32(data, format);
  return quantize(format as QuantType, data, rowLength);
}

export const tsBackend: Backend = {
  name: 'ts',
  description: "llmc's tiny TypeScript runtime (weights.bin + tensor table; F32, F16, Q8_0, Q4_0, Q4_K; Q5_0 as Q4_K's fallback)",
  async emit(ctx: BackendContext): Promise<BackendResult> {
    const quant = parseFormat(ctx.options.quant ?? 'F32', '--quant');
    const overrides = ctx.options.tensorTypes ?? [];
    const { source } = ctx;
    // Decide every format first: a bad --tensor-type fails before anything is written.
    const plan = source.tensors.map((t) => ({ meta: t, ...chooseFormat(t.name, t.shape, quant, overrides) }));
    const fallbacks = plan.filter((p) => p.note);
    if (fallbacks.length) {
      const kinds = [...new Set(fallbacks.map((p) => p.format))].join('/');
      ctx.note(`${fallbacks.length} tensor(s) have rows that are not whole ${quant} blocks and were written as ${kinds} (e.g. ${fallbacks[0].note})`);
    }

    const out = await AtomicFile.open(path.join(ctx.outDir, WEIGHTS_FILE));
    const tensors: TensorEntry[] = [];
    ctx.progress.start(`ts ${quant}`, plan.length);
    try {
      for (const p of plan) {
        const { name, shape } = p.meta;
        const data = await source.readF32(name);
        const bytes = encode(p.format, data, shape[shape.length - 1]);
        if (bytes.length !== formatTensorBytes(p.format, shape)) throw new Error(`internal: ${name} encoded to ${bytes.length} bytes`);
        const offset = out.bytesWritten;
        await out.write(bytes);
        const pad = alignUp(out.bytesWritten) - out.bytesWritten;
        if (pad) await out.write(new Uint8Array(pad));
        tensors.push({ name, format: p.format, shape: [...shape], offset, bytes: bytes.length });
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
    const assets = source.assets;
    if (assets.tokenizer !== undefined) {
      await writeFileAtomic(path.join(ctx.outDir, 'tokenizer.json'), assets.tokenizer);
      files.push('tokenizer.json');
    }
    if (assets.tokenizerConfig !== undefined) {
      await writeFileAtomic(path.join(ctx.outDir, 'tokenizer_config.json'), assets.tokenizerConfig);
      files.push('tokenizer_config.json');
    }
    const targetInfo: TsTargetInfo = {
      format: TS_FORMAT,
      version: TS_FORMAT_VERSION,
      weights: WEIGHTS_FILE,
      alignment: TENSOR_ALIGNMENT,
      quant,
      tensors,
    };
    return { files, targetInfo: targetInfo as unknown as Record<string, unknown> };
  },
};
