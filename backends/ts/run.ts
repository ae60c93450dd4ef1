/** `llmc run` on a ts artifact: the TS runtime, at full width or at an elastic level, experts resident or cached. */
import type { Artifact, ArtifactRunner, RunOptions } from '../../src/core/pipeline/target.js';
import path from 'node:path';
import { LlmcError } from '../../src/core/errors.js';
import { CHUNK_SCHEDULE, ELASTIC_LEVELS, findRecord, levelNotes, MANIFEST_FILE, requireChunkSchedule, requireSpecTree, selectLevel, SPEC_TREE } from '../../src/core/records/index.js';
import { RecordChunks } from '../../src/exec/runtime/chunked.js';
import { mergesAtLoad } from '../../src/exec/runtime/load.js';
import { TS_INFO } from '../../src/exec/runtime/format.js';
import { loadDir, tokenizerFiles } from '../../src/exec/runtime/node.js';
import type { KvCache, Model, RunnableLevel } from '../../src/exec/runtime/model.js';
import { DEFAULT_MIN_WORK } from '../../src/exec/runtime/pool.js';
import { openStreamedTs, streamsEvaluation } from './streamed.js';
import { drafterFor, SpeculativeDecoder, treeFor } from '../../src/exec/runtime/speculative.js';

export async function openTs(a: Artifact, opts: RunOptions): Promise<ArtifactRunner> {
  if (opts.windows && streamsEvaluation(a, opts.windows)) return openStreamedTs(a, { ...opts, windows: opts.windows });
  const notes: string[] = [];
  if (opts.threads !== undefined && opts.threads > 1 && opts.experts) notes.push('--threads has no effect with --expert-cache (the TS runtime runs it on one thread)');
  // --level runs one level: its recovery adapters merged into F32 copies of its slices at load (decode
  // 3–5× faster than low-rank terms per token on stories260K, bench/recovery.bench.ts), the rest of
  // the weights shared as they are; low-rank terms where the level cannot be merged.
  const record = findRecord(a.manifest.passes, ELASTIC_LEVELS, a.dir);
  const picked = opts.level === undefined ? undefined : selectLevel(record?.levels ?? null, opts.level, a.path);
  const merges = picked !== undefined && !opts.experts && mergesAtLoad({ arch: a.manifest.arch, targetInfo: TS_INFO.read(a.manifest.targetInfo, path.join(a.dir, MANIFEST_FILE)) }, picked);
  const mergeLevel = merges ? picked.id : undefined;
  const model = await loadDir(a.dir, { verifyChecksums: opts.verify, experts: opts.experts, mergeLevel, threads: opts.experts ? 1 : opts.threads });
  if ((opts.threads ?? 1) > 1 && !opts.experts && model.threads === 1) notes.push(`--threads ${opts.threads}: every matmul of this model is too small to split across threads (under ${DEFAULT_MIN_WORK >> 10} KiB of weights); it runs on one thread`);
  let run: RunnableLevel | undefined;
  if (opts.level !== undefined) {
    try {
      run = model.level(opts.level, a.path);
    } catch (err) {
      await model.close();
      throw err;
    }
    notes.push(...levelNotes(run.level, record!, model.spec.vocabSize));
  }
  const level = run && { widths: run.widths, adapters: run.adapters };
  const speculative = opts.speculative ? await speculativeDecoder(a, model, opts.speculative.draft) : null;
  const chunks = opts.chunk !== undefined ? chunkedPrefill(a, model, opts) : null;
  if (chunks) notes.push(`chunked prefill: chunk length ${opts.chunk === 'auto' ? `per prompt among ${chunks.rec.chunks.map((p) => p.c).join(', ')}` : opts.chunk}, subgraphs in the scheduled order (${chunks.rec.costs.source})`);
  let stats: Record<string, unknown> | null = null;
  const kvType = opts.kvType;
  if (kvType !== undefined) {
    try {
      model.newCache(kvType);
    } catch (err) {
      await model.close();
      throw err instanceof LlmcError ? new LlmcError(`--kv-type ${kvType}: ${err.message}`, a.path) : err;
    }
  }
  return {
    spec: model.spec,
    ...(await tokenizerFiles(a.dir)),
    notes,
    engine: 'ts-runtime',
    level: run?.level.id,
    logits: async (ids) => (chunks ? chunks.prefill(ids, model.newCache(kvType), 'all') : model.forwardAsync(ids, model.newCache(kvType), { ...level })),
    async generate(promptIds, o) {
      if (speculative) {
        const clock = () => Number(process.hrtime.bigint()) / 1e6;
        const r = speculative.decoder.generate(promptIds, { maxTokens: o.maxTokens, tree: speculative.tree, stopTokens: o.stopIds, onToken: o.onToken, clock });
        const steps = r.acceptedPerStep.length;
        // Plain greedy decoding of the same prompt on the same model, timed the same way (after the first token).
        let plainMs = 0;
        let t0: number | undefined;
        let plainTokens = 0;
        for await (const _ of model.generate(promptIds, { maxTokens: r.tokens.length, temperature: 0 })) {
          if (t0 === undefined) t0 = clock();
          plainTokens++;
        }
        if (t0 !== undefined) plainMs = clock() - t0;
        const rate = (tokens: number, ms: number) => (tokens > 1 && ms > 0 ? ((tokens - 1) * 1000) / ms : null);
        stats = {
          draft: speculative.rec.draft,
          mode: speculative.rec.mode,
          target_steps: steps + 1,
          accepted_per_step: r.acceptedPerStep,
          mean_accepted_per_step: steps ? r.acceptedPerStep.reduce((x, y) => x + y, 0) / steps : null,
          tree_nodes: r.treeNodes,
          draft_calls: r.draftCalls,
          // Tokens after the first one per second of decoding (prefill and set-up excluded), beside plain decoding's on this host.
          tokens_per_second: rate(r.tokens.length, r.decodeMs ?? 0),
          plain_tokens_per_second: rate(plainTokens, plainMs),
          predicted: speculative.rec.plans.map((p) => ({ nodes: p.n, ...p.predicted })),
          ...(speculative.rec.validation ? { validation: speculative.rec.validation } : {}),
        };
        return r.tokens;
      }
      let prefill: ((ids: ArrayLike<number>, cache: KvCache) => Float32Array) | undefined;
      if (chunks) {
        const p = chunks.planFor(promptIds.length);
        notes.push(`prompt of ${promptIds.length} tokens: ${p.N} chunk(s) of ${p.plan.c}, ${p.tabulated ? 'tabulated' : 'online heuristic'} schedule (predicted ${p.predictedMs.toPrecision(4)} ms)`);
        prefill = (ids, cache) => chunks.prefill(ids, cache, 'last', p);
      }
      const out: number[] = [];
      const { maxTokens, temperature, topP, seed, stopIds: stopTokens, onToken } = o;
      for await (const id of model.generate(promptIds, { maxTokens, temperature, topP, seed, stopTokens, ...level, prefill, kvType })) {
        out.push(id);
        onToken?.(id);
      }
      return out;
    },
    speculativeStats: () => stats,
    close: () => model.close(),
    expertStats: () => (model.experts ? { ...model.experts.stats, capacity: model.experts.capacity, policy: model.experts.policy, preload: model.experts.fanout } : null),
  };
}

/** The artifact's chunk plan (record chunk-schedule/1) on the TS runtime. */
function chunkedPrefill(a: Artifact, model: Model, opts: RunOptions): RecordChunks {
  const file = path.join(a.dir, MANIFEST_FILE);
  const rec = requireChunkSchedule(findRecord(a.manifest.passes, CHUNK_SCHEDULE, file), a.path);
  return new RecordChunks(model, rec, opts.chunk!, a.path);
}

/** The target's own verification tree (record spec-tree/1) and its draft: an elastic level, skipped layers, or `draft`'s artifact. */
async function speculativeDecoder(a: Artifact, model: Model, draftDir: string | undefined) {
  const file = path.join(a.dir, MANIFEST_FILE);
  const found = findRecord(a.manifest.passes, SPEC_TREE, file);
  if (!found) throw new LlmcError('--speculative needs an artifact compiled with --passes tree-search', a.path);
  const rec = requireSpecTree(found, file);
  const draft = draftDir !== undefined ? await loadDir(draftDir) : undefined;
  return { rec, tree: treeFor(rec), decoder: new SpeculativeDecoder(model, drafterFor(model, rec, draft)) };
}
