/**
 * The `qnn` target: the unit's IR, quantized by the outliers pass's record, cut into the NPU
 * deployment's subgraphs (src/core/ir/subgraphs.ts) and written as
 *
 *   npu/<id>.onnx, npu/<id>.encodings.json   static NPU subgraphs (QDQ, [1, a, b, C]) + encodings
 *   cpu/<id>.onnx                            embed, attention (dynamic, KV I/O), CPU-side parts, head
 *   weights/shadow_{hot,cold}.bin, shadow_index.json   shadow-outlier rows (./shadow.ts)
 *   quant/scales.json, quant/outliers.json   per linear scales and decisions; per shadow side its hot channels
 *   graph/subgraphs.json, graph/deps.json    the subgraphs (device, share, I/O, files) and their dependencies
 *   htp_ext.json, htp.json, build-qnn.sh     QNN SDK configs and the context-binary build
 *   config.json (+ tokenizer files)
 *   cpu/l<ℓ>_rope.onnx, cpu/chunk<c>/…       with chunk-partition: the chunk graphs (./chunks.ts)
 *
 * Weights are read and quantized one subgraph at a time; W_q is written to the graph and its shadow rows
 * from the same bytes.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { LlmcError } from '../../src/core/errors.js';
import type { Op } from '../../src/core/ir/ir.js';
import { subgraphDeps, deviceSwitches, type Subgraph } from '../../src/core/ir/subgraphs.js';
import type { EmitContext, EmitPlan, EmitResult, Target, WrittenTensor } from '../../src/core/pipeline/target.js';
import type { QnnInfo } from './info.js';
import type { CompileUnit } from '../../src/core/pipeline/unit.js';
import { quantizeWeight, type QuantizedWeight } from '../../src/core/quant/w8a8.js';
import { CHUNK_SCHEDULE, findRecord, OUTLIER_SCALES, type OutlierScales } from '../../src/core/records/index.js';
import { silentProgress, type Progress } from '../../src/core/util/progress.js';
import { DT_INT8 } from '../../src/exec/onnx/proto.js';
import { externalFor } from '../../src/exec/onnx/external.js';
import { BUILD_SCRIPT, buildScript, CONTEXT_BINARY, qnnGraphName, HTP_CONFIG, HTP_EXT, htpExtJson, htpJson, type ScriptGraph } from './build-plan.js';
import { chunkDeps, recordChunkLength, writeQnnChunkGraphs, type QnnChunked, type QnnChunkInfo } from './chunks.js';
import { encodingsJson } from './encodings.js';
import { fileOp } from './files.js';
import { diskOutput, plannedOutput, type Output } from './output.js';
import { lowerAttention, lowerEmbed, lowerHead, lowerStatic, type LoweredGraph } from './lower.js';
import { QNN_SDK_VERSION, SOCS, type QnnOptions } from './options.js';
import { chunkOf, qnnSubgraphs, quantLinears, type QLinear } from './plan.js';
import { valueChannels } from '../../src/core/ir/values.js';
import { SHADOW_COLD, SHADOW_HOT, SHADOW_INDEX, type ShadowIndex } from './shadow.js';

export const SCALES = 'quant/scales.json';
export const OUTLIERS = 'quant/outliers.json';
export const SUBGRAPHS = 'graph/subgraphs.json';
export const DEPS = 'graph/deps.json';

/** Where a subgraph's files go (shadow nodes are CPU code: no file). */
export function subgraphFiles(sg: Subgraph): { onnx: string; encodings?: string } | null {
  if (sg.kind === 'shadow') return null;
  if (sg.device === 'NPU') return { onnx: `npu/${sg.id}.onnx`, encodings: `npu/${sg.id}.encodings.json` };
  return { onnx: `cpu/${sg.id}.onnx` };
}

/** An entry of graph/subgraphs.json. */
export interface SubgraphEntry {
  id: string;
  kind: Subgraph['kind'];
  layer: number;
  j: number;
  part: number;
  device: Subgraph['device'];
  share: Subgraph['share'];
  /** The IR ops it runs (the runners execute these). */
  ops: Op[];
  inputs: { name: string; shape: (number | string)[]; dtype: string; encodingRef: string | null }[];
  outputs: { name: string; shape: (number | string)[]; dtype: string; encodingRef: string | null }[];
  file: string | null;
  encodings: string | null;
  qnnGraphName: string | null;
  ctxFile: string | null;
  shadow?: { weight: string; x: string; y: string }[];
}

function scalesJson(rec: OutlierScales): unknown {
  const side = (s: OutlierScales['linears'][number]['input']) => ({ T: s.T, s: s.scale, bits: s.bits, decision: s.decision, absmax: s.absMax, p999: s.p999, mean: s.mean, std: s.std, rho: s.rho, outliers: s.outliers });
  return {
    format: 'llmc-qnn-scales/1',
    rounding: rec.rounding,
    percentile: rec.percentile,
    linears: rec.linears.map((l) => ({
      weight: l.weight,
      layer: l.layer,
      op: l.role,
      K: l.inFeatures,
      O: l.outFeatures,
      // SPEC §2's keys (T = threshold, s = T/127), then the full sides.
      T_in: l.input.T,
      T_out: l.output.T,
      s_in: l.input.scale,
      s_out: l.output.scale,
      s_w: l.weightScale,
      clip_input: l.input.decision === 'clip',
      clip_output: l.output.decision === 'clip',
      importance: l.importance,
      importance_rank: l.rank,
      decision: { input: l.input.decision, output: l.output.decision },
      input: side(l.input),
      output: side(l.output),
    })),
  };
}

function outliersJson(rec: OutlierScales, rowBytes: (weight: string, side: 'input' | 'output') => number): unknown {
  return {
    format: 'llmc-qnn-outliers/1',
    coverage: rec.coverage,
    sides: rec.linears.flatMap((l) =>
      (['input', 'output'] as const)
        .filter((s) => l[s].decision === 'shadow')
        .map((s) => ({
          weight: l.weight,
          layer: l.layer,
          op: l.role,
          side: s,
          K: l[s].channels,
          hot: l[s].hot,
          hotFraction: l[s].hot.length / l[s].channels,
          hotCoverage: l[s].hotCoverage,
          outliers: l[s].outliers,
          channelCounts: l[s].channelCounts,
          hotRowsFile: SHADOW_HOT,
          coldRowsFile: SHADOW_COLD,
          index: SHADOW_INDEX,
          rowBytes: rowBytes(l.weight, s),
        })),
    ),
  };
}

export const qnnTarget: Target<QnnOptions, QnnInfo> = {
  async emit(unit: CompileUnit, ctx: EmitContext<QnnOptions>): Promise<EmitResult<QnnInfo>> {
    if (ctx.options.build && !process.env.QNN_SDK_ROOT) {
      throw new LlmcError(`qnn.build=true needs the QNN SDK ${QNN_SDK_VERSION}: export QNN_SDK_ROOT=/path/to/qairt/<version>, or compile without qnn.build and run build-qnn.sh where the SDK is`);
    }
    const result = await lay(unit, ctx.options, diskOutput(ctx.outDir), ctx.progress, ctx.note);
    await fsp.chmod(path.join(ctx.outDir, BUILD_SCRIPT), 0o755);
    if (ctx.options.build) result.files.push(...(await buildContexts(ctx.outDir, result.npu)));
    return result;
  },

  async plan(unit, ctx): Promise<EmitPlan> {
    const sizes = new Map<string, number>();
    const notes: string[] = [];
    const r = await lay(unit, ctx.options, plannedOutput(sizes), silentProgress, (n) => notes.push(n));
    if (ctx.options.build) notes.push(`qnn.build=true: build-qnn.sh then writes ${CONTEXT_BINARY}, one context for the ${r.npu.length} NPU graphs (its size known only after the QNN SDK runs)`);
    return { files: r.files.map((f) => ({ path: f, bytes: sizes.get(f)! })), tensors: r.tensors ?? [], notes };
  },
};

/** The artifact through `out`: every file emit writes, in order; NPU graph ids for the context build. */
async function lay(unit: CompileUnit, o: QnnOptions, out: Output, progress: Progress, note: (m: string) => void): Promise<EmitResult<QnnInfo> & { npu: string[] }> {
  const ctx = { progress, note };
  const rec = findRecord(unit.records, OUTLIER_SCALES);
  if (!rec) throw new LlmcError('internal: --target qnn without the outliers record (the pass manager requires it)');
  const { source, graph } = unit;
  const spec = source.spec;
  // Under chunk-partition the record decides the chunk length (./chunks.ts).
  const chunkRec = findRecord(unit.records, CHUNK_SCHEDULE);
  const chunk = chunkOf(spec, chunkRec ? recordChunkLength(chunkRec, o.chunk, source.description) : o.chunk);
  if (chunk.c > spec.maxPositions) throw new LlmcError(`qnn.chunk ${chunk.c} is longer than the model's context (${spec.maxPositions})`, source.description, 2);
  const linears = quantLinears(graph, rec);
  const subgraphs = qnnSubgraphs(graph, linears);
  const channels = valueChannels(graph);
  const decisions = new Map(rec.linears.map((l) => [l.weight, l]));

  const files: string[] = [];
  const tensors: WrittenTensor[] = [];
  const entries: SubgraphEntry[] = [];
  const scriptGraphs: ScriptGraph[] = [];
  const shadow = await out.shadow();
  let weightBytes = 0;
  let index: ShadowIndex;
  try {
    ctx.progress.start('qnn: writing subgraphs', subgraphs.length);
    for (const sg of subgraphs) {
      const where = subgraphFiles(sg);
      // W_q of this subgraph's linears, quantized once for its graph and its shadow rows.
      const cache = new Map<string, Promise<QuantizedWeight>>();
      const quantized = (w: string) => {
        let p = cache.get(w);
        if (!p) {
          const lin = linears.get(w)!;
          p = source.readF32(w).then((data) => {
            const q = quantizeWeight(data, lin.outFeatures, lin.inFeatures);
            if (q.scale !== lin.sw) throw new LlmcError(`weight scale of ${w} is ${q.scale}, the outliers record says ${lin.sw}: the record is not of these weights`, source.description);
            return q;
          });
          cache.set(w, p);
        }
        return p;
      };
      let lowered: LoweredGraph | null = null;
      if (sg.kind === 'embed') lowered = lowerEmbed(source, graph, sg, chunk);
      else if (sg.kind === 'head') lowered = lowerHead(source, graph, sg, chunk);
      else if (sg.kind === 'attention') lowered = lowerAttention(source, graph, sg, chunk, channels);
      else if (sg.kind === 'static') lowered = lowerStatic(source, graph, sg, linears, quantized, chunk, channels);
      const encRefs = new Set(lowered?.encodings.filter((e) => e.kind === 'activation').map((e) => e.name) ?? []);
      if (lowered && where) {
        files.push(...(await out.onnx(where.onnx, lowered, externalFor(lowered, o.externalData, 'qnn.externalData', where.onnx))));
        if (where.encodings) {
          await out.text(where.encodings, JSON.stringify(encodingsJson(lowered.encodings, o.encodings), null, 1) + '\n');
          files.push(where.encodings);
          scriptGraphs.push({ id: sg.id, onnx: where.onnx, encodings: where.encodings, inputs: lowered.inputs });
        }
        for (const t of lowered.tensors) tensors.push({ name: `${sg.id}/${t.name}`, sources: t.source ? [t.source] : [t.name], format: t.dataType === DT_INT8 ? 'int8' : 'f32', bytes: t.byteLength });
      }
      for (const op of sg.ops) {
        if (op.op !== 'linear' || !linears.has(op.weight)) continue;
        const lin = linears.get(op.weight)!;
        weightBytes += lin.inFeatures * lin.outFeatures;
        if (!lin.inShadow && !lin.outShadow) continue;
        const d = decisions.get(op.weight)!;
        const bias = lin.bias ? await source.readF32(lin.bias) : null;
        await shadow.add(lin, () => quantized(op.weight), { input: d.input.hot, output: d.output.hot }, bias);
      }
      const io = (x: { name: string; shape: (number | string)[]; dtype: string }) => ({ ...x, encodingRef: encRefs.has(x.name) ? x.name : null });
      entries.push({
        id: sg.id,
        kind: sg.kind,
        layer: sg.layer,
        j: sg.j,
        part: sg.part,
        device: sg.device,
        share: sg.share,
        ops: sg.ops,
        inputs: lowered ? lowered.inputs.map(io) : sg.inputs.map((v) => ({ name: v, shape: [1, chunk.a, chunk.b, channels.get(v)!], dtype: 'float32', encodingRef: null })),
        outputs: lowered ? lowered.outputs.map(io) : sg.outputs.map((v) => ({ name: v, shape: [1, chunk.a, chunk.b, channels.get(v)!], dtype: 'float32', encodingRef: null })),
        file: where?.onnx ?? null,
        encodings: where?.encodings ?? null,
        qnnGraphName: sg.device === 'NPU' ? qnnGraphName(sg.id) : null,
        ctxFile: sg.device === 'NPU' ? CONTEXT_BINARY : null,
        ...(sg.shadow ? { shadow: sg.shadow } : {}),
      });
      ctx.progress.tick();
    }
    ctx.progress.done();
    index = await shadow.commit();
  } catch (err) {
    await shadow.abort();
    throw err;
  }
  out.shadowWritten(index, shadow.indexText());
  files.push(SHADOW_HOT, SHADOW_COLD, SHADOW_INDEX);
  const rowBytes = (w: string, side: 'input' | 'output') => index.entries.find((e) => e.weight === w && e.side === side)?.rowBytes ?? 0;
  const write = async (file: string, value: unknown) => {
    await out.text(file, JSON.stringify(value, null, 1) + '\n');
    files.push(file);
  };
  await write(SCALES, scalesJson(rec));
  await write(OUTLIERS, outliersJson(rec, rowBytes));
  let chunked: { chunked: QnnChunked; info: QnnChunkInfo } | null = null;
  if (chunkRec) {
    const staticFiles = entries.filter((e) => e.file && e.kind !== 'attention').map((e) => e.file!);
    const w = await writeQnnChunkGraphs(chunkRec, source, graph, subgraphs, staticFiles, chunk, channels, out, ctx.progress);
    files.push(...w.files);
    chunked = w;
  }
  await write(SUBGRAPHS, { format: 'llmc-qnn-subgraphs/1', chunk, subgraphs: entries.map((e) => ({ ...e, ops: e.ops.map(fileOp) })), ...(chunked ? { chunked: chunked.chunked } : {}) });
  await write(DEPS, { format: 'llmc-qnn-deps/1', ...subgraphDeps(subgraphs), ...(chunkRec ? { chunks: chunkDeps(chunkRec) } : {}) });
  const npu = subgraphs.filter((s) => s.device === 'NPU').map((s) => s.id);
  await out.text(HTP_EXT, htpExtJson());
  await out.text(HTP_CONFIG, htpJson(o.soc, npu));
  await out.text(BUILD_SCRIPT, buildScript(scriptGraphs, o.soc));
  files.push(HTP_EXT, HTP_CONFIG, BUILD_SCRIPT);
  for (const [file, text] of modelFiles(unit)) {
    await out.text(file, text);
    files.push(file);
  }

  const syncs = deviceSwitches(subgraphs.filter((s) => s.kind !== 'embed' && s.kind !== 'head'));
  const hotPct = weightBytes ? (100 * index.hotBytes) / weightBytes : 0;
  ctx.note(`qnn: ${npu.length} NPU graphs, ${subgraphs.length - npu.length} CPU steps, chunk ${chunk.c} as [1, ${chunk.a}, ${chunk.b}, ·]; shadow rows resident ${(index.hotBytes / 1e3).toFixed(1)} kB (${hotPct.toFixed(2)}% of the int8 weights), ${(index.coldBytes / 1e3).toFixed(1)} kB on demand; ${syncs} CPU↔NPU switches per chunk`);
  if (chunked) {
    const row = chunked.info.memory.rows.at(-1)!;
    ctx.note(`qnn: chunk graphs for c = ${chunk.c}: static graphs once (${(chunked.info.memory.staticGraphBytes / 1e3).toFixed(1)} kB), ${chunked.chunked.attentionGraphs} attention graphs per layer; at ${row.N} chunks ${(row.shared / 1e3).toFixed(1)} kB against ${(row.naive / 1e3).toFixed(1)} kB as one graph set per chunk (${(100 * row.saved).toFixed(1)}% saved)`);
  }
  const s = SOCS[o.soc];
  return {
    npu,
    files,
    tensors,
    targetInfo: {
      format: 'qnn',
      soc: o.soc,
      dspArch: s.dspArch,
      socId: s.socId,
      qnnSdk: QNN_SDK_VERSION,
      encodings: o.encodings,
      rounding: rec.rounding,
      chunk,
      nMax: Math.ceil(spec.maxPositions / chunk.c),
      subgraphs: SUBGRAPHS,
      graphs: { npu: npu.length, cpu: entries.filter((e) => e.file?.startsWith('cpu/')).length, shadowNodes: subgraphs.filter((x) => x.kind === 'shadow').length },
      syncsPerChunk: syncs,
      ...(chunked ? { chunks: [chunked.info] } : {}),
      shadow: { hotBytes: index.hotBytes, coldBytes: index.coldBytes, weightBytes, residentPercentOfWeights: hotPct, sides: index.entries.length },
    },
  };
}

/** config.json, the tokenizer files and generation_config.json the source carries (the runner's prompt text and stop ids). */
function modelFiles(unit: CompileUnit): [string, string][] {
  const a = unit.source.assets;
  return (
    [
      ['config.json', JSON.stringify(a.config, null, 2) + '\n'],
      ['tokenizer.json', a.tokenizer],
      ['tokenizer_config.json', a.tokenizerConfig],
      ['generation_config.json', a.generationConfig],
      ['chat_template.jinja', a.chatTemplate],
    ] as [string, string | undefined][]
  ).filter((f): f is [string, string] => f[1] !== undefined);
}

/** `--opt qnn.build=true`: build-qnn.sh through execa; its last line on failure. */
async function buildContexts(outDir: string, npu: string[]): Promise<string[]> {
  const { execa } = await import('execa');
  const r = await execa('bash', [BUILD_SCRIPT], { cwd: outDir, reject: false });
  if (r.exitCode !== 0) {
    const why = String(r.stderr).trim().split('\n').filter(Boolean).at(-1) ?? `exit code ${r.exitCode}`;
    throw new LlmcError(`QNN context build failed: ${why}`, path.join(outDir, BUILD_SCRIPT));
  }
  return npu.length ? [CONTEXT_BINARY] : [];
}

export type { QLinear };
