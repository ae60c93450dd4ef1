/**
 * The compile driver: source → passes (in order) → backend → llmc-manifest.json.
 * Output files appear atomically; on failure or interruption the files this run created are removed.
 */
import { promises as fsp, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { BACKENDS } from '../../../backends/index.js';
import type { Backend, CompileOptions } from '../../../backends/types.js';
import { PASSES } from '../../../passes/index.js';
import type { Pass } from '../../../passes/types.js';
import type { ModelSource } from '../../core/checkpoint/source.js';
import { UsageError } from '../../core/errors.js';
import { ensureOutputDir } from '../../core/util/atomic.js';
import { onInterrupt } from '../../core/util/interrupt.js';
import type { Progress } from '../../core/util/progress.js';
import { writeManifest, type Manifest, type PassRecord } from './manifest.js';

export interface CompileRequest {
  source: ModelSource;
  target: string;
  outDir: string;
  passes: { name: string; options: Record<string, string> }[];
  options: CompileOptions;
  progress: Progress;
  note: (message: string) => void;
  cacheDir?: string;
}

export function knownTargets(): string[] {
  return Object.keys(BACKENDS).sort();
}

export async function compile(req: CompileRequest): Promise<Manifest> {
  const loadBackend = BACKENDS[req.target];
  if (!loadBackend) throw new UsageError(`unknown target "${req.target}"; available: ${knownTargets().join(', ')}`);
  const parsed: { pass: Pass<unknown>; options: unknown }[] = [];
  for (const p of req.passes) {
    const loadPass = PASSES[p.name];
    if (!loadPass) throw new UsageError(`unknown pass "${p.name}"; available: ${Object.keys(PASSES).sort().join(', ') || 'none'}`);
    const pass = await loadPass();
    parsed.push({ pass, options: pass.parseOptions(p.options) });
  }
  const backend = await loadBackend();
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
    return await passesAndBackend(req, parsed, backend);
  } catch (err) {
    undo();
    throw err;
  } finally {
    forget();
  }
}

async function passesAndBackend(
  req: CompileRequest,
  parsed: { pass: Pass<unknown>; options: unknown }[],
  backend: Backend,
): Promise<Manifest> {
  let model = req.source;
  const records: PassRecord[] = [];
  for (const { pass, options } of parsed) {
    const res = await pass.run(model, options, {
      progress: req.progress,
      note: req.note,
      cacheDir: req.cacheDir,
      target: req.target,
      quant: req.options.quant,
    });
    model = res.model;
    records.push({ name: pass.name, options: options as Record<string, unknown>, metadata: res.metadata });
  }

  // Hashing the source (a second full read of it) overlaps the backend's work.
  const identity = req.source.identity();
  identity.catch(() => {}); // surfaced where awaited
  const result = await backend.emit({
    source: model,
    outDir: req.outDir,
    passes: records,
    options: req.options,
    progress: req.progress,
    note: req.note,
  });
  return writeManifest(
    req.outDir,
    {
      target: backend.name,
      source: { path: req.source.description, sha256: await identity },
      arch: model.spec,
      targetInfo: result.targetInfo,
      passes: records,
    },
    result.files,
  );
}
