/**
 * The compile driver: plan (every option checked, before any work) → the compile unit of the source
 * → passes in the manager's order → the target's lowering → llmc-manifest.json.
 * Output files appear atomically; on failure or interruption the files this run created are removed.
 */
import { promises as fsp, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import type { ModelSource } from '../../core/checkpoint/source.js';
import type { ArchSpec } from '../../core/arch/spec.js';
import { LlmcError, UsageError } from '../../core/errors.js';
import { evolve, unitOf, type CompileUnit } from '../../core/pipeline/unit.js';
import type { EmitPlan } from '../../core/pipeline/target.js';
import type { ProfileCacheRef } from '../../core/pipeline/pass.js';
import type { Manifest, PassRecord } from '../../core/records/manifest.js';
import { ensureOutputDir } from '../../core/util/atomic.js';
import { onInterrupt } from '../../core/util/interrupt.js';
import type { Progress } from '../../core/util/progress.js';
import { writeManifest } from './manifest.js';
import { planCompile, type CompilePlan, type PlanRequest } from './plan.js';

export interface CompileRequest extends PlanRequest {
  source: ModelSource;
  outDir: string;
  progress: Progress;
  note: (message: string) => void;
  cacheDir?: ProfileCacheRef;
}

export async function compile(req: CompileRequest, plan: CompilePlan = planCompile(req)): Promise<Manifest> {
  const existed = await fsp.stat(req.outDir).then(
    () => true,
    () => false,
  );
  await ensureOutputDir(req.outDir);
  const before = new Set(await fsp.readdir(req.outDir));
  // On failure or interruption, leave the file system as it was: a directory this run created goes,
  // otherwise what it added.
  const undo = () => {
    if (!existed) return rmSync(req.outDir, { recursive: true, force: true });
    let now: string[] = [];
    try {
      now = readdirSync(req.outDir);
    } catch {
      return;
    }
    for (const f of now) if (!before.has(f)) rmSync(path.join(req.outDir, f), { recursive: true, force: true });
  };
  const forget = onInterrupt(undo);
  try {
    return await run(req, plan);
  } catch (err) {
    undo();
    throw err;
  } finally {
    forget();
  }
}

/** The unit after every pass of the plan, in the manager's order. */
async function runPasses(req: CompileRequest, plan: CompilePlan): Promise<CompileUnit> {
  let unit = unitOf(req.source);
  for (const { descriptor, options } of plan.passes) {
    const pass = await descriptor.load();
    const out = await pass.run(unit, options, {
      progress: req.progress,
      note: req.note,
      cacheDir: req.cacheDir,
      target: plan.target,
      formats: plan.formats,
    });
    const metadata = out.record as Record<string, unknown>;
    if (metadata.format !== descriptor.produces.id) {
      throw new LlmcError(`internal: pass ${descriptor.name} wrote a ${String(metadata.format)} record, its descriptor says ${descriptor.produces.id}`);
    }
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

async function run(req: CompileRequest, plan: CompilePlan): Promise<Manifest> {
  const unit = await runPasses(req, plan);

  // Hashing the source (a second full read of it) overlaps the target's work.
  const identity = req.source.identity();
  identity.catch(() => {}); // surfaced where awaited
  const target = await plan.target.load();
  const result = await target.emit(unit, {
    outDir: req.outDir,
    formats: plan.formats,
    options: plan.targetOptions,
    progress: req.progress,
    note: req.note,
  });
  return writeManifest(
    req.outDir,
    {
      target: plan.target.name,
      source: { path: req.source.description, sha256: await identity },
      arch: unit.source.spec,
      targetInfo: result.targetInfo,
      passes: [...unit.records],
    },
    result.files,
  );
}
