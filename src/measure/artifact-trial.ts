/**
 * A compile unit written by its target into a scratch directory, exactly as `llmc compile` would write
 * it (the target's own emit, a manifest with the unit's records), and run on the target's own runtime
 * (`TargetDescriptor.open`: the TS runtime for ts, llama.cpp for gguf, …). Passes use it to accept a
 * result on what the artifact does rather than on a proxy of it.
 */
import { promises as fsp } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { LlmcError } from '../core/errors.js';
import { MANIFEST_FILE, MANIFEST_FORMAT, MANIFEST_VERSION, stableJson, type Manifest } from '../core/records/manifest.js';
import type { FormatRequest, TargetDescriptor } from '../core/pipeline/target.js';
import type { CompileUnit } from '../core/pipeline/unit.js';
import { silentProgress } from '../core/util/progress.js';
import { LLMC_VERSION } from '../core/version.js';

export interface TrialRun {
  /** What executed it ('ts-runtime', 'llama.cpp', …). */
  engine: string;
  /** Per sequence: mean next-token negative log-likelihood (nats) over its positions 0..T−2. */
  nll: number[];
}

/**
 * Write `unit` with `target` (formats and target options as the compile has them) into a scratch
 * directory, run every sequence through the artifact's runner from an empty context, and remove the
 * directory. Logits come from the runner's `logits(ids)`, the path quality evaluation reads.
 */
export async function runTrialArtifact(unit: CompileUnit, target: TargetDescriptor, opts: { formats: FormatRequest; targetOptions?: unknown }, seqs: readonly number[][]): Promise<TrialRun> {
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'llmc-trial-'));
  try {
    const emitter = await target.load();
    const options = opts.targetOptions ?? target.options.parse({});
    const result = await emitter.emit(unit, { outDir: dir, formats: opts.formats, options, progress: silentProgress, note: () => {} });
    const manifest: Manifest = {
      format: MANIFEST_FORMAT,
      version: MANIFEST_VERSION,
      llmcVersion: LLMC_VERSION,
      target: target.name,
      source: { path: unit.source.dir, sha256: '' },
      arch: unit.source.spec,
      targetInfo: result.targetInfo as Record<string, unknown>,
      passes: [...unit.records],
      // Sizes as written; no hashes (the trial is never verified, only run).
      files: await Promise.all(result.files.map(async (f) => ({ path: f, size: (await fsp.stat(path.join(dir, f))).size, sha256: '' }))),
    };
    await fsp.writeFile(path.join(dir, MANIFEST_FILE), stableJson(manifest));
    const runner = await target.open!({ path: dir, dir, manifest }, {});
    try {
      if (!runner.logits) throw new LlmcError(`internal: the ${target.name} runner gives no logits to measure an artifact with`);
      const V = unit.source.spec.vocabSize;
      const nll: number[] = [];
      for (const seq of seqs) {
        const z = await runner.logits(seq);
        let sum = 0;
        for (let t = 0; t + 1 < seq.length; t++) {
          const o = t * V;
          let max = -Infinity;
          for (let i = 0; i < V; i++) max = Math.max(max, z[o + i]);
          let s = 0;
          for (let i = 0; i < V; i++) s += Math.exp(z[o + i] - max);
          sum += max + Math.log(s) - z[o + seq[t + 1]];
        }
        nll.push(sum / (seq.length - 1));
      }
      return { engine: runner.engine, nll };
    } finally {
      await runner.close();
    }
  } finally {
    await fsp.rm(dir, { recursive: true, force: true });
  }
}
