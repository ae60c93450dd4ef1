/**
 * `llmc run` on a qnn artifact: the runner (./run.ts) over the engine chosen with --engine, and with
 * --chunk the chunked prefill of the chunk-partition record (./run-chunks.ts) in front of it.
 */
import { promises as fsp } from 'node:fs';
import path from 'node:path';
import { LlmcError } from '../../src/core/errors.js';
import type { Artifact, ArtifactRunner, RunOptions } from '../../src/core/pipeline/target.js';
import { findRecord, OUTLIER_SCALES } from '../../src/core/records/index.js';
import type { QnnChunked } from './chunks.js';
import { QnnRunner } from './run.js';
import { readSubgraphs } from './files.js';

const readOptional = (file: string) => fsp.readFile(file, 'utf8').catch(() => undefined);

export async function openQnn(a: Artifact, opts: RunOptions): Promise<ArtifactRunner> {
  const rec = findRecord(a.manifest.passes, OUTLIER_SCALES, a.dir);
  if (!rec) throw new LlmcError('the manifest has no outlier-scales/1 record (written by pass outliers)', a.dir);
  const engine = opts.engine ?? 'sim';
  const runner = await QnnRunner.open(a.dir, rec, { threads: opts.threads, engine });
  const c = runner.chunk;
  const base: ArtifactRunner = {
    spec: runner.spec,
    engine: engine === 'sim' ? 'TS simulation of the NPU integer pipeline (qnn subgraphs) + TS shadow' : 'onnxruntime (qnn subgraphs) + TS shadow',
    notes: [`chunked prefill: ${c.c} tokens per chunk as [1, ${c.a}, ${c.b}, C]; shadow outliers on the CPU`],
    tokenizerJson: await readOptional(path.join(a.dir, 'tokenizer.json')),
    tokenizerConfigJson: await readOptional(path.join(a.dir, 'tokenizer_config.json')),
    generationConfigJson: await readOptional(path.join(a.dir, 'generation_config.json')),
    chatTemplate: await readOptional(path.join(a.dir, 'chat_template.jinja')),
    logits: (ids) => runner.logits(ids),
    generate: (ids, o) => runner.generate(ids, o),
    close: () => runner.close(),
  };
  if (opts.chunk === undefined) return base;
  // --chunk: prefill through the chunk graphs in the chunk-schedule record's order (./run-chunks.ts).
  const sg = (await readSubgraphs(a.dir)) as { chunked?: QnnChunked };
  try {
    return await (await import('./run-chunks.js')).chunkedQnnRunner(a, opts, runner, base, sg.chunked);
  } catch (err) {
    await runner.close();
    throw err;
  }
}
