/**
 * The `hf` target: a loadable Hugging Face checkpoint directory — model.safetensors (the
 * transformed weights, streamed one tensor at a time), config.json and the tokenizer / generation
 * files carried from the source. `llmc run` and every other target accept it as input.
 * `--quant` picks the float dtype (F32 | F16 | BF16); default: each tensor's source dtype.
 */
import path from 'node:path';
import { DTYPE_BYTES, fromF32, numel, type FloatDType } from '../../src/core/checkpoint/safetensors.js';
import { writeSafetensors } from '../../src/core/checkpoint/safetensors.js';
import { writeFileAtomic } from '../../src/core/util/atomic.js';
import type { EmitContext, EmitResult, Target } from '../../src/core/pipeline/target.js';
import type { CompileUnit } from '../../src/core/pipeline/unit.js';

export const HF_FORMATS: readonly FloatDType[] = ['F32', 'F16', 'BF16'];
const TORCH_DTYPE: Record<FloatDType, string> = { F32: 'float32', F16: 'float16', BF16: 'bfloat16' };

export const WEIGHTS_FILE = 'model.safetensors';

export const hfTarget: Target = {
  async emit(unit: CompileUnit, ctx: EmitContext): Promise<EmitResult> {
    const { source } = unit;
    const { outDir } = ctx;
    // --quant arrives validated (one of HF_FORMATS); absent: each tensor keeps its source dtype.
    const forced = ctx.formats.quant as FloatDType | undefined;
    const dtypeOf = (d: string): FloatDType => forced ?? ((HF_FORMATS as readonly string[]).includes(d) ? (d as FloatDType) : 'F32');
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
    const config = { ...source.assets.config };
    if (forced) config.torch_dtype = TORCH_DTYPE[forced];
    const files = [WEIGHTS_FILE, 'config.json'];
    await writeFileAtomic(path.join(outDir, 'config.json'), JSON.stringify(config, null, 2) + '\n');
    const carried: [string, string | undefined][] = [
      ['tokenizer.json', source.assets.tokenizer],
      ['tokenizer_config.json', source.assets.tokenizerConfig],
      ['generation_config.json', source.assets.generationConfig],
    ];
    for (const [name, text] of carried) {
      if (text === undefined) continue;
      await writeFileAtomic(path.join(outDir, name), text);
      files.push(name);
    }
    return {
      files,
      targetInfo: { weights: WEIGHTS_FILE, dtype: forced ?? 'source' },
      tensors: source.tensors.map((t) => ({ sources: [t.name], format: dtypeOf(t.dtype), bytes: numel(t.shape) * DTYPE_BYTES[dtypeOf(t.dtype)] })),
    };
  },
};
