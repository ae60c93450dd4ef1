/**
 * `llmc inspect <model>`: architecture, parameter counts per component, dtypes, bytes and shard
 * files of a Hugging Face checkpoint. Reads config.json and the safetensors headers only, never
 * tensor data, so it is instant and light on any size of checkpoint.
 */
import path from 'node:path';
import type { Command } from 'commander';
import { openCheckpoint, type Checkpoint } from '../../../core/checkpoint/index.js';
import { componentOf, COMPONENTS, tensorRoles, type Component } from '../../../core/arch/names.js';
import { numel } from '../../../core/checkpoint/safetensors.js';
import type { ArchSpec } from '../../../core/arch/spec.js';
import { describeRope } from '../../../core/arch/rope-config.js';
import { ELASTIC_LEVELS, findRecord, type Manifest } from '../../../core/records/index.js';
import { locate, verifyFiles } from '../../artifact.js';
import { formatBytes, printJson, table } from '../output.js';

export { COMPONENTS, type Component };

interface Tally {
  tensors: number;
  parameters: number;
  bytes: number;
}
const tally = (): Tally => ({ tensors: 0, parameters: 0, bytes: 0 });

export interface InspectReport {
  model: string;
  architecture: ArchSpec;
  parameters: { total: number } & Record<Component, number>;
  bytes: number;
  dtypes: Record<string, Tally>;
  files: { file: string; bytes: number; tensors: number }[];
  assets: { tokenizer: boolean; tokenizerConfig: boolean; generationConfig: boolean };
  tensors?: { name: string; shape: number[]; dtype: string; bytes: number; file: string; component: Component }[];
}

export async function inspectCheckpoint(ck: Checkpoint, withTensors: boolean): Promise<InspectReport> {
  const byComponent = Object.fromEntries(COMPONENTS.map((c) => [c, 0])) as Record<Component, number>;
  const dtypes: Record<string, Tally> = {};
  const files = new Map<string, { file: string; bytes: number; tensors: number }>();
  for (const f of ck.files) files.set(f.path, { file: path.basename(f.path), bytes: f.size, tensors: 0 });
  let total = 0;
  let bytes = 0;
  const tensors: NonNullable<InspectReport['tensors']> = [];
  const roles = tensorRoles(ck.spec);
  for (const t of ck.tensors) {
    const info = ck.info(t.name);
    const n = numel(t.shape);
    const role = roles.get(t.name);
    const comp = componentOf(role);
    byComponent[comp] += n;
    total += n;
    bytes += info.byteLength;
    const d = (dtypes[t.dtype] ??= tally());
    d.tensors++;
    d.parameters += n;
    d.bytes += info.byteLength;
    files.get(info.file)!.tensors++;
    if (withTensors) tensors.push({ name: t.name, shape: t.shape, dtype: t.dtype, bytes: info.byteLength, file: path.basename(info.file), component: comp });
  }
  const report: InspectReport = {
    model: ck.dir,
    architecture: ck.spec,
    parameters: { total, ...byComponent },
    bytes,
    dtypes,
    files: [...files.values()],
    assets: {
      tokenizer: ck.assets.tokenizer !== undefined,
      tokenizerConfig: ck.assets.tokenizerConfig !== undefined,
      generationConfig: ck.assets.generationConfig !== undefined,
    },
  };
  if (withTensors) report.tensors = tensors.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return report;
}

const fmtNum = (x: number) => (x !== 0 && Math.abs(x) < 1e-3 ? x.toExponential() : String(x));
const fmtCount = (n: number) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)}B` : n >= 1e6 ? `${(n / 1e6).toFixed(2)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}K` : String(n));
const fmtBytes = (n: number) => (n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(2)} GiB` : n >= 2 ** 20 ? `${(n / 2 ** 20).toFixed(1)} MiB` : n >= 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${n} B`);

function formatReport(r: InspectReport): string {
  const s = r.architecture;
  const lines: string[] = [];
  lines.push(`model: ${r.model}`);
  lines.push(`architecture: ${s.modelType}`);
  lines.push(
    `  hidden ${s.hiddenSize}, layers ${s.numLayers}, heads ${s.numHeads} (kv ${s.numKvHeads}${s.numKvHeads < s.numHeads ? ', GQA' : ''}), head_dim ${s.headDim}`,
  );
  lines.push(`  intermediate ${s.intermediateSize}, vocab ${s.vocabSize}, max positions ${s.maxPositions}`);
  lines.push(
    `  rms_norm_eps ${fmtNum(s.rmsNormEps)}${s.tieEmbeddings ? ', tied embeddings' : ''}${s.qkvBias ? ', q/k/v bias' : ''}` +
      `${s.slidingWindow ? `, sliding window ${s.slidingWindow}${s.slidingLayers ? ` on layers [${s.slidingLayers}]` : ''}` : ''}`,
  );
  lines.push(`  ${describeRope(s.ropeTheta, s.ropeScaling)}`);
  if (s.moe) {
    const m = s.moe;
    lines.push(
      `  MoE: ${m.numExperts} experts, top-${m.topK} (${m.routing}), expert intermediate ${m.expertIntermediateSize}` +
        `${m.sharedExpertIntermediateSize ? `, shared expert ${m.sharedExpertIntermediateSize}` : ''}${m.denseLayers.length ? `, dense layers [${m.denseLayers}]` : ''}`,
    );
  }
  lines.push(`parameters: ${fmtCount(r.parameters.total)} (${r.parameters.total})`);
  for (const c of COMPONENTS) {
    const n = r.parameters[c];
    if (n) lines.push(`  ${c.padEnd(14)} ${fmtCount(n).padStart(9)}  ${((100 * n) / r.parameters.total).toFixed(1).padStart(5)}%`);
  }
  if (s.tieEmbeddings) lines.push('  (lm_head is tied to the embedding)');
  lines.push(`bytes: ${fmtBytes(r.bytes)} (${r.bytes})`);
  lines.push('dtypes:');
  for (const [d, t] of Object.entries(r.dtypes)) lines.push(`  ${d.padEnd(5)} ${String(t.tensors).padStart(5)} tensors  ${fmtCount(t.parameters).padStart(9)} params  ${fmtBytes(t.bytes)}`);
  lines.push(`files (${r.files.length}):`);
  for (const f of r.files) lines.push(`  ${f.file}  ${fmtBytes(f.bytes)}  ${f.tensors} tensors`);
  const a = r.assets;
  lines.push(`tokenizer: ${a.tokenizer ? 'tokenizer.json' : 'none'}${a.tokenizerConfig ? ' + tokenizer_config.json' : ''}${a.generationConfig ? ', generation_config.json' : ''}`);
  if (r.tensors) {
    lines.push(`tensors (${r.tensors.length}):`);
    for (const t of r.tensors) lines.push(`  ${t.name}  [${t.shape.join(', ')}]  ${t.dtype}  ${fmtBytes(t.bytes)}  ${t.file}`);
  }
  return lines.join('\n') + '\n';
}

/** An artifact's manifest, for people: target, source, files, formats per tensor group, passes and their records. */
export function formatArtifact(path_: string, m: Manifest): string {
  const lines: string[] = [];
  lines.push(`artifact: ${path_} (target ${m.target}, llmc ${m.llmcVersion})`);
  lines.push(`source: ${m.source.path} (sha256 ${m.source.sha256.slice(0, 16)}…)`);
  lines.push(`architecture: ${m.arch.modelType}, ${m.arch.numLayers} layers, hidden ${m.arch.hiddenSize}, vocab ${m.arch.vocabSize}`);
  lines.push(`files (${m.files.length}):`);
  lines.push(table(m.files.map((f) => [f.path, formatBytes(f.size), f.sha256.slice(0, 16) + '…'])));
  if (m.summary) {
    lines.push('tensors:');
    lines.push(table([['group', 'format', 'count', 'bytes'], ...m.summary.groups.map((g) => [g.group, g.format, g.tensors, formatBytes(g.bytes)])]));
  }
  lines.push(`passes: ${m.passes.length ? m.passes.map((p) => `${p.name} (${String(p.metadata.format)})`).join(', ') : 'none'}`);
  const elastic = findRecord(m.passes, ELASTIC_LEVELS);
  if (elastic) {
    lines.push(`elastic levels (importance ${elastic.importance.provider}, anchors [${elastic.anchors.join(', ')}]):`);
    lines.push(
      table([
        ['level', 'params', 'held-out ppl'],
        ...elastic.levels.map((l) => [l.id, `${(100 * l.paramFrac).toFixed(1)}%`, l.heldOutPpl !== undefined ? l.heldOutPpl.toFixed(2) : '-']),
      ]),
    );
  }
  return lines.join('\n') + '\n';
}

export function registerInspect(program: Command): void {
  program
    .command('inspect')
    .description("Show a checkpoint's architecture, parameters per component, dtypes and bytes (headers only), or an llmc artifact's manifest: files, formats, passes, levels")
    .argument('<path>', 'checkpoint directory, artifact directory, or a GGUF file (llmc\'s, or any llama.cpp GGUF: read from its metadata)')
    .option('--json', 'machine-readable output on stdout')
    .option('--tensors', 'list every tensor (name, shape, dtype, bytes, file) of a checkpoint')
    .addHelpText('after', '\nExamples (from a clone):\n  llmc inspect fixtures/models/stories260K\n  llmc inspect fixtures/models/stories260K --json --tensors\n  llmc inspect out/stories-q8.gguf\n')
    .action(async (target: string, o: { json?: boolean; tensors?: boolean }) => {
      const where = await locate(target);
      if (where.kind === 'artifact' && where.manifestPath === null) {
        // A file without llmc's manifest (a GGUF from llama.cpp): what the file itself says.
        if (o.json) printJson(where.description.json);
        else process.stdout.write(where.description.text);
        return;
      }
      if (where.kind === 'artifact') {
        await verifyFiles(where, { hash: false });
        if (o.json) printJson(where.manifest);
        else process.stdout.write(formatArtifact(target, where.manifest));
        return;
      }
      const ck = await openCheckpoint(where.dir);
      try {
        const report = await inspectCheckpoint(ck, Boolean(o.tensors));
        if (o.json) printJson(report);
        else process.stdout.write(formatReport(report));
      } finally {
        await ck.close();
      }
    });
}
