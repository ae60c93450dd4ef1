/**
 * The `hf` target: a loadable Hugging Face checkpoint directory — model.safetensors (the
 * transformed weights, streamed one tensor at a time), config.json and the tokenizer / generation
 * files carried from the source. `llmc run` and every other target accept it as input.
 * `--quant` picks the float dtype (F32 | F16 | BF16); default: each tensor's source dtype.
 */
import path from 'node:path';
import { archOf, type ArchEntry } from '../../src/core/arch/registry.js';
import type { FusedTensor } from '../../src/core/arch/family.js';
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import { DTYPE_BYTES, fromF32, numel, safetensorsLayout, writeSafetensors, type FloatDType } from '../../src/core/checkpoint/safetensors.js';
import { ensureOutputDir, writeFileAtomic } from '../../src/core/util/atomic.js';
import { ELASTIC_LEVELS, findRecord } from '../../src/core/records/index.js';
import type { EmitContext, EmitResult, Target } from '../../src/core/pipeline/target.js';
import { refuseGraphEdits, type CompileUnit } from '../../src/core/pipeline/unit.js';
import type { HfInfo } from './info.js';

export const HF_FORMATS: readonly FloatDType[] = ['F32', 'F16', 'BF16'];
const TORCH_DTYPE: Record<FloatDType, string> = { F32: 'float32', F16: 'float16', BF16: 'bfloat16' };

export const WEIGHTS_FILE = 'model.safetensors';

/** The dtype each tensor is written in: --quant (validated: one of HF_FORMATS), else its source dtype. */
function dtypes(formats: EmitContext['formats']) {
  const forced = formats.quant as FloatDType | undefined;
  return { forced, dtypeOf: (d: string): FloatDType => forced ?? ((HF_FORMATS as readonly string[]).includes(d) ? (d as FloatDType) : 'F32') };
}

/** config.json as written (its dtype key follows --quant: `dtype` as transformers >= 5 writes it, else the older `torch_dtype`). */
function configText(unit: CompileUnit, forced: FloatDType | undefined): string {
  const config = { ...unit.source.assets.config };
  if (forced) config['dtype' in config ? 'dtype' : 'torch_dtype'] = TORCH_DTYPE[forced];
  return JSON.stringify(config, null, 2) + '\n';
}

const carried = (unit: CompileUnit): [string, string][] =>
  (
    [
      ['tokenizer.json', unit.source.assets.tokenizer],
      ['tokenizer_config.json', unit.source.assets.tokenizerConfig],
      ['generation_config.json', unit.source.assets.generationConfig],
      ['chat_template.jinja', unit.source.assets.chatTemplate],
    ] as [string, string | undefined][]
  ).filter((f): f is [string, string] => f[1] !== undefined);

/**
 * The checkpoint's tensors as transformers names them: parts llmc split at ingestion (phi3's q/k/v and
 * gate/up) fused back, rows in order, so the family's class loads the directory.
 */
function hfTensors(source: ModelSource): { name: string; dtype: string; shape: number[]; sources: string[] }[] {
  const family: ArchEntry = archOf(source.spec);
  const fusedOf = new Map<string, FusedTensor>();
  for (let l = 0; l < source.spec.numLayers; l++) for (const f of family.fused?.(l, source.spec) ?? []) for (const p of f.parts) fusedOf.set(p.name, f);
  const out: { name: string; dtype: string; shape: number[]; sources: string[] }[] = [];
  const done = new Set<string>();
  for (const t of source.tensors) {
    const f = fusedOf.get(t.name);
    if (!f) {
      out.push({ name: t.name, dtype: t.dtype, shape: t.shape, sources: [t.name] });
      continue;
    }
    if (done.has(f.name)) continue;
    done.add(f.name);
    const parts = f.parts.map((p) => source.meta(p.name)!);
    out.push({ name: f.name, dtype: t.dtype, shape: [parts.reduce((a, p) => a + p.shape[0], 0), t.shape[1]], sources: parts.map((p) => p.name) });
  }
  return out;
}

export const hfTarget: Target<unknown, HfInfo> = {
  async plan(unit, ctx) {
    refuseGraphEdits(unit, 'hf');
    const { forced, dtypeOf } = dtypes(ctx.formats);
    const tensors = hfTensors(unit.source).map((t) => ({ name: t.name, dtype: dtypeOf(t.dtype), shape: t.shape, sources: t.sources }));
    const { fileSize } = safetensorsLayout(tensors);
    return {
      files: [
        { path: WEIGHTS_FILE, bytes: fileSize },
        { path: 'config.json', bytes: Buffer.byteLength(configText(unit, forced)) },
        ...carried(unit).map(([f, text]) => ({ path: f, bytes: Buffer.byteLength(text) })),
      ],
      tensors: tensors.map((t) => ({ name: t.name, sources: t.sources, format: t.dtype, bytes: numel(t.shape) * DTYPE_BYTES[t.dtype] })),
      notes: [],
    };
  },

  async emit(unit: CompileUnit, ctx: EmitContext): Promise<EmitResult<HfInfo>> {
    refuseGraphEdits(unit, 'hf');
    const { source } = unit;
    const { outDir } = ctx;
    const { forced, dtypeOf } = dtypes(ctx.formats);
    const tensors = hfTensors(source);
    ctx.progress.start('hf: writing safetensors', tensors.length);
    await writeSafetensors(
      path.join(outDir, WEIGHTS_FILE),
      tensors.map((t) => ({
        name: t.name,
        dtype: dtypeOf(t.dtype),
        shape: t.shape,
        bytes: async () => {
          const parts = await Promise.all(t.sources.map(async (s) => fromF32(await source.readF32(s), dtypeOf(t.dtype))));
          ctx.progress.tick();
          return parts.length === 1 ? parts[0] : new Uint8Array(Buffer.concat(parts));
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
    const adapters = await writePeftAdapters(unit, outDir);
    files.push(...adapters.files);
    return {
      files,
      targetInfo: { weights: WEIGHTS_FILE, dtype: forced ?? 'source', ...(adapters.levels.length ? { adapters: adapters.levels } : {}) },
      tensors: tensors.map((t) => ({ name: t.name, sources: t.sources, format: dtypeOf(t.dtype), bytes: numel(t.shape) * DTYPE_BYTES[dtypeOf(t.dtype)] })),
    };
  },
};

/** Where a level's PEFT adapter goes, relative to the artifact. */
export const adapterDir = (level: string) => `adapters/${level}`;

/**
 * Each recovered level's adapters as a Hugging Face PEFT LoRA adapter (adapter_config.json +
 * adapter_model.safetensors, keys `base_model.model.<module>.lora_A.weight` / `.lora_B.weight`, as
 * PeftModel.save_pretrained writes them), for THIS checkpoint (the full reordered model): A and B are
 * padded with zeros to the full shapes, so the adapter loads onto it and acts only on the level's units.
 * Running the level itself needs its heads and neurons kept (a slice or masks; widths in the manifest).
 */
async function writePeftAdapters(unit: CompileUnit, outDir: string): Promise<{ files: string[]; levels: { id: string; dir: string }[] }> {
  const record = findRecord(unit.records, ELASTIC_LEVELS);
  const files: string[] = [];
  const levels: { id: string; dir: string }[] = [];
  if (record?.recovery?.method !== 'lora') return { files, levels };
  const recovery = record.recovery;
  for (const lv of record.levels) {
    const tensors: { name: string; dtype: FloatDType; shape: number[]; bytes: () => Promise<Uint8Array> }[] = [];
    let rank = 0;
    let alpha = 0;
    for (const t of unit.source.tensors) {
      const ad = unit.annotations.get(t.name)?.adapters?.[lv.id];
      if (!ad) continue;
      const [out, inF] = t.shape;
      rank = ad.rank;
      alpha = ad.scale * ad.rank;
      const a = new Float32Array(ad.rank * inF);
      for (let k = 0; k < ad.rank; k++) a.set(ad.a.subarray(k * ad.inFeatures, (k + 1) * ad.inFeatures), k * inF);
      const b = new Float32Array(out * ad.rank);
      b.set(ad.b);
      const module = `base_model.model.${t.name.replace(/\.weight$/, '')}`;
      tensors.push(
        { name: `${module}.lora_A.weight`, dtype: 'F32', shape: [ad.rank, inF], bytes: async () => fromF32(a, 'F32') },
        { name: `${module}.lora_B.weight`, dtype: 'F32', shape: [out, ad.rank], bytes: async () => fromF32(b, 'F32') },
      );
    }
    if (!tensors.length) continue;
    const dir = adapterDir(lv.id);
    await ensureOutputDir(path.join(outDir, dir));
    await writeSafetensors(path.join(outDir, dir, 'adapter_model.safetensors'), tensors);
    const config = {
      peft_type: 'LORA',
      task_type: 'CAUSAL_LM',
      base_model_name_or_path: null,
      r: rank,
      lora_alpha: alpha,
      lora_dropout: 0,
      target_modules: recovery.targets,
      bias: 'none',
      fan_in_fan_out: false,
      inference_mode: true,
      init_lora_weights: true,
      use_rslora: false,
      use_dora: false,
      modules_to_save: null,
      layers_to_transform: null,
      layers_pattern: null,
      rank_pattern: {},
      alpha_pattern: {},
      revision: null,
    };
    await writeFileAtomic(path.join(outDir, dir, 'adapter_config.json'), JSON.stringify(config, null, 2) + '\n');
    files.push(`${dir}/adapter_config.json`, `${dir}/adapter_model.safetensors`);
    levels.push({ id: lv.id, dir });
  }
  return { files, levels };
}
