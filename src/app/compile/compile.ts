/**
 * The compile driver: plan (every option checked, before any work) → the compile unit of the source
 * → passes in the manager's order → the target's lowering → llmc-manifest.json, written last.
 * Where the files go is output.ts's job: never over the input, an existing artifact replaced whole,
 * nothing left behind by a failed or interrupted run.
 */
import path from 'node:path';
import { DTYPE_BYTES, numel } from '../../core/checkpoint/safetensors.js';
import type { ModelSource } from '../../core/checkpoint/source.js';
import type { ArchSpec } from '../../core/arch/spec.js';
import { LlmcError, UsageError } from '../../core/errors.js';
import { checkModel } from '../../core/pipeline/capabilities.js';
import type { ProfileCacheRef } from '../../core/pipeline/pass.js';
import { tensorGroups, type WrittenTensor } from '../../core/pipeline/summary.js';
import type { EmitPlan } from '../../core/pipeline/target.js';
import { evolve, unitOf, type CompileUnit } from '../../core/pipeline/unit.js';
import { MANIFEST_FORMAT, MANIFEST_VERSION, type Manifest, type ManifestSummary, type PassRecord } from '../../core/records/manifest.js';
import type { Progress } from '../../core/util/progress.js';
import { stableJson } from '../../core/util/stable-json.js';
import { LLMC_VERSION } from '../../core/version.js';
import { describeFiles } from './manifest.js';
import { checkOutputName, prepareOutput } from './output.js';
import { planCompile, type CompilePlan, type PlanRequest } from './plan.js';
import { TARGETS } from '../../../backends/index.js';

export interface CompileRequest extends PlanRequest {
  source: ModelSource;
  /** An output directory, or for a single-file target (gguf) a file name with its extension. */
  outDir: string;
  progress: Progress;
  note: (message: string) => void;
  cacheDir?: ProfileCacheRef;
  /** Replace a non-empty output directory (or file) that is not an llmc artifact. */
  force?: boolean;
}

export async function compile(req: CompileRequest, plan: CompilePlan = planCompile(req)): Promise<Manifest> {
  checkOutputName(req.outDir, plan.target);
  const out = await prepareOutput(req.outDir, { inputs: [req.source.dir], force: req.force ?? false, singleFile: plan.target.singleFile ?? null });
  try {
    const manifest = await run(req, plan, out.workDir);
    if (out.singleFile) manifest.files = manifest.files.map((f) => ({ ...f, path: path.basename(out.singleFile!) }));
    await out.commit(stableJson(manifest));
    return manifest;
  } catch (err) {
    out.discard();
    throw err;
  } finally {
    out.release();
  }
}

/** The unit after every pass of the plan, in the manager's order. */
async function runPasses(req: CompileRequest, plan: CompilePlan): Promise<CompileUnit> {
  checkModel(req.source.spec, plan.target, plan.passes.map((p) => p.descriptor), TARGETS);
  let unit = unitOf(req.source);
  for (const { descriptor, options } of plan.passes) {
    const pass = await descriptor.load();
    const out = await pass.run(unit, options, {
      progress: req.progress,
      note: req.note,
      cacheDir: req.cacheDir,
      target: plan.target,
      formats: plan.formats,
      targetOptions: plan.targetOptions,
    });
    const metadata = out.record as Record<string, unknown>;
    if (metadata.format !== descriptor.produces.id) {
      throw new LlmcError(`internal: pass ${descriptor.name} wrote a ${String(metadata.format)} record, its descriptor says ${descriptor.produces.id}`);
    }
    // What the manifest will carry (JSON) must read back as its type: a pass that breaks its own record fails here, naming the field.
    descriptor.produces.read(asWritten(metadata), `internal: pass ${descriptor.name} wrote a record its type ${descriptor.produces.id} refuses`);
    unit = evolve(out.unit, { record: { name: descriptor.name, options: options as Record<string, unknown>, metadata } });
  }
  return unit;
}

export interface DryRun {
  target: string;
  /** The architecture the target lowers (after the passes). */
  arch: ArchSpec;
  /** The records the passes wrote, as the manifest would carry them. */
  passes: PassRecord[];
  plan: EmitPlan;
}

/**
 * What `compile` would write, without writing it: the passes run (their measurements come from and
 * go to the profile cache as usual), then the target plans its files instead of emitting them.
 */
export async function dryRun(req: CompileRequest, plan: CompilePlan = planCompile(req)): Promise<DryRun> {
  const target = await plan.target.load();
  if (!target.plan) throw new UsageError(`the ${plan.target.name} target cannot --dry-run (it has no plan of its files)`);
  const unit = await runPasses(req, plan);
  return {
    target: plan.target.name,
    arch: unit.source.spec,
    passes: [...unit.records],
    plan: await target.plan(unit, { outDir: req.outDir, formats: plan.formats, options: plan.targetOptions }),
  };
}

async function run(req: CompileRequest, plan: CompilePlan, workDir: string): Promise<Manifest> {
  const unit = await runPasses(req, plan);

  // Hashing the source (a second full read of it) overlaps the target's work.
  const identity = req.source.identity();
  identity.catch(() => {}); // surfaced where awaited
  const target = await plan.target.load();
  const result = await target.emit(unit, { outDir: workDir, formats: plan.formats, options: plan.targetOptions, progress: req.progress, note: req.note });
  plan.target.info.read(asWritten(result.targetInfo), `internal: target ${plan.target.name} wrote a targetInfo its schema refuses`);
  return {
    format: MANIFEST_FORMAT,
    version: MANIFEST_VERSION,
    llmcVersion: LLMC_VERSION,
    target: plan.target.name,
    source: { path: req.source.description, sha256: await identity },
    arch: unit.source.spec,
    targetInfo: result.targetInfo as Record<string, unknown>,
    passes: [...unit.records],
    files: await describeFiles(workDir, result.files),
    ...(result.tensors ? { summary: summarize(req.source, result.tensors) } : {}),
  };
}

/** A value as the manifest's JSON will hold it (undefined keys gone, non-finite numbers null), for checking against its declared type. */
const asWritten = (v: unknown): unknown => JSON.parse(JSON.stringify(v));

/** Bytes per tensor group and format, against the same tensors in the source checkpoint (each counted once: a tied embedding written twice, or every gguf-levels file's slice of it, is one source tensor). */
function summarize(source: ModelSource, tensors: readonly WrittenTensor[]): ManifestSummary {
  let sourceBytes = 0;
  for (const s of new Set(tensors.flatMap((t) => t.sources))) {
    const m = source.meta(s);
    if (m) sourceBytes += numel(m.shape) * DTYPE_BYTES[m.dtype];
  }
  return { groups: tensorGroups(source.spec, tensors), bytes: tensors.reduce((a, t) => a + t.bytes, 0), sourceBytes };
}
