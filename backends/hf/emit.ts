/**
 * The `hf` target: a loadable Hugging Face checkpoint directory — model.safetensors (the
 * transformed weights, streamed one tensor at a time), config.json and the tokenizer / generation
 * files carried from the source. `llmc run` and every other target accept it as input. After the
 * reorder pass, each level below full is a checkpoint of its own under levels/<id>/ (sliced config,
 * recovery adapters merged), so transformers loads every level.
 * `--quant` picks the float dtype (F32 | F16 | BF16); default: each tensor's source dtype.
 */
import path from 'node:path';
import { archOf, type ArchEntry } from '../../src/core/arch/registry.js';
import type { FusedTensor } from '../../src/core/arch/family.js';
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import { DTYPE_BYTES, fromF32, numel, safetensorsLayout, writeSafetensors, type FloatDType } from '../../src/core/checkpoint/safetensors.js';
import { ensureOutputDir, writeFileAtomic } from '../../src/core/util/atomic.js';
import { ELASTIC_LEVELS, findRecord } from '../../src/core/records/index.js';
import { LlmcError } from '../../src/core/errors.js';
import { mergeAdapters, sliceSource, uniformWidth } from '../../src/core/pipeline/elastic.js';
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
function configText(source: ModelSource, forced: FloatDType | undefined): string {
  const config = { ...source.assets.config };
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

/** One checkpoint directory's files (relative to it): weights, config.json, the carried tokenizer files. */
function checkpointPlan(source: ModelSource, unit: CompileUnit, formats: EmitContext['formats']) {
  const { forced, dtypeOf } = dtypes(formats);
  const tensors = hfTensors(source).map((t) => ({ name: t.name, dtype: dtypeOf(t.dtype), shape: t.shape, sources: t.sources }));
  const { fileSize } = safetensorsLayout(tensors);
  return {
    tensors,
    files: [
      { path: WEIGHTS_FILE, bytes: fileSize },
      { path: 'config.json', bytes: Buffer.byteLength(configText(source, forced)) },
      ...carried(unit).map(([f, text]) => ({ path: f, bytes: Buffer.byteLength(text) })),
    ],
  };
}

/** Write one checkpoint directory (`dir` relative to the artifact, '' for its root); its files, relative to the artifact. */
async function writeCheckpoint(source: ModelSource, unit: CompileUnit, ctx: EmitContext, dir: string): Promise<string[]> {
  const { forced, dtypeOf } = dtypes(ctx.formats);
  const tensors = hfTensors(source);
  const at = path.join(ctx.outDir, dir);
  if (dir) await ensureOutputDir(at);
  ctx.progress.start(`hf: writing ${dir ? `${dir}/` : ''}${WEIGHTS_FILE}`, tensors.length);
  await writeSafetensors(
    path.join(at, WEIGHTS_FILE),
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
  const rel = (f: string) => (dir ? `${dir}/${f}` : f);
  const files = [rel(WEIGHTS_FILE), rel('config.json')];
  await writeFileAtomic(path.join(at, 'config.json'), configText(source, forced));
  for (const [name, text] of carried(unit)) {
    await writeFileAtomic(path.join(at, name), text);
    files.push(rel(name));
  }
  return files;
}

/**
 * Each elastic level below full as its own checkpoint: the level's slice of the reordered weights,
 * its recovery adapters merged (W + scale·B·A), with a config.json of its widths (one head count and
 * FFN width for all layers: transformers' configs have no per-layer widths, so the descriptor asks the
 * reorder pass for uniform widths and a non-uniform level is refused here in one line).
 */
function levelSources(unit: CompileUnit): { id: string; dir: string; source: ModelSource }[] {
  const record = findRecord(unit.records, ELASTIC_LEVELS);
  if (!record) return [];
  return record.levels
    .filter((lv) => lv.paramFrac < 1)
    .map((lv) => {
      if (!uniformWidth(lv.layers)) throw new LlmcError(`level ${lv.id} has per-layer widths; a transformers config has one head count and FFN width for all layers (compile with --opt reorder.anchors=0)`);
      return { id: lv.id, dir: levelDir(lv.id), source: mergeAdapters(sliceSource(unit.source, lv.layers, `level ${lv.id}`), unit.annotations, lv.id) };
    });
}

export const hfTarget: Target<unknown, HfInfo> = {
  async plan(unit, ctx) {
    refuseGraphEdits(unit, 'hf');
    const main = checkpointPlan(unit.source, unit, ctx.formats);
    const files = [...main.files];
    for (const lv of levelSources(unit)) files.push(...checkpointPlan(lv.source, unit, ctx.formats).files.map((f) => ({ ...f, path: `${lv.dir}/${f.path}` })));
    return {
      files,
      tensors: main.tensors.map((t) => ({ name: t.name, sources: t.sources, format: t.dtype, bytes: numel(t.shape) * DTYPE_BYTES[t.dtype] })),
      notes: [],
    };
  },

  async emit(unit: CompileUnit, ctx: EmitContext): Promise<EmitResult<HfInfo>> {
    refuseGraphEdits(unit, 'hf');
    const { forced, dtypeOf } = dtypes(ctx.formats);
    const levels = levelSources(unit);
    const files = await writeCheckpoint(unit.source, unit, ctx, '');
    for (const lv of levels) files.push(...(await writeCheckpoint(lv.source, unit, ctx, lv.dir)));
    const tensors = hfTensors(unit.source);
    return {
      files,
      targetInfo: { weights: WEIGHTS_FILE, dtype: forced ?? 'source', ...(levels.length ? { levels: levels.map((l) => ({ id: l.id, dir: l.dir })) } : {}) },
      tensors: tensors.map((t) => ({ name: t.name, sources: t.sources, format: dtypeOf(t.dtype), bytes: numel(t.shape) * DTYPE_BYTES[dtypeOf(t.dtype)] })),
    };
  },
};

/** Where a level's checkpoint goes, relative to the artifact. */
export const levelDir = (level: string) => `levels/${level}`;
