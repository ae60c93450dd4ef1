/**
 * The compile driver: plan (every option checked, before any work) → the compile unit of the source
 * → passes in the manager's order → the target's lowering → llmc-manifest.json.
 * Output files appear atomically; on failure or interruption the files this run created are removed.
 */
import { promises as fsp, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import type { ModelSource } from '../../core/checkpoint/source.js';
import { LlmcError } from '../../core/errors.js';
import { evolve, unitOf } from '../../core/pipeline/unit.js';
import type { Manifest } from '../../core/records/manifest.js';
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
  cacheDir?: string;
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

async function run(req: CompileRequest, plan: CompilePlan): Promise<Manifest> {
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
