/**
 * The `cuda` target: the unit's IR lowered as an Optimum-style decoder (src/exec/onnx/decoder.ts)
 * into onnx/model.onnx (+ onnx/model.onnx_data), with the files Hugging Face loaders read beside it
 * (config.json, generation_config.json, tokenizer files) and build-engine.sh for TensorRT.
 *
 * Elastic levels (record elastic-prefix/1): one graph per level, onnx/model_<level>.onnx, lowered from
 * the level's narrowed IR over its sliced weights. All graphs then share onnx/model.onnx_data: a level
 * tensor whose bytes equal a prefix of the full model's is a reference to them; the rest is appended.
 * Row-sliced weights (q/k/v, gate/up) are stored [out, in] so their levels are prefixes; column-sliced
 * ones (o, down) [in, out]. The manifest reports the bytes of that shared layout against separate files.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { EMBED, LM_HEAD } from '../../src/core/arch/names.js';
import { archOf } from '../../src/core/arch/registry.js';
import { LlmcError } from '../../src/core/errors.js';
import { levelGraph } from '../../src/core/ir/level.js';
import type { ModelGraph } from '../../src/core/ir/ir.js';
import type { ModelSource } from '../../src/core/checkpoint/source.js';
import { sliceSource } from '../../src/core/pipeline/elastic.js';
import type { EmitContext, EmitResult, FormatRequest, Target, WrittenTensor } from '../../src/core/pipeline/target.js';
import type { CudaInfo } from './info.js';
import type { CompileUnit } from '../../src/core/pipeline/unit.js';
import { CHUNK_SCHEDULE, ELASTIC_LEVELS, findRecord, type Level } from '../../src/core/records/index.js';
import { ensureOutputDir, writeFileAtomic, writeTextFiles } from '../../src/core/util/atomic.js';
import { lowerDecoder, type DecoderFormats, type DecoderGraph, type Layout, type WeightFormat } from '../../src/exec/onnx/decoder.js';
import { ExternalData, externalFor, writeOnnx, type ExternalRef } from '../../src/exec/onnx/external.js';
import { parseJson } from '../../src/core/util/json.js';
import { writeChunkGraphs, type ChunkSetInfo } from './chunks.js';
import { buildScript, engineProfile, type GraphFacts } from './engine-plan.js';
import { GENAI_CONFIG, genaiConfig } from './genai.js';
import { blockOf, DEFAULT_FORMAT, DEVICE_PROFILES, type CudaFormat, type CudaOptions } from './options.js';

export const GRAPH = 'onnx/model.onnx';
export const DATA = 'onnx/model.onnx_data';
export const BUILD_SCRIPT = 'build-engine.sh';
const levelFile = (id: string) => `onnx/model_${id}.onnx`;

/** The weight format of each tensor: --quant, then cuda.lmHead / cuda.embeddings, a pass's choice, --tensor-type overrides. */
export function cudaFormats(unit: CompileUnit, request: FormatRequest, o: CudaOptions, layout?: (name: string) => Layout): DecoderFormats {
  const quant = (request.quant ?? DEFAULT_FORMAT) as CudaFormat;
  const compute = o.compute ?? (quant === 'fp16' ? 'fp16' : 'fp32');
  const spec = unit.source.spec;
  const head = spec.tieEmbeddings ? EMBED : LM_HEAD;
  // MoE routers and the shared expert's 1-row gate stay float, as llama.cpp keeps them.
  const keepFloat = new Set(unit.graph.ops.flatMap((op) => (op.op === 'moe' ? [op.router, ...(op.shared ? [op.shared.gate] : [])] : [])));
  const floatOf = (f: CudaFormat): CudaFormat => (f === 'fp32' || f === 'fp16' ? f : compute);
  const weight = (f: CudaFormat): WeightFormat =>
    f === 'fp32' || f === 'fp16' || f === 'int8' ? { kind: f } : { kind: 'int4', block: blockOf(f), zeroPoints: o.zeroPoints, encoding: o.int4 };
  return {
    compute,
    layout,
    format(name, role) {
      if (role === 'embedding') return weight(o.embeddings ?? (quant === 'fp32' || quant === 'fp16' ? quant : 'int8'));
      let f: CudaFormat = name === head ? (o.lmHead ?? quant) : keepFloat.has(name) ? floatOf(quant) : quant;
      const chosen = unit.annotations.get(name)?.format;
      if (chosen) f = chosen as CudaFormat;
      for (const t of request.tensorTypes) if (t.pattern.test(name)) f = t.type as CudaFormat; // the last match wins
      return weight(f);
    },
  };
}

/** trtexec where build-engine.sh looks for it, or null. */
export async function findTrtexec(): Promise<string | null> {
  const candidates = [process.env.TRTEXEC, ...(process.env.PATH ?? '').split(path.delimiter).filter(Boolean).map((d) => path.join(d, 'trtexec')), '/usr/src/tensorrt/bin/trtexec'];
  for (const c of candidates) {
    if (c && (await fsp.access(c, 1 /* X_OK */).then(() => true, () => false))) return c;
  }
  return null;
}

/** The storage layout that makes a level's tensors prefixes of the full model's: rows [out, in], columns [in, out]. */
function prefixLayout(graph: ModelGraph): (name: string) => Layout {
  const rowSliced = new Set<string>();
  for (const op of graph.ops) {
    if (op.op === 'linear' && op.elastic?.rows) rowSliced.add(op.weight);
    if (op.op === 'moe') for (const m of op.experts) rowSliced.add(m.gate).add(m.up);
  }
  return (name) => (rowSliced.has(name) ? 'out-in' : 'in-out');
}

interface WrittenLevel {
  id: string;
  file: string;
  nominal: number;
  paramFrac: number;
  kvHeads: number[];
  /** Bytes of the tensors this level refers to in the shared data file, and of those it added. */
  sharedBytes: number;
  ownBytes: number;
  graphBytes: number;
}

const sameBytes = (a: Uint8Array, b: Uint8Array) => a.length === b.length && Buffer.from(a.buffer, a.byteOffset, a.length).equals(Buffer.from(b.buffer, b.byteOffset, b.length));

function graphFacts(file: string, g: DecoderGraph, compute: 'fp32' | 'fp16'): GraphFacts {
  const ops = (g.graph.node ?? []).map((n) => n.opType);
  const int8 = g.tensors.some((t) => t.name.endsWith('.int8'));
  const dq = int8 || g.tensors.some((t) => t.name.endsWith('.int4'));
  return { file, opset: g.opset, compute, matMulNBits: ops.includes('MatMulNBits'), int8, dequantized: dq, io: g.io };
}

export const cudaTarget: Target<CudaOptions, CudaInfo> = {
  async emit(unit: CompileUnit, ctx: EmitContext<CudaOptions>): Promise<EmitResult<CudaInfo>> {
    const o = ctx.options;
    const { source } = unit;
    const trtexec = o.build ? await findTrtexec() : null;
    if (o.build && !trtexec) {
      throw new LlmcError('cuda.build=true needs TensorRT\'s trtexec on PATH (or TRTEXEC=/path/to/trtexec; on Jetson /usr/src/tensorrt/bin/trtexec): install TensorRT, or compile without cuda.build and run build-engine.sh where TensorRT is');
    }
    const levels = (findRecord(unit.records, ELASTIC_LEVELS)?.levels ?? []).filter((lv) => !isFull(lv, source));
    // Chunk graphs (record chunk-schedule/1) refer to model.onnx's weights in the shared data file.
    const chunkRec = findRecord(unit.records, CHUNK_SCHEDULE);
    const formats = cudaFormats(unit, ctx.formats, o, levels.length ? prefixLayout(unit.graph) : undefined);
    const full = lowerDecoder(source, unit.graph, formats);

    // Inline (one file) unless it would not fit protobuf's 2 GiB, or external data was asked for; levels and chunk graphs share one data file.
    const external = externalFor(full, levels.length > 0 || chunkRec !== null ? true : o.externalData, 'cuda.externalData', source.description);

    await ensureOutputDir(path.join(ctx.outDir, 'onnx'));
    const files = [GRAPH];
    const data = external ? await ExternalData.create(path.join(ctx.outDir, DATA), path.basename(DATA), full.tensors.reduce((a, t) => a + t.byteLength, 0)) : null;
    const written: WrittenLevel[] = [];
    let chunkInfo: ChunkSetInfo[] | null = null;
    let fullBytes: { graph: number; data: number };
    const facts: GraphFacts[] = [graphFacts(GRAPH, full, formats.compute)];
    try {
      ctx.progress.start('cuda: writing onnx/model.onnx', full.tensors.length);
      const minExternalBytes = levels.length || chunkRec ? 0 : undefined;
      const w = await writeOnnx(path.join(ctx.outDir, GRAPH), full, data, { minExternalBytes, onTensor: () => ctx.progress.tick() });
      ctx.progress.done();
      fullBytes = { graph: w.graphBytes, data: w.appendedBytes };
      const fullRefs = new Map([...w.refs].map(([name, ref]) => [name, { ref, t: full.tensors.find((t) => t.name === name)! }]));
      for (const lv of levels) {
        const file = levelFile(lv.id);
        const g = lowerDecoder(sliceSource(source, lv.layers, `level ${lv.id}`), levelGraph(unit.graph, lv.layers), formats);
        let sharedBytes = 0;
        // A level tensor refers to the full model's bytes when they start with its own.
        const reuse = async (t: { name: string; dataType: number }, bytes: Uint8Array): Promise<ExternalRef | null> => {
          const f = fullRefs.get(t.name);
          if (!f || f.t.dataType !== t.dataType || bytes.length > f.ref.length) return null;
          const ref = { offset: f.ref.offset, length: bytes.length };
          if (!sameBytes(await data!.read(ref), bytes)) return null;
          sharedBytes += bytes.length;
          return ref;
        };
        ctx.progress.start(`cuda: writing ${file}`, g.tensors.length);
        const lw = await writeOnnx(path.join(ctx.outDir, file), g, data, { minExternalBytes: 0, reuse, onTensor: () => ctx.progress.tick() });
        ctx.progress.done();
        files.push(file);
        facts.push(graphFacts(file, g, formats.compute));
        written.push({ id: lv.id, file, nominal: lv.nominal, paramFrac: lv.paramFrac, kvHeads: g.io.kvHeads, sharedBytes, ownBytes: lw.appendedBytes, graphBytes: lw.graphBytes });
      }
      if (chunkRec) {
        const refs = new Map([...fullRefs].map(([name, f]) => [name, { ref: f.ref, dataType: f.t.dataType }]));
        const c = await writeChunkGraphs(unit, chunkRec, formats, ctx.outDir, data!, refs, ctx.progress);
        files.push(...c.files);
        chunkInfo = c.info;
      }
      if (data) {
        await data.commit();
        files.push(DATA);
      }
    } catch (err) {
      await data?.abort();
      throw err;
    }

    // transformers.js fetches `<graph>_data` for the graphs listed here: only model.onnx has its own name on the
    // data file (level graphs refer to it by location, which onnxruntime resolves when given the graph's path).
    files.push(...(await writeHfFiles(ctx.outDir, source, external ? [path.basename(GRAPH)] : [])));
    // onnxruntime-genai's config (its model types have no MoE that llmc writes: none for those).
    const genai = genaiConfig(source.spec, full.io, GRAPH, parseGeneration(source.assets.generationConfig));
    if (genai) {
      await writeFileAtomic(path.join(ctx.outDir, GENAI_CONFIG), JSON.stringify(genai, null, 4) + '\n');
      files.push(GENAI_CONFIG);
    } else ctx.note(`no ${GENAI_CONFIG}: onnxruntime-genai has no ${source.spec.modelType} model type`);
    // The graph is onnxruntime's and TensorRT's as much as transformers.js': only the last needs the model type.
    if (archOf(source.spec).transformersJs === false) {
      ctx.note(`transformers.js has no ${source.spec.modelType} model type: onnxruntime (llmc run) and TensorRT (build-engine.sh) read this directory, transformers.js does not load it`);
    }
    const script = path.join(ctx.outDir, BUILD_SCRIPT);
    await writeFileAtomic(script, buildScript(facts, o.maxContext));
    await fsp.chmod(script, 0o755);
    files.push(BUILD_SCRIPT);

    const profiles = Object.fromEntries(
      DEVICE_PROFILES.map((d) => {
        const p = engineProfile(d, full.io, o.maxContext);
        return [d, { note: p.note, workspaceMiB: p.workspaceMiB, dla: p.dla, prefill: p.profiles[0].dims, decode: p.profiles[1].dims, tensorrt8: p.single.dims }];
      }),
    );
    const targetInfo: CudaInfo = {
      format: 'onnx-decoder',
      layout: 'optimum',
      graph: GRAPH,
      externalData: external ? DATA : null,
      opset: full.opset,
      compute: formats.compute,
      quant: ctx.formats.quant ?? DEFAULT_FORMAT,
      int4: { encoding: o.int4, zeroPoints: o.zeroPoints },
      io: { kvHeads: full.io.kvHeads, headDim: full.io.headDim, vocab: full.io.vocab, cacheDtype: full.io.cacheDtype, maxPositions: full.io.maxPositions },
      formats: full.formats,
      bytes: { graph: fullBytes.graph, data: fullBytes.data },
      profiles,
    };
    if (written.length) {
      const own = (fullBytes.graph + fullBytes.data) + written.reduce((a, l) => a + l.graphBytes + l.ownBytes, 0);
      const separate = (fullBytes.graph + fullBytes.data) + written.reduce((a, l) => a + l.graphBytes + l.sharedBytes + l.ownBytes, 0);
      targetInfo.levels = written;
      targetInfo.levelLayouts = { shared: own, separate, saved: separate - own };
      ctx.note(`cuda: ${written.length} level graphs share ${DATA}: ${(own / 1e6).toFixed(2)} MB, ${(separate / 1e6).toFixed(2)} MB as separate files`);
    }
    if (chunkInfo) {
      targetInfo.chunks = chunkInfo;
      for (const s of chunkInfo) {
        const row = s.memory.rows.find((r) => r.N === 4) ?? s.memory.rows.at(-1)!;
        ctx.note(`cuda: chunk graphs for c = ${s.c} share their weights: at ${row.N} chunks ${(row.shared / 1e6).toFixed(2)} MB against ${(row.naive / 1e6).toFixed(2)} MB as one graph per chunk (${(100 * row.saved).toFixed(1)}% saved)`);
      }
    }
    if (trtexec) files.push(await buildEngine(ctx.outDir, o.profile, trtexec));
    return { files, targetInfo, tensors: writtenTensors(full) };
  },
};

/** A level that keeps every unit is the full model (onnx/model.onnx). */
function isFull(lv: Level, source: ModelSource): boolean {
  const s = source.spec;
  return lv.layers.every((L) => L.kvGroups === s.numKvHeads && L.qHeadsPerGroup * L.kvGroups === s.numHeads && L.ffn === (s.moe ? s.moe.expertIntermediateSize : s.intermediateSize));
}

/** generation_config.json's fields, or none when the source has no (readable) one. */
function parseGeneration(text: string | undefined): Record<string, unknown> {
  try {
    // Bounded (a deep value is a missing config here, as unreadable text is).
    const v = text ? parseJson(text, undefined) : {};
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/**
 * config.json (with transformers.js's external-data hint), generation_config.json (carried, or from
 * config.json's token ids as Optimum writes it) and the tokenizer files the source has.
 */
async function writeHfFiles(outDir: string, source: ModelSource, externalGraphs: string[]): Promise<string[]> {
  const config: Record<string, unknown> = { ...source.assets.config };
  if (externalGraphs.length) {
    config['transformers.js_config'] = { ...(config['transformers.js_config'] as object | undefined), use_external_data_format: Object.fromEntries(externalGraphs.map((g) => [g, 1])) };
  }
  const generation =
    source.assets.generationConfig ??
    JSON.stringify(
      Object.fromEntries(Object.entries({ _from_model_config: true, bos_token_id: config.bos_token_id, eos_token_id: config.eos_token_id, pad_token_id: config.pad_token_id }).filter(([, v]) => v !== undefined)),
      null,
      2,
    ) + '\n';
  return writeTextFiles(outDir, [
    ['config.json', JSON.stringify(config, null, 2) + '\n'],
    ['generation_config.json', generation],
    ['tokenizer.json', source.assets.tokenizer],
    ['tokenizer_config.json', source.assets.tokenizerConfig],
    ['chat_template.jinja', source.assets.chatTemplate],
  ]);
}

/** `--opt cuda.build=true`: build-engine.sh through execa; its one-line message on failure. */
async function buildEngine(outDir: string, profile: string, trtexec: string): Promise<string> {
  const { execa } = await import('execa');
  const r = await execa('bash', [BUILD_SCRIPT, profile], { cwd: outDir, reject: false, env: { TRTEXEC: trtexec } });
  if (r.exitCode !== 0) {
    const why = String(r.stderr).trim().split('\n').filter(Boolean).at(-1) ?? `exit code ${r.exitCode}`;
    throw new LlmcError(`engine build failed: ${why}`, path.join(outDir, BUILD_SCRIPT));
  }
  return String(r.stdout).trim().split('\n').at(-1)!;
}

/**
 * The full graph's weights as the compile summary and the report count them: each initializer
 * belongs to the Hugging Face tensor whose name it starts with (`….weight^T.int8`, `….int8_scales`),
 * in that tensor's format; what holds none (rotary tables, small constants) is counted apart.
 */
function writtenTensors(g: DecoderGraph): WrittenTensor[] {
  const names = Object.keys(g.formats).sort((a, b) => b.length - a.length);
  const byName = new Map<string, WrittenTensor>();
  for (const t of g.tensors) {
    const hf = t.source ?? names.find((n) => t.name === n || t.name.startsWith(`${n}.`) || t.name.startsWith(`${n}^`));
    const key = hf ?? t.name;
    const w = byName.get(key) ?? { name: key, sources: hf ? [hf] : [], format: (hf && g.formats[hf]) || DTYPE_LABEL[t.dataType] || `onnx type ${t.dataType}`, bytes: 0, ...(hf ? {} : { group: 'constants' }) };
    w.bytes += t.byteLength;
    byName.set(key, w);
  }
  return [...byName.values()];
}

const DTYPE_LABEL: Record<number, string> = { 1: 'fp32', 10: 'fp16', 16: 'bf16', 3: 'int8', 2: 'uint8', 7: 'int64', 6: 'int32', 9: 'bool' };
