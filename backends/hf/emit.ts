/**
 * The `hf` target: a loadable Hugging Face checkpoint directory — model.safetensors (the
 * transformed weights, streamed one tensor at a time), config.json and the tokenizer / generation
 * files carried from the source. `llmc run` and every other target accept it as input.
 * `--quant` picks the float dtype (F32 | F16 | BF16); default: each tensor's source dtype.
 */
import path from 'node:path';
import { DTYPE_BYTES, fromF32, numel, safetensorsLayout, writeSafetensors, type FloatDType } from '../../src/core/checkpoint/safetensors.js';
import { writeFileAtomic } from '../../src/core/util/atomic.js';
import type { EmitContext, EmitResult, Target } from '../../src/core/pipeline/target.js';
import type { CompileUnit } from '../../src/core/pipeline/unit.js';

export const HF_FORMATS: readonly FloatDType[] = ['F32', 'F16', 'BF16'];
const TORCH_DTYPE: Record<FloatDType, string> = { F32: 'float32', F16: 'float16', BF16: 'bfloat16' };

export const WEIGHTS_FILE = 'model.safetensors';

/** The dtype each tensor is written in: --quant (validated: one of HF_FORMATS), else its source dtype. */
function dtypes(formats: EmitContext['formats']) {
  const forced = formats.quant as FloatDType | undefined;
  return { forced, dtypeOf: (d: string): FloatDType => forced ?? ((HF_FORMATS as readonly string[]).includes(d) ? (d as FloatDType) : 'F32') };
}

/** config.json as written (torch_dtype follows --quant). */
function configText(unit: CompileUnit, forced: FloatDType | undefined): string {
  const config = { ...unit.source.assets.config };
  if (forced) config.torch_dtype = TORCH_DTYPE[forced];
  return JSON.stringify(config, null, 2) + '\n';
}

const carried = (unit: CompileUnit): [string, string][] =>
  (
    [
      ['tokenizer.json', unit.source.assets.tokenizer],
      ['tokenizer_config.json', unit.source.assets.tokenizerConfig],
      ['generation_config.json', unit.source.assets.generationConfig],
    ] as [string, string | undefined][]
  ).filter((f): f is [string, string] => f[1] !== undefined);

export const hfTarget: Target = {
  async plan(unit, ctx) {
    const { forced, dtypeOf } = dtypes(ctx.formats);
    const tensors = unit.source.tensors.map((t) => ({ name: t.name, dtype: dtypeOf(t.dtype), shape: t.shape }));
    const { fileSize } = safetensorsLayout(tensors);
    return {
      files: [
        { path: WEIGHTS_FILE, bytes: fileSize },
        { path: 'config.json', bytes: Buffer.byteLength(configText(unit, forced)) },
        ...carried(unit).map(([f, text]) => ({ path: f, bytes: Buffer.byteLength(text) })),
      ],
      tensors: tensors.map((t) => ({ name: t.name, sources: [t.name], format: t.dtype, bytes: numel(t.shape) * DTYPE_BYTES[t.dtype] })),
      notes: [],
    };
  },

  async emit(unit: CompileUnit, ctx: EmitContext): Promise<EmitResult> {
    const { source } = unit;
    const { outDir } = ctx;
    const { forced, dtypeOf } = dtypes(ctx.formats);
    ctx.progress.start('hf: writing safetensors', source.tensors.length);
    await writeSafetensors(
      path.join(outDir, WEIGHTS_FILE),
      source.tensors.map((t) => ({
        name: t.name,
        dtype: dtypeOf(t.dtype),
        shape: t.shape,
        bytes: async () => {
          const b = fromF32(await source.readF32(t.name), dtypeOf(t.dtype));
          ctx.progress.tick();
          return b;
        },
      })),
    );
    ctx.progress.done();
    const files = [WEIGHTS_FILE, 'config.json'];
    await writeFileAtomic(path.join(outDir, 'config.json'), configText(unit, forced));
    for (const [name, text] of carried(unit)) {
      await writeFileAtomic(path.join(outDir, name), text);
      files.push(name);
    }
    return {
      files,
      targetInfo: { weights: WEIGHTS_FILE, dtype: forced ?? 'source' },
      tensors: source.tensors.map((t) => ({ name: t.name, sources: [t.name], format: dtypeOf(t.dtype), bytes: numel(t.shape) * DTYPE_BYTES[dtypeOf(t.dtype)] })),
    };
  },
};
