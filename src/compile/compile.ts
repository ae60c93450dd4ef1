/**
 * The compile driver: source → passes (in order) → backend → llmc-manifest.json.
 * Output files appear atomically; on failure the files this run created are removed.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { BACKENDS } from '../../backends/index.js';
import type { CompileOptions } from '../../backends/types.js';
import { PASSES } from '../../passes/index.js';
import type { ModelSource } from '../checkpoint/source.js';
import { UsageError } from '../errors.js';
import { ensureOutputDir } from '../util/atomic.js';
import type { Progress } from '../util/progress.js';
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
  const backend = BACKENDS[req.target];
  if (!backend) throw new UsageError(`unknown target "${req.target}"; available: ${knownTargets().join(', ')}`);
  const parsed = req.passes.map((p) => {
    const pass = PASSES[p.name];
    if (!pass) throw new UsageError(`unknown pass "${p.name}"; available: ${Object.keys(PASSES).sort().join(', ') || 'none'}`);
    return { pass, options: pass.parseOptions(p.options) };
  });
  await ensureOutputDir(req.outDir);

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

  const before = new Set(await fsp.readdir(req.outDir));
  // Hashing the source (a second full read of it) overlaps the backend's work.
  const identity = req.source.identity();
  identity.catch(() => {}); // surfaced where awaited
  try {
    const result = await backend.emit({
      source: model,
      outDir: req.outDir,
      passes: records,
      options: req.options,
      progress: req.progress,
      note: req.note,
    });
    return await writeManifest(
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
  } catch (err) {
    // Leave the directory as it was: remove what this run added (temp files included).
    for (const f of await fsp.readdir(req.outDir).catch(() => [] as string[])) {
      if (!before.has(f)) await fsp.rm(path.join(req.outDir, f), { recursive: true, force: true });
    }
    throw err;
  }
}
