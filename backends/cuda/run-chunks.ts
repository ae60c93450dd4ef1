/**
 * `llmc run --chunk` on a cuda artifact: the prompt prefilled through the chunk graphs of the chosen
 * chunk length (onnx/chunk<c>.*.onnx, targetInfo.chunks) in the record's dispatch order on
 * onnxruntime; the KV cache they leave (prompt positions only, no pad) then feeds onnx/model.onnx for
 * decoding.
 */
import path from 'node:path';
import type * as ort from 'onnxruntime-node';
import { LlmcError } from '../../src/core/errors.js';
import type { Artifact, ArtifactRunner, RunOptions } from '../../src/core/pipeline/target.js';
import { CHUNK_SCHEDULE, findRecord, MANIFEST_FILE, requireChunkSchedule } from '../../src/core/records/index.js';
import { chunkPlanOf, type ChunkPlanRecord } from '../../src/core/records/chunk-schedule.js';
import { chunkOrderFor, pickChunkPlan } from '../../src/core/chunks/dispatch.js';
import { cacheTensor, OrtChunkPrefill } from '../../src/exec/engine/chunks.js';
import type { OnnxDecoder } from '../../src/exec/engine/decoder-dir.js';
import { Sampler } from '../../src/core/sampling.js';
import { chunkGraphFile } from './chunks.js';
import { CUDA_INFO } from './info.js';

export async function chunkedRunner(a: Artifact, opts: RunOptions, runner: ArtifactRunner & { decoder: OnnxDecoder }): Promise<ArtifactRunner> {
  const rec = requireChunkSchedule(findRecord(a.manifest.passes, CHUNK_SCHEDULE, path.join(a.dir, MANIFEST_FILE)), a.path);
  const sets = CUDA_INFO.read(a.manifest.targetInfo, path.join(a.dir, MANIFEST_FILE)).chunks ?? [];
  const chunk = opts.chunk!;
  if (chunk !== 'auto') chunkPlanOf(rec, chunk, a.path);
  const { spec, decoder } = runner;
  const prefills = new Map<number, Promise<OrtChunkPrefill>>();
  const prefillFor = (plan: ChunkPlanRecord) => {
    let p = prefills.get(plan.c);
    if (!p) {
      const set = sets.find((s) => s.c === plan.c);
      if (!set) throw new LlmcError(`the manifest lists no chunk graphs for c = ${plan.c}`, a.path);
      const dims = { kvHeads: spec.numKvHeads, headDim: spec.headDim, vocab: spec.vocabSize, maxPositions: spec.maxPositions };
      p = OrtChunkPrefill.open(plan.c, rec.subgraphs, set.attentionGraphs, async (name) => path.join(a.dir, chunkGraphFile(plan.c, name)), dims, { threads: opts.threads });
      prefills.set(plan.c, p);
    }
    return p;
  };
  const notes = [...runner.notes, `chunked prefill: chunk length ${chunk === 'auto' ? `per prompt among ${rec.chunks.map((p) => p.c).join(', ')}` : chunk}, chunk graphs in the scheduled order on onnxruntime (${rec.costs.source})`];
  /** Logits of the prompt ([P, V], or the last position's [V]) and the cache as model.onnx's past inputs. */
  const prefill = async (ids: number[], want: 'all' | 'last') => {
    const plan = chunk === 'auto' ? pickChunkPlan(rec, ids.length) : chunkPlanOf(rec, chunk);
    const N = Math.ceil(ids.length / plan.c);
    const { order, tabulated } = chunkOrderFor(rec, plan, N);
    notes.push(`prompt of ${ids.length} tokens: ${N} chunk(s) of ${plan.c}, ${tabulated ? 'tabulated' : 'online heuristic'} schedule`);
    const { logits, cache } = await (await prefillFor(plan)).prefill(ids, order, undefined, want);
    const past: ort.Tensor[] = decoder.cache.map((c) => {
      const [, l, kv] = /^past_key_values\.(\d+)\.(key|value)$/.exec(c.name)!;
      return cacheTensor(cache, (kv === 'key' ? cache.k : cache.v)[Number(l)], ids.length);
    });
    return { logits, past };
  };
  return {
    ...runner,
    notes,
    logits: async (ids) => (await prefill(ids, 'all')).logits,
    async generate(promptIds, o) {
      const V = spec.vocabSize;
      const sampler = new Sampler(o);
      const stop = new Set(o.stopIds ?? spec.eosTokenIds);
      const out: number[] = [];
      if (o.maxTokens <= 0) return out;
      const first = await prefill(promptIds, 'last');
      let logits = first.logits.subarray(first.logits.length - V);
      let past = first.past;
      for (let length = promptIds.length; ; length++) {
        const next = sampler.next(logits);
        out.push(next);
        o.onToken?.(next);
        if (out.length >= o.maxTokens || stop.has(next)) return out;
        const r = await decoder.forward([next], past, length);
        logits = r.logits;
        past = r.present;
      }
    },
    async close() {
      for (const p of prefills.values()) await (await p).close();
      await runner.close();
    },
  };
}
